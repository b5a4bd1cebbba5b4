"""Data-parallel training throughput: flow DDP, flow graph mode on global tensors and PyTorch DDP
(gloo), at 1 and 2 ranks.

    python benchmarks/dist.py                 # MLP and GPT, 3 rounds
    python benchmarks/dist.py --quick         # fewer steps, 1 round (a smoke test)

Method. Each (framework, model, ranks) runs as its own MPI job (``mpiexec -n N``, both
frameworks: torch's gloo group is formed from the MPI ranks), one BLAS thread per rank, the
frameworks alternating round by round. Every rank trains on its own batch of the benchmark's
per-rank size (weak scaling: 2 ranks process twice the samples per step), so

- throughput = ranks x per-rank batch / median step time (rank 0's clock, every step ends in an
  all-reduce, so the ranks move together);
- scaling efficiency = throughput at 2 ranks / (2 x throughput at 1 rank);
- flow / torch = the throughput ratio at the same number of ranks;
- hidden share (flow): 1 - (time backward waits for the all-reduces at its end) / (time the same
  all-reduces take when run alone after the step), the part of the communication that overlapped
  the rest of backward.

"flow-graph" is the same training as flow's data parallelism with global tensors compiled by
``nn.Graph``: parameters broadcast, each rank's batch the piece of a batch split on dim 0, the
optimizer inside the step, the gradients' all-reduces in buckets (the ``gradient_buckets`` pass).

The models are the ones of models.py (benchmark MLP, GPT with dropout 0.1), SGD / AdamW as there.
On a 2-core machine two ranks take both cores: the 1-rank run leaves one idle, so efficiency
below 100% includes that the second rank competes with the MPI progress and the OS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import _common as C

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("mlp", "gpt")
FRAMEWORKS = ("flow", "flow-graph", "torch")
STEPS = {"mlp": (5, 30), "gpt": (2, 8)}  # (warmup, timed)
QUICK = {"mlp": (1, 4), "gpt": (1, 2)}


def _mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


# -- one rank ----------------------------------------------------------------------------------
def worker(framework: str, model: str, warmup: int, steps: int) -> None:
    rank = int(os.environ.get("PMI_RANK", 0))
    world = int(os.environ.get("PMI_SIZE", 1))
    fw = C.setup("flow" if framework == "flow-graph" else framework, 1)
    from models import make_batch, make_workload

    if framework == "torch":
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", os.environ.get("FLOW_BENCH_PORT", "29531"))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        wrap = fw.nn.parallel.DistributedDataParallel
    else:
        wrap = fw.nn.parallel.DistributedDataParallel
    fw.manual_seed(0)
    batch = make_batch(model, seed=rank)  # each rank its own samples
    m, opt, _ = make_workload(fw, model, batch)
    ddp = m if framework == "flow-graph" else wrap(m)  # (opt holds m's parameters, which DDP keeps in place)
    t = fw.from_numpy
    if model == "mlp":
        inputs, target = (t(batch["x"]),), t(batch["y"])
        loss_fn = fw.nn.functional.cross_entropy
    else:
        inputs, target = (t(batch["idx"]), t(batch["pos"])), t(batch["y"])

        def loss_fn(logits, y):
            return fw.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)

    if framework == "flow-graph":
        step = _graph_step(fw, m, opt, inputs, target, loss_fn)
    waited = [0.0]
    if framework == "flow" and world > 1:
        finish = ddp._finish

        def timed_finish():
            s = time.perf_counter()
            finish()
            waited[0] += time.perf_counter() - s

        ddp._finish = timed_finish

    def ddp_step():
        opt.zero_grad()
        loss = loss_fn(ddp(*inputs), target)
        loss.backward()
        opt.step()
        return loss

    if framework != "flow-graph":
        step = ddp_step

    for _ in range(warmup):
        step()
    waited[0] = 0.0
    times = []
    for _ in range(steps):
        s = time.perf_counter()
        step()
        times.append(time.perf_counter() - s)
    out = {"times": times, "batch": int(inputs[0].shape[0])}
    if framework == "flow" and world > 1:
        # the same all-reduces alone, to compare with what backward waited for
        comm = ddp._comm
        flats = [sum(b.sizes) for b in ddp._buckets]
        import numpy as np

        bufs = [np.zeros(n, dtype=np.float32) for n in flats]
        comm.barrier()
        s = time.perf_counter()
        for _ in range(steps):
            for buf in bufs:
                comm.all_reduce(buf)
        out["comm_alone_s"] = (time.perf_counter() - s) / steps
        out["waited_s"] = waited[0] / steps
    if framework == "torch":
        import torch.distributed as dist

        dist.destroy_process_group()
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def _graph_step(fw, m, opt, inputs, target, loss_fn):
    """The step as an nn.Graph on global tensors: each rank's batch is its piece of a split batch."""
    p = fw.placement.all("cpu")
    B, S0 = fw.sbp.broadcast, fw.sbp.split(0)
    m.to_global(p, B)  # rank 0's initial weights (every rank seeded alike)
    ins = tuple(x.to_global(p, S0 if x.ndim > 1 else B) for x in inputs)  # (GPT positions: whole)
    tgt = target.to_global(p, S0)

    class Step(fw.nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, inputs, target):
            loss = loss_fn(self.m(*inputs), target)
            loss.backward()
            return loss

    g = Step()
    return lambda: g(ins, tgt)


