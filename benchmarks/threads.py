"""1 -> 2 thread scaling of training steps: flow (with and without its CPU thread policy) next to PyTorch.

    python benchmarks/threads.py                          # resnet18, mlp, gpt; 3 rounds
    python benchmarks/threads.py --models resnet18 --rounds 5 --json out.json

Variants: ``flow`` (the policy of flow.backends.cpu.threads: OpenBLAS single-threaded, GEMM called
from flow's OpenMP threads), ``flow-nopolicy`` (``FLOW_CPU_THREAD_POLICY=0``: OpenBLAS's own pool next
to flow's OpenMP one, the code path from before the policy) and ``torch``.

Method. Every (variant, threads, model) runs in a fresh process (OMP/OPENBLAS/MKL_NUM_THREADS and
``set_num_threads`` at the thread count) that times each training step with both the wall clock and
the process's CPU time. A round runs every variant at 1 and at 2 threads once, in an order that
alternates between rounds, so drifts in machine load hit all of them. Reported per variant: medians
over all timed steps of all rounds, the range of the per-process medians, the 1 -> 2 speed-up of the
wall time (t1 / t2; 2.0 is perfect) and the CPU growth (cpu2 / cpu1; 1.0 is no CPU wasted on
spinning). The 1-minute load average is recorded before each process: on a shared machine a load
above the core count means the 2-thread figures are pessimistic for every variant alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import _common as C

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("flow", "flow-nopolicy", "torch")
STEPS = {"resnet18": (2, 5), "mlp": (5, 30), "gpt": (2, 8)}  # (warmup, timed) per process


def worker(variant: str, model: str, threads: int, warmup: int, steps: int) -> dict:
    """Time ``steps`` training steps of ``model`` in this process: wall and CPU seconds per step."""
    import models as M

    fw = C.setup("torch" if variant == "torch" else "flow", threads)
    fw.manual_seed(0)
    _, _, step = M.make_workload(fw, model, M.make_batch(model))
    for _ in range(warmup):
        step()
    wall, cpu = [], []
    for _ in range(steps):
        w0, c0 = time.perf_counter(), time.process_time()
        step()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    out = {"wall": wall, "cpu": cpu}
    if variant != "torch":
        from flow.backends.cpu import threads as policy

        out["blas_threads"] = policy.blas_get_num_threads()
        out["policy"] = policy.BLAS_PATH is not None
    return out


def run_one(variant: str, model: str, threads: int) -> dict:
    env = dict(os.environ)
    for var in C.THREAD_VARS:
        env[var] = str(threads)
    env["FLOW_CPU_THREAD_POLICY"] = "0" if variant == "flow-nopolicy" else "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", variant, model, str(threads)]
    load = os.getloadavg()[0]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{variant} {model} x{threads} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["load"] = load
    return res


def summarise(runs: list[dict]) -> dict:
    wall = [t for r in runs for t in r["wall"]]
    cpu = [t for r in runs for t in r["cpu"]]
    per = [statistics.median(r["wall"]) for r in runs]
    return {
        "wall": statistics.median(wall),
        "cpu": statistics.median(cpu),
        "wall_range": (min(per), max(per)),
        "load": [round(r["load"], 2) for r in runs],
    }


def run(models: list[str], variants: list[str], rounds: int) -> dict:
    raw: dict = {m: {v: {1: [], 2: []} for v in variants} for m in models}
    for m in models:
        combos = [(v, t) for v in variants for t in (1, 2)]
        for k in range(rounds):
            for v, t in combos if k % 2 == 0 else combos[::-1]:
                raw[m][v][t].append(run_one(v, m, t))
                print(f"  {m} {v} x{t}: {statistics.median(raw[m][v][t][-1]['wall']):.3f} s", file=sys.stderr)
    report: dict = {"machine": C.machine_info(), "rounds": rounds, "models": {}}
    for m in models:
        report["models"][m] = {}
        for v in variants:
            s1, s2 = summarise(raw[m][v][1]), summarise(raw[m][v][2])
            report["models"][m][v] = {
                "1": s1,
                "2": s2,
                "speedup": s1["wall"] / s2["wall"],
                "cpu_growth": s2["cpu"] / s1["cpu"],
            }
    return report


def print_table(report: dict) -> None:
    print(
        f"{'model':<10}{'variant':<15}{'wall 1t':>9}{'wall 2t':>9}{'cpu 1t':>9}{'cpu 2t':>9}"
        f"{'speed-up':>10}{'cpu x':>7}  2t wall range   load (1-min)"
    )
    for m, vs in report["models"].items():
        for v, r in vs.items():
            lo, hi = r["2"]["wall_range"]
            loads = r["1"]["load"] + r["2"]["load"]
            print(
                f"{m:<10}{v:<15}{r['1']['wall']:>9.3f}{r['2']['wall']:>9.3f}{r['1']['cpu']:>9.3f}{r['2']['cpu']:>9.3f}"
                f"{r['speedup']:>10.2f}{r['cpu_growth']:>7.2f}  {lo:.3f}-{hi:.3f}    {min(loads):.1f}-{max(loads):.1f}"
            )
    print("(seconds per step, medians; speed-up = wall 1t / wall 2t; cpu x = cpu 2t / cpu 1t)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,mlp,gpt", help=f"comma-separated, from {', '.join(STEPS)}")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    p.add_argument("--rounds", type=int, default=3, help="processes per variant, model and thread count")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument("--worker", nargs=3, metavar=("VARIANT", "MODEL", "THREADS"), help="internal: one process")
    args = p.parse_args(argv)
    if args.worker:
        v, m, t = args.worker
        w, s = STEPS[m]
        print(json.dumps(worker(v, m, int(t), w, s)))
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for m in models:
        if m not in STEPS:
            p.error(f"unknown model {m!r}; choose from {', '.join(STEPS)}")
    for v in variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    report = run(models, variants, args.rounds)
    print_table(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
