"""Per-op eager overhead of flow next to PyTorch, measured in one run on the same machine.

Each case runs one small op (or a small fixed program) on tiny tensors, so the time is almost
all framework overhead: argument handling, type promotion, dispatch, wrapping the result and
recording autograd. Both frameworks use 2 threads.

    python benchmarks/overhead.py                 # the table (takes about a minute)
    python benchmarks/overhead.py --quick         # a smoke run (a few seconds; numbers are noisy)
    python benchmarks/overhead.py --json out.json # also write the figures as JSON
    python benchmarks/overhead.py --timer cpu     # CPU time of this process (steadier on a busy machine)

Method (timeit-style): a case's statement runs ``number`` times in a loop with the garbage
collector off; that is one run, giving a time per op. ``runs`` runs alternate between flow and
PyTorch so that drifts in machine load hit both, and each framework's figure is the median of
its runs. The ratio is flow's median over PyTorch's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import timeit

# _common sets the thread-count variables before NumPy and PyTorch load: import it first.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import TIMERS, machine_info, setup_flow, setup_torch  # noqa: E402


def make_cases(flow, torch):
    """(name, description, statement, flow env, torch env, NumPy statement or None) for each case.

    The NumPy statement is the raw array call flow's kernel makes, for scale: flow's own
    overhead is its time minus that.
    """
    import numpy as np

    f = {"np": np}
    t = {}
    f["a"], f["b"] = flow.randn(4), flow.randn(4)
    t["a"], t["b"] = torch.randn(4), torch.randn(4)
    f["ag"], f["bg"] = flow.randn(4, requires_grad=True), flow.randn(4, requires_grad=True)
    t["ag"], t["bg"] = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    f["m1"], f["m2"] = flow.randn(16, 16), flow.randn(16, 16)
    t["m1"], t["m2"] = torch.randn(16, 16), torch.randn(16, 16)
    f["na"], f["nb"] = f["a"].numpy(), f["b"].numpy()
    f["nm1"], f["nm2"] = f["m1"].numpy(), f["m2"].numpy()

    def chain(x, w):
        y = x
        for _ in range(10):
            y = y + w
        y.sum().backward()

    f["chain"] = t["chain"] = chain
    f["x"], f["w"] = flow.randn(4, requires_grad=True), flow.randn(4, requires_grad=True)
    t["x"], t["w"] = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    return [
        ("add", "a + b, shape (4,), no grad", "a + b", f, t, "np.add(na, nb)"),
        (
            "add (autograd)",
            "a + b, shape (4,), inputs require grad (records a node)",
            "ag + bg",
            f,
            t,
            "np.add(na, nb)",
        ),
        ("matmul 16x16", "m1 @ m2, 16x16 float32, no grad", "m1 @ m2", f, t, "np.matmul(nm1, nm2)"),
        ("10 adds + backward", "y = x; 10 x (y = y + w); y.sum().backward(), shape (4,)", "chain(x, w)", f, t, None),
    ]


def measure(stmt: str, env: dict, number: int, timer) -> float:
    """Seconds per execution of ``stmt`` over one run of ``number`` executions (gc off, as timeit)."""
    return timeit.Timer(stmt, timer=timer, globals=env).timeit(number) / number


def run(number: int, runs: int, warmup: int, timer: str = "wall") -> dict:
    flow = setup_flow()
    torch = setup_torch()
    clock = TIMERS[timer]
    results = []
    for name, desc, stmt, fenv, tenv, np_stmt in make_cases(flow, torch):
        n = max(1, number // 10) if "backward" in name else number
        measure(stmt, fenv, warmup, clock)
        measure(stmt, tenv, warmup, clock)
        ft, tt, nt = [], [], []
        for _ in range(runs):  # alternate so that load drifts hit both frameworks
            ft.append(measure(stmt, fenv, n, clock))
            tt.append(measure(stmt, tenv, n, clock))
            if np_stmt:
                nt.append(measure(np_stmt, fenv, n, clock))
        fm, tm = statistics.median(ft), statistics.median(tt)
        results.append(
            {
                "case": name,
                "what": desc,
                "number": n,
                "runs": runs,
                "flow_us": fm * 1e6,
                "torch_us": tm * 1e6,
                "ratio": fm / tm,
                "numpy_us": statistics.median(nt) * 1e6 if nt else None,
                "flow_min_us": min(ft) * 1e6,
                "torch_min_us": min(tt) * 1e6,
            }
        )
    machine = machine_info()
    machine.update(torch=torch.__version__, flow=flow.__version__, timer=timer)
    return {"machine": machine, "results": results}


def print_table(report: dict, out=sys.stdout) -> None:
    m = report["machine"]
    print(
        f"machine: {m['cpu']}, {m['cores']} cores, {m['threads']} threads each; Python {m['python']}, "
        f"NumPy {m['numpy']} ({m['blas']}), torch {m['torch']}, flow {m['flow']}; {m['timer']} time",
        file=out,
    )
    print(f"{'case':<22}{'flow (us)':>11}{'torch (us)':>12}{'flow/torch':>12}{'NumPy call (us)':>17}", file=out)
    for r in report["results"]:
        npc = f"{r['numpy_us']:.2f}" if r["numpy_us"] is not None else "-"
        print(f"{r['case']:<22}{r['flow_us']:>11.2f}{r['torch_us']:>12.2f}{r['ratio']:>12.2f}{npc:>17}", file=out)
    print(
        "(medians of alternating runs; a run times a loop of the statement with gc off; 'NumPy call' is the "
        "raw array call flow's kernel makes)",
        file=out,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--number", type=int, default=20000, help="executions per run (a tenth for backward cases)")
    p.add_argument("--runs", type=int, default=15, help="runs per framework and case (median taken)")
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument(
        "--timer",
        choices=sorted(TIMERS),
        default="wall",
        help="wall: elapsed time (default); cpu: this process's CPU time, steadier on a busy machine",
    )
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    args = p.parse_args(argv)
    number, runs, warmup = args.number, args.runs, 2000
    if args.quick:
        number, runs, warmup = 200, 3, 20
    report = run(number, runs, warmup, args.timer)
    print_table(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
