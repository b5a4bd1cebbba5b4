"""Predicted vs measured step time of flow-dist's cost model on this machine.

    python benchmarks/plan_validate.py [--alpha-beta ~/.cache/flow/plan/mpi.json] [--steps 7]

A small GPT (float64, AdamW) trained with data parallelism at 1, 2 and 4 ranks (nn.Graph on global
tensors, batch split S(0), parameters broadcast), with tensor parallelism at 2 and 4 ranks
(``tensor_parallel(model, mesh, "gpt")``, eager) and with 1F1B pipelines (2 stages; DP2 x PP2 at 4).
Each run reports the median of ``--steps`` timed steps after 2 warm-up steps, the
collectives its steps called (count and time per backend call), and an alpha-beta fit of the MPI
link probed between its steps (LINK_SIZES; the same job, the same load); the prediction is
``flow_dist.plan.simulate`` with this CPU's profile (measured with one BLAS thread, as the ranks
run), that in-run link and, for the graph runs, the loss all-reduces the compiled graph holds
(``flow_dist.plan.graph_count``). "old pred" is the previous model: benchmarks/mpi_alpha_beta.py's
JSON (measured apart) and the gradient all-reduce only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = dict(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=128)
BATCH = 16
PP_MICRO_BATCHES = 4
# the link is measured inside every run, between its steps: an all-reduce's latency on this machine is
# how long a rank waits for its peers to be scheduled, so it moves with the load and must be taken
# under the run's load, not minutes before. Sizes: a loss (8 B), the TP row and block messages, the
# PP activation, the DP gradient bucket (3.5 MB)
LINK_SIZES = [8, 8 << 10, 256 << 10, 1 << 20, 4 << 20]
# (label, mode, ranks): DP in graph mode; TP and PP eager, as their APIs run, against one eager process
RUNS = [
    ("dp", "dp", 1),
    ("dp", "dp", 2),
    ("dp", "dp", 4),
    ("tp/pp 1 rank (eager)", "eager", 1),
    ("tp", "tp", 2),
    ("tp", "tp", 4),
    ("pp2", "pp", 2),
    ("dp2 x pp2", "pp", 4),
]


def worker(mode: str, steps: int) -> None:
    import numpy as np

    import flow
    from flow_dist.comm.backend import get_backend
    from flow_models.nlp.gpt import GPT, GPTConfig

    flow.set_default_dtype(flow.float64)
    n = flow.env.get_world_size()
    flow.manual_seed(0)
    model = GPT(GPTConfig(**CFG))
    rng = np.random.default_rng(0)
    idx = rng.integers(0, CFG["vocab_size"], (BATCH, CFG["block_size"]))
    tgt = np.roll(idx, -1, axis=1)
    be = get_backend("cpu", None)
    extra: dict = {}
    if mode in ("dp", "graph1"):
        run = _graph_dp(flow, model, idx, tgt, n, extra)
    elif mode == "tp":
        run = _eager_tp(flow, model, idx, tgt, n)
    elif mode == "pp":
        run = _eager_pp(flow, model, idx, tgt, n)
    else:  # eager: one process, the baseline of the eager TP and PP runs
        run = _eager_local(flow, model, idx, tgt)
    calls = _count_calls()
    times, cpu = [], []
    link: dict = {"all_reduce": [[] for _ in LINK_SIZES], "ping_pong": [[] for _ in LINK_SIZES], "share": [0.0, 0.0]}
    for i in range(steps + 2):
        be.barrier()
        calls.on = i >= 2
        t, c = time.perf_counter(), time.process_time()
        run()
        calls.on = False
        be.barrier()
        if i >= 2:
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        _probe_link(be, link)
    # the share of a core this rank got (CPU time / wall time): the machine is shared, and MPI ranks
    # spin while they wait, so this overstates the share that went to compute
    share = float(np.mean(be.all_gather(np.array([sum(cpu) / sum(times)]))))
    got = {"median": float(np.median(times)), "times": times, "cpu_share": share, **extra}
    calls.restore()
    got["calls"] = {k: [c / steps, t / steps] for k, (c, t) in calls.seen.items()}  # per step: calls, seconds
    # the share of a core this rank's compute got, measured on the probes' fixed work (CPU time over
    # wall time of a section that never waits): the oversubscription as the run saw it
    got["compute_share"] = float(np.mean(be.all_gather(np.array([link["share"][0] / link["share"][1]]))))
    if n > 1:
        got["link"] = _fit_link(be, link, n)
    if flow.env.get_rank() == 0:
        print(json.dumps(got), flush=True)


class _count_calls:
    """Counts and times every call of the MPI backend's collectives while ``on`` (rank-local wall time
    inside the call; an asynchronous one is timed until its wait returns)."""

    KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv", "all_to_all")

    def __init__(self) -> None:
        from flow_dist.comm.mpi import MPIBackend

        self.cls, self.on, self.seen, self.saved = MPIBackend, False, {}, {}
        for name in self.KINDS:
            self.saved[name] = getattr(MPIBackend, name)
            setattr(MPIBackend, name, self._wrap(name, self.saved[name]))

    def _add(self, name: str, seconds: float) -> None:
        c, t = self.seen.get(name, (0, 0.0))
        self.seen[name] = (c + 1, t + seconds)

    def _wrap(self, name: str, inner):
        def call(backend, *args, **kwargs):
            if not self.on:
                return inner(backend, *args, **kwargs)
            t = time.perf_counter()
            r = inner(backend, *args, **kwargs)
            if not kwargs.get("async_op"):
                self._add(name, time.perf_counter() - t)
                return r
            wait = r.wait

            def timed_wait():
                out = wait()
                self._add(name + " (async)", time.perf_counter() - t)
                return out

            r.wait = timed_wait
            return r

        return call

    def restore(self) -> None:
        for name, f in self.saved.items():
            setattr(self.cls, name, f)


def _probe_link(be, link: dict) -> None:
    """One all-reduce of each of LINK_SIZES and one ping-pong between ranks 0 and 1 (between steps)."""
    import numpy as np

    work = np.full((96, 96), 1e-3)
    for j, nb in enumerate(LINK_SIZES):
        buf = np.ones(nb // 8)
        be.barrier()
        # a collective of a step follows compute, not a barrier: on oversubscribed cores the ranks
        # finish the same work at different times (each is descheduled at its own moments), and the
        # collective waits for the last; a fixed piece of work before it (a few ms, as between a
        # step's collectives) reproduces that skew
        t, c = time.perf_counter(), time.process_time()
        for _ in range(100):
            work = work @ work
        link["share"][0] += time.process_time() - c
        link["share"][1] += time.perf_counter() - t
        if be.size == 1:
            continue
        t = time.perf_counter()
        be.all_reduce(buf)
        link["all_reduce"][j].append(time.perf_counter() - t)
        got = np.empty_like(buf)
        be.barrier()
        t = time.perf_counter()
        if be.rank == 0:
            be.send(buf, 1)
            be.recv(got, 1)
        elif be.rank == 1:
            be.recv(got, 0)
            be.send(buf, 0)
        link["ping_pong"][j].append((time.perf_counter() - t) / 2)  # one way


def _fit_link(be, link: dict, n: int) -> dict:
    """mpi_alpha_beta.py's JSON for this run's rank count, from the probes taken between its steps
    (per size the mean of the probes, the slowest rank's; ping-pong: rank 0's). The mean, not the
    median: a probe here is bimodal (0.1 ms when the peers are on cores, 10-40 ms when one waits
    for a time slice), and a step's collectives add up to their expected time."""
    import numpy as np

    from flow_dist.plan.collectives import fit_alpha_beta

    ar = [float(np.max(be.all_gather(np.array([np.mean(ts)])))) for ts in link["all_reduce"]]
    pp = [float(np.mean(ts)) for ts in link["ping_pong"]]
    pp = [float(x) for x in be.all_gather(np.array(pp))[0]]
    out: dict = {"sizes": LINK_SIZES}
    for key, seconds in (("all_reduce", ar), ("ping_pong", pp)):
        f = fit_alpha_beta(LINK_SIZES, seconds)
        out[key] = {str(n): {"alpha": f.alpha, "beta": 1.0 / f.bandwidth, "seconds": seconds}}
    out["ping_pong_by_ranks"] = out["ping_pong"]
    out["ping_pong"] = out["ping_pong"][str(n)]
    return out