# -- the side-by-side run ----------------------------------------------------------------------
def run_job(framework: str, model: str, ranks: int, warmup: int, steps: int, port: int) -> dict:
    env = dict(os.environ, FLOW_BENCH_PORT=str(port))
    for var in C.THREAD_VARS:
        env[var] = "1"
    cmd = [
        _mpiexec(),
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "mpi4py",
        os.path.abspath(__file__),
        "--worker",
        framework,
        model,
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env, timeout=1800)
    if p.returncode != 0:
        tail = f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
        raise RuntimeError(f"{framework} {model} x{ranks} failed ({p.returncode}):\n{tail}")
    line = [x for x in p.stdout.splitlines() if "RESULT " in x][-1]
    return json.loads(line.split("RESULT ", 1)[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "MODEL"))
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="write the report here too")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], a.warmup, a.steps)
        return
    rounds = 1 if a.quick else a.rounds
    report = {"machine": C.machine_info(), "load_before": os.getloadavg(), "results": []}
    port = 29600
    for model in a.models.split(","):
        w, s = (QUICK if a.quick else STEPS)[model]
        per: dict = {}
        for r in range(rounds):
            order = FRAMEWORKS if r % 2 == 0 else tuple(reversed(FRAMEWORKS))
            for fw in order:
                for ranks in (1, 2):
                    port += 1
                    res = run_job(fw, model, ranks, w, s, port)
                    d = per.setdefault((fw, ranks), {"medians": [], "hidden": []})
                    d["medians"].append(C.median(res["times"]))
                    d["batch"] = res["batch"]
                    if "comm_alone_s" in res and res["comm_alone_s"] > 0:
                        d["hidden"].append(1 - min(res["waited_s"] / res["comm_alone_s"], 1.0))
                    print(
                        f"  {model} {fw} x{ranks} round {r + 1}: median step {d['medians'][-1] * 1e3:.1f} ms",
                        file=sys.stderr,
                        flush=True,
                    )
        row = {"model": model}
        for (fw, ranks), d in per.items():
            med = C.median(d["medians"])
            row[f"{fw}_x{ranks}"] = {
                "step_ms": med * 1e3,
                "step_ms_range": [min(d["medians"]) * 1e3, max(d["medians"]) * 1e3],
                "samples_per_s": ranks * d["batch"] / med,
                "hidden_share": C.median(d["hidden"]) if d["hidden"] else None,
            }
        for fw in FRAMEWORKS:
            row[f"{fw}_scaling"] = row[f"{fw}_x2"]["samples_per_s"] / (2 * row[f"{fw}_x1"]["samples_per_s"])
        for ranks in (1, 2):
            torch_rate = row[f"torch_x{ranks}"]["samples_per_s"]
            row[f"ratio_x{ranks}"] = row[f"flow_x{ranks}"]["samples_per_s"] / torch_rate
            row[f"graph_ratio_x{ranks}"] = row[f"flow-graph_x{ranks}"]["samples_per_s"] / torch_rate
        report["results"].append(row)
    report["load_after"] = os.getloadavg()
    print_table(report)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


def print_table(report: dict) -> None:
    m = report["machine"]
    print(
        f"machine: {m['cpu']}, {m['cores']} cores; 1 BLAS thread per rank; load {report['load_before'][0]:.2f} "
        f"before, {report['load_after'][0]:.2f} after"
    )
    print(
        f"{'model':<6}{'ranks':>6}{'flow ddp/s':>12}{'flow graph/s':>14}{'torch/s':>10}{'ddp/torch':>11}"
        f"{'graph/torch':>13}{'flow ddp ms':>22}{'flow graph ms':>22}{'torch ms':>22}{'hidden':>8}"
    )

    def ms(d):
        return f"{d['step_ms']:.1f} ({d['step_ms_range'][0]:.1f}-{d['step_ms_range'][1]:.1f})"

    for row in report["results"]:
        for ranks in (1, 2):
            f, g, t = row[f"flow_x{ranks}"], row[f"flow-graph_x{ranks}"], row[f"torch_x{ranks}"]
            hid = "-" if f["hidden_share"] is None else f"{f['hidden_share'] * 100:.0f}%"
            print(
                f"{row['model']:<6}{ranks:>6}{f['samples_per_s']:>12.1f}{g['samples_per_s']:>14.1f}"
                f"{t['samples_per_s']:>10.1f}{row[f'ratio_x{ranks}']:>11.2f}{row[f'graph_ratio_x{ranks}']:>13.2f}"
                f"{ms(f):>22}{ms(g):>22}{ms(t):>22}{hid:>8}"
            )
        sc = ", ".join(f"{fw} {row[f'{fw}_scaling'] * 100:.0f}%" for fw in FRAMEWORKS)
        print(f"{'':<6}{'scaling 2 vs 1':>20}: {sc}")


if __name__ == "__main__":
    main()
