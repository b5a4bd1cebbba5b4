"""Step time of the auto-parallel plan against hand-written data and tensor parallelism (flow-dist).

python benchmarks/auto_parallel.py [--ranks 4] [--rounds 3] [--steps 5] [--n-layer 4] [--n-embd 256]

Method. The zoo GPT (float32, dropout 0, AdamW) trains eagerly on global tensors at ``--ranks``
processes under four layouts, each in its own ``mpiexec`` job, the jobs alternating round by round:

- ``auto``: ``flow_dist.auto_parallel.plan`` then ``AutoPlan.apply`` and ``shard_batch``; the
  cluster is this machine's (``Cluster.local``) with the MPI link measured in the same job just
  before planning (benchmarks/plan_validate.py's probes: an all-reduce's latency here is the
  scheduler's and moves with the load) and the other jobs' runnable threads sampled meanwhile
  (``Cluster.local(background=...)``; ``AUTO_PARALLEL_SHARE=measured``: the share of a core measured
  on the probes' fixed work instead, which docs/scaling.md found to hold for one process only);
- ``dp``: every parameter broadcast, the batch split (``dp = ranks``);
- ``tp2xdp2``: the ``"gpt"`` tensor-parallel plan on a 2 x 2 mesh, the batch split on the first axis;
- ``tp``: the ``"gpt"`` plan over all ranks (``tp = ranks``), the batch whole.

Each job runs one warm-up step, then ``--steps`` timed ones (rank 0's clock, every step ending in a
barrier); a job's figure is its median step, a layout's the median over rounds (with the range).
The load average before and after is printed: the machine is shared, so read the ranges.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAYOUTS = ("auto", "dp", "tp2xdp2", "tp")


def worker(a) -> None:
    import numpy as np

    import flow
    from flow_dist import auto_parallel as AP
    from flow_dist.parallel import tensor_parallel
    from flow_models.nlp.gpt import GPT, GPTConfig

    n = flow.env.get_world_size()
    cfg = GPTConfig(vocab_size=512, block_size=a.seq, n_layer=a.n_layer, n_head=4, n_embd=a.n_embd, dropout=0.0)
    flow.manual_seed(0)
    m = GPT(cfg)
    rng = np.random.default_rng(0)
    idx = flow.tensor(rng.integers(0, cfg.vocab_size, (a.batch, a.seq)))
    tgt = flow.tensor(rng.integers(0, cfg.vocab_size, (a.batch, a.seq)))
    S0, B = flow.sbp.split(0), flow.sbp.broadcast
    chosen, table, predicted = a.layout, "", {}
    if a.layout == "auto":
        ap = AP.plan(m, idx, n, cluster=_measured_cluster(n))
        ap.apply(m)
        chosen, table = ap.best.name, ap.explain()  # the candidates (pipelines scored too) and why
        by = {c.name: c.step_time for c in ap.candidates}
        full = "attn+mlp+vocab"
        predicted = {"auto": ap.best.step_time, "dp": by.get(f"dp{n}"), "tp": by.get(f"dp1 tp{n}[{full}]")}
        predicted["tp2xdp2"] = by.get(f"dp{n // 2} tp2[{full}]")
        x, y = ap.shard_batch(idx), ap.shard_batch(tgt)
    else:
        ranks = list(range(n))
        if a.layout == "dp":
            mesh, sbp = flow.placement("cpu", ranks=ranks), (S0,)
            m.to_global(mesh, (B,))
        elif a.layout == "tp":
            mesh, sbp = flow.placement("cpu", ranks=ranks), (B,)
            tensor_parallel(m, mesh, "gpt")
        else:
            half = n // 2
            mesh, sbp = flow.placement("cpu", ranks=[ranks[:half], ranks[half:]]), (S0, B)
            tensor_parallel(m, mesh, "gpt")
        whole = (B,) * len(sbp)
        x = idx.to_global(mesh, whole).to_global(sbp=sbp)
        y = tgt.to_global(mesh, whole).to_global(sbp=sbp)
    opt = flow.optim.AdamW(m.parameters(), lr=1e-4)
    times = []
    for s in range(a.steps + 1):
        flow.comm.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = m.loss(m(x), y)
        loss.backward()
        opt.step()
        flow.comm.barrier()
        if s:  # the first step is a warm-up
            times.append(time.perf_counter() - t0)
    if flow.env.get_rank() == 0:
        res = {"layout": a.layout, "chosen": chosen, "table": table, "times": times, "predicted": predicted}
        print("RESULT " + json.dumps(res))


def _measured_cluster(n: int):
    """``Cluster.local(n)`` with the link probed here, now (5 rounds of plan_validate's probes), and
    the background load sampled while probing."""
    import threading

    import numpy as np

    from flow_dist.comm.backend import get_backend
    from flow_dist.plan import Cluster
    from flow_dist.plan.calibrate import background_load, runnable

    sys.path.insert(0, HERE)
    from plan_validate import LINK_SIZES, _fit_link, _probe_link

    be = get_backend("cpu", None)
    samples, done = [], threading.Event()

    def sample() -> None:
        while not done.is_set():
            r = runnable()
            if r is not None:
                samples.append(r)
            time.sleep(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    link: dict = {"all_reduce": [[] for _ in LINK_SIZES], "ping_pong": [[] for _ in LINK_SIZES], "share": [0.0, 0.0]}
    for _ in range(5):
        _probe_link(be, link)
    done.set()
    th.join()
    fit = _fit_link(be, link, n)
    # every rank must plan on the same inputs: rank 0's background, the ranks' mean compute share
    bg = float(be.broadcast(np.array([background_load(samples, n) if samples else 0.0]), 0)[0])
    share = float(np.mean(be.all_gather(np.array([link["share"][0] / link["share"][1]]))))
    if os.environ.get("AUTO_PARALLEL_SHARE") == "measured":  # the probes' share instead (1-process-like)
        return Cluster.local(n, fit, cpu_share=min(1.0, share))
    return Cluster.local(n, fit, background=bg)


def _mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def run_job(a, layout: str) -> dict:
    cmd = [_mpiexec(), "-n", str(a.ranks), sys.executable, "-m", "mpi4py", os.path.abspath(__file__), "--worker"]
    cmd += ["--layout", layout, "--steps", str(a.steps), "--n-layer", str(a.n_layer), "--n-embd", str(a.n_embd)]
    cmd += ["--batch", str(a.batch), "--seq", str(a.seq)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{layout}: no result (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--layout", default="auto", choices=LAYOUTS)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a)
        return 0
    if a.ranks % 2 or a.batch % a.ranks:
        ap.error(f"--ranks must be even and divide --batch, got {a.ranks} and {a.batch}")
    print(f"GPT n_layer {a.n_layer}, n_embd {a.n_embd}, batch {a.batch} x {a.seq}, {a.ranks} ranks")
    print(f"load average before: {os.getloadavg()}")
    medians: dict = {k: [] for k in LAYOUTS}
    predicted: dict = {}
    chosen, table = None, ""
    for r in range(a.rounds):
        for layout in LAYOUTS:  # alternating: each round runs every layout once
            res = run_job(a, layout)
            medians[layout].append(statistics.median(res["times"]))
            if layout == "auto":
                chosen, table = res["chosen"], res["table"]
                for k, v in res["predicted"].items():
                    predicted.setdefault(k, []).append(v)
            print(f"  round {r + 1} {layout:<8} median step {medians[layout][-1] * 1e3:8.1f} ms", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print(f"auto-parallel chose: {chosen}\n{table}")
    print("| layout | predicted ms (median of the auto jobs) | median step ms | range ms |\n|---|---|---|---|")
    for layout in LAYOUTS:
        v = medians[layout]
        name = f"auto ({chosen})" if layout == "auto" else layout
        pv = [x for x in predicted.get(layout, []) if x is not None]
        pred = f"{statistics.median(pv) * 1e3:.1f}" if pv else "-"
        print(f"| {name} | {pred} | {statistics.median(v) * 1e3:.1f} | {min(v) * 1e3:.1f} - {max(v) * 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