def _graph_dp(flow, model, idx, tgt, n, extra: dict):
    """nn.Graph on global tensors: parameters broadcast, the batch split S(0). ``extra`` receives the
    compiled graph's collectives besides the gradient buckets (the loss's P->B) after the first step."""
    from flow_dist.handler import implicit_broadcast
    from flow_dist.plan.graph_count import graph_collectives

    P = flow.placement("cpu", list(range(n)))
    B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
    model.to_global(P, B)
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    class Step(flow.nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.m = model
            self.add_optimizer(opt)

        def build(self, x, y):
            with implicit_broadcast():  # the GPT's positions are a local arange: the same on every rank
                loss = self.m.loss(self.m(x), y)
            loss.backward()
            return loss

    step = Step()
    x = flow.tensor(idx).to_global(P, B).to_global(sbp=S0)
    y = flow.tensor(tgt).to_global(P, B).to_global(sbp=S0)

    def run():
        loss = step(x, y).detach()
        if "loss_collectives" not in extra:
            counted = graph_collectives(step.ir)
            # reading a partial-sum loss back all-reduces it once more, outside the graph
            read = int(n > 1 and any(s.kind == "P" for s in loss.sbp))
            extra.update(loss_collectives=counted.small + read, graph_collectives=dict(counted.counts))
        return float(loss.numpy())

    return run


def _eager_local(flow, model, idx, tgt):
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    x, y = flow.tensor(idx), flow.tensor(tgt)

    def run():
        opt.zero_grad()
        loss = model.loss(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach().numpy())

    return run


def _eager_tp(flow, model, idx, tgt, n):
    """Megatron's GPT split through flow_dist.parallel.tensor_parallel, eager."""
    from flow_dist.handler import implicit_broadcast
    from flow_dist.parallel import tensor_parallel

    P = flow.placement("cpu", list(range(n)))
    tensor_parallel(model, P, "gpt")
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    B = flow.sbp.broadcast
    x, y = flow.tensor(idx).to_global(P, B), flow.tensor(tgt).to_global(P, B)

    def run():
        opt.zero_grad()
        with implicit_broadcast():
            loss = model.loss(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach().to_local().numpy())

    return run


def _eager_pp(flow, model, idx, tgt, n):
    """2 stages of 1F1B over 4 micro-batches; 4 ranks: 2 data-parallel replicas of the pipeline."""
    from flow_dist import pipeline as pp

    mesh = pp.pipeline_mesh(num_stages=2)
    module = pp.gpt_stages(model, 2, mesh.stage_index)
    stage = pp.PipelineStage(module, mesh.stage_index, 2, group_ranks=mesh.group_ranks, dp_ranks=mesh.dp_ranks)
    schedule = pp.Schedule1F1B(stage, n_microbatches=PP_MICRO_BATCHES, loss_fn=model.loss)
    opt = flow.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.1)
    dp = n // 2
    r = flow.env.get_rank() // 2  # this rank's replica (pipeline_mesh: consecutive ranks, consecutive stages)
    rows = slice(r * BATCH // dp, (r + 1) * BATCH // dp)
    x, y = flow.tensor(idx[rows]), flow.tensor(tgt[rows])

    def run():
        opt.zero_grad()
        if stage.is_first:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=[])
        opt.step()

    return run


def measure(mode: str, n: int, steps: int) -> dict:
    """One run under mpiexec; meanwhile the machine's runnable threads are sampled every 20 ms (the
    other jobs' load during the run is an input of the prediction, as the core count is)."""
    from flow_dist.plan.calibrate import runnable

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = ["timeout", "600", mpiexec, "-n", str(n), sys.executable, "-m", "mpi4py", __file__]
    cmd += ["--worker", mode, "--steps", str(steps)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=_one_thread())
        samples = []
        while p.poll() is None:
            r = runnable()
            if r is not None:
                samples.append(r)
            time.sleep(0.02)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode:
        raise RuntimeError(f"{mode} at {n} ranks failed:\n{stdout}{stderr}")
    got = json.loads(stdout.strip().splitlines()[-1])
    got["runnable"] = samples
    return got


def _one_thread() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")


def strategy(mode: str, n: int, loss_collectives: int = 0):
    """The simulator's strategy for one of RUNS (``loss_collectives``: the DP graph's, as counted)."""
    from flow_dist.plan import Strategy

    if mode == "dp":
        # one core per rank (or less): nothing to overlap with
        return Strategy(dp=n, overlap=False, loss_collectives=loss_collectives)
    if mode == "tp":
        return Strategy(tp=n)
    if mode == "pp":
        return Strategy(dp=n // 2, pp=2, micro_batches=PP_MICRO_BATCHES)
    return Strategy()


def predict(
    mode: str,
    n: int,
    ab,
    dev,
    work_graph,
    work_eager,
    background: float = 0.0,
    loss_collectives: int = 0,
    cpu_share: float | None = None,
    work_tp: dict | None = None,
) -> float:
    """The simulator's step time of one of RUNS; ``work_tp``: tp degree -> the per-rank traced TP
    workload (``flow_dist.plan.tp_trace``); without it TP divides the unsplit eager trace."""
    from flow_dist.plan import Cluster, simulate

    work = work_graph if mode == "dp" else work_eager
    if mode == "tp" and work_tp is not None:
        work = work_tp[n]
    st = strategy(mode, n, loss_collectives)
    cluster = Cluster.local(n, ab, dev, background=background, cpu_share=cpu_share)
    return simulate(work, cluster, st, BATCH).step_time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha-beta", default=os.path.join(os.path.expanduser("~"), ".cache", "flow", "plan", "mpi.json"))
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the runs (alternating order)")
    ap.add_argument("--out", default=os.path.join(os.path.expanduser("~"), ".cache", "flow", "plan", "validate.json"))
    ap.add_argument("--predict-only", action="store_true", help="predict against the measurements in --out")
    ap.add_argument(
        "--only", default=None, help="comma-separated runs to measure and report, as mode+ranks (e.g. 'eager1,tp2,tp4')"
    )
    ap.add_argument("--worker", choices=["dp", "tp", "pp", "eager"], help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.steps)
        return 0
    if a.profile:  # this CPU as one rank sees it: one BLAS thread
        from dataclasses import asdict

        from flow_dist.plan.calibrate import calibrate_cpu

        print(json.dumps(asdict(calibrate_cpu())))
        return 0
    import dataclasses

    import numpy as np

    import flow
    from flow_dist.plan import DeviceProfile, gpt_workload
    from flow_dist.plan.calibrate import background_load
    from flow_dist.plan.tp_trace import tp_workload
    from flow_models.nlp.gpt import GPTConfig

    runs = RUNS
    if a.only:
        want = a.only.split(",")
        runs = [r for r in RUNS if f"{r[1]}{r[2]}" in want]
        unknown = sorted(set(want) - {f"{m}{n}" for _, m, n in RUNS})
        if unknown:
            ap.error(f"--only: unknown runs {unknown}; known: {[f'{m}{n}' for _, m, n in RUNS]}")
    if not a.predict_only:
        measured: dict = {"load_average": [list(os.getloadavg())], "runs": {}}
        for r in range(a.rounds):
            order = runs if r % 2 == 0 else runs[::-1]  # alternate, so a load drift hits every run alike
            for _, mode, n in order:
                got = measure(mode, n, a.steps)
                measured["runs"].setdefault(f"{mode}{n}", []).append(got)
                print(f"round {r}: {mode} at {n}: {got['median'] * 1e3:.1f} ms", flush=True)
            measured["load_average"].append(list(os.getloadavg()))
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(measured, f, indent=1)
    with open(a.out) as f:
        measured = json.load(f)
    # calibrated after the runs, in a process of its own (one BLAS thread); a stored profile from before
    # the global-tensor dispatch cost was calibrated is measured again
    if "global_overhead" not in measured.get("profile", {}):
        p = subprocess.run([sys.executable, __file__, "--profile"], capture_output=True, text=True, env=_one_thread())
        if p.returncode:
            raise RuntimeError(f"calibration failed:\n{p.stdout}{p.stderr}")
        measured["profile"] = json.loads(p.stdout.strip().splitlines()[-1])
        with open(a.out, "w") as f:
            json.dump(measured, f, indent=1)
    prof = measured["profile"]
    dev = DeviceProfile.from_dict(prof)
    ab = a.alpha_beta if os.path.isfile(a.alpha_beta) else None
    flow.set_default_dtype(flow.float64)
    work_graph = gpt_workload(GPTConfig(**CFG), trace_layers=CFG["n_layer"], name="gpt-small")
    work_eager = dataclasses.replace(work_graph, mode="eager")
    # TP: each rank's own step (the split model's local trace), eager on global tensors
    work_tp = {n: tp_workload(GPTConfig(**CFG), n, trace_layers=CFG["n_layer"]) for _, m, n in runs if m == "tp"}
    print(f"device: {dev.flops / 1e9:.1f} GFLOP/s peak GEMM, {dev.mem_bandwidth / 1e9:.1f} GB/s per rank (1 thread)")
    print(
        f"dispatch per op: eager {dev.eager_overhead * 1e6:.1f} us, graph {dev.graph_overhead * 1e6:.1f} us, "
        f"global tensors +{dev.global_overhead * 1e6:.1f} us"
    )
    print(f"model: {work_graph.params / 1e6:.2f}M parameters, batch {BATCH} x {CFG['block_size']}, float64, AdamW")
    print(f"MPI link: {ab or 'not measured (run benchmarks/mpi_alpha_beta.py)'}")
    print("load average: " + "; ".join(" ".join(f"{x:.2f}" for x in la) for la in measured["load_average"]))
    # "old": the link fitted before the runs (--alpha-beta) and only the gradient all-reduce counted;
    # "pred": each round's own link (probed between its steps) and the collectives the run holds
    print(
        "| run | ranks | background | calls a step (ms in them) | all-reduce 8 B ms | old pred ms | TP divided ms "
        "| pred ms | measured ms (range) | error | compute share | pred, measured share ms (error) |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, mode, n in runs:
        if f"{mode}{n}" not in measured["runs"]:
            continue
        got = measured["runs"][f"{mode}{n}"]
        med = float(np.median([g["median"] for g in got]))
        bgs = [background_load(g["runnable"], n) for g in got]
        bg = float(np.median(bgs))
        old = predict(mode, n, ab, dev, work_graph, work_eager, bg)
        preds = [
            predict(
                mode, n, g.get("link", ab), dev, work_graph, work_eager, b, g.get("loss_collectives", 0), None, work_tp
            )
            for g, b in zip(got, bgs)
        ]
        pred = float(np.median(preds))
        # TP as before the per-rank trace: the unsplit eager trace divided, local dispatch (same link)
        divided = "-"
        if mode == "tp":
            dv = [
                predict(mode, n, g.get("link", ab), dev, work_graph, work_eager, b, g.get("loss_collectives", 0))
                for g, b in zip(got, bgs)
            ]
            divided = f"{np.median(dv) * 1e3:.1f} ({(np.median(dv) - med) / med:+.1%})"
        # the compute slowdown measured in the run instead of modelled from the runnable count
        shares = [min(1.0, g["compute_share"]) for g in got if "compute_share" in g]
        by_share = [
            predict(
                mode, n, g.get("link", ab), dev, work_graph, work_eager, 0.0, g.get("loss_collectives", 0), sh, work_tp
            )
            for g, sh in zip(got, shares)
        ]
        share_s = f"{np.median(shares):.2f}" if shares else "-"
        ps = f"{np.median(by_share) * 1e3:.1f} ({(np.median(by_share) - med) / med:+.1%})" if by_share else "-"
        lat = [g["link"]["all_reduce"][str(n)]["seconds"][0] for g in got if "link" in g]
        lat_s = f"{np.median(lat) * 1e3:.1f}" if lat else "-"
        kinds = sorted({k for g in got for k in g.get("calls", {})})
        calls = ", ".join(
            f"{np.median([g['calls'].get(k, [0, 0])[0] for g in got]):g} {k} "
            f"({np.median([g['calls'].get(k, [0, 0])[1] for g in got]) * 1e3:.0f})"
            for k in kinds
        )
        print(
            f"| {label} | {n} | {bg:.2f} | {calls or '-'} | {lat_s} | {old * 1e3:.1f} | {divided} | {pred * 1e3:.1f} | "
            f"{med * 1e3:.1f} ({min(t for g in got for t in g['times']) * 1e3:.0f}-"
            f"{max(t for g in got for t in g['times']) * 1e3:.0f}) | "
            f"{(pred - med) / med:+.1%} | {share_s} | {ps} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
