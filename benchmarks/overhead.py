"""Per-op eager overhead of flow next to PyTorch, measured in one run on the same machine.

Each case runs one small op (or a small fixed program) on tiny tensors, so the time is almost
all framework overhead: argument handling, type promotion, dispatch, wrapping the result and
recording autograd. Both frameworks use 2 threads.

    python benchmarks/overhead.py                 # the table (takes about a minute)
    python benchmarks/overhead.py --quick         # a smoke run (a few seconds; numbers are noisy)
    python benchmarks/overhead.py --json out.json # also write the figures as JSON

Method (timeit-style): a case's statement runs ``number`` times in a loop with the garbage
collector off; that is one run, giving a time per op. ``runs`` runs alternate between flow and
PyTorch so that drifts in machine load hit both, and each framework's figure is the median of
its runs. The ratio is flow's median over PyTorch's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import timeit

# Thread pools read these when they start, so they are set before NumPy and PyTorch load.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")

THREADS = 2


def _setup_flow():
    import flow

    try:
        from flow.backends.cpu import native

        if native.HAVE_NATIVE:
            native.set_num_threads(THREADS)
    except ImportError:
        pass
    return flow


def _setup_torch():
    import torch

    torch.set_num_threads(THREADS)
    return torch


def make_cases(flow, torch):
    """(name, description, flow statement, torch statement, ops per statement) for each case."""
    f = {}
    t = {}
    f["a"], f["b"] = flow.randn(4), flow.randn(4)
    t["a"], t["b"] = torch.randn(4), torch.randn(4)
    f["ag"], f["bg"] = flow.randn(4, requires_grad=True), flow.randn(4, requires_grad=True)
    t["ag"], t["bg"] = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    f["m1"], f["m2"] = flow.randn(16, 16), flow.randn(16, 16)
    t["m1"], t["m2"] = torch.randn(16, 16), torch.randn(16, 16)

    def chain(x, w):
        y = x
        for _ in range(10):
            y = y + w
        y.sum().backward()

    f["chain"] = t["chain"] = chain
    f["x"], f["w"] = flow.randn(4, requires_grad=True), flow.randn(4, requires_grad=True)
    t["x"], t["w"] = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    return [
        ("add", "a + b, shape (4,), no grad", "a + b", f, t, 1),
        ("add (autograd)", "a + b, shape (4,), inputs require grad (records a node)", "ag + bg", f, t, 1),
        ("matmul 16x16", "m1 @ m2, 16x16 float32, no grad", "m1 @ m2", f, t, 1),
        ("10 adds + backward", "y = x; 10 x (y = y + w); y.sum().backward(), shape (4,)", "chain(x, w)", f, t,
         1),
    ]


def measure(stmt: str, env: dict, number: int) -> float:
    """Seconds per execution of ``stmt`` over one run of ``number`` executions (gc off, as timeit)."""
    return timeit.Timer(stmt, globals=env).timeit(number) / number


def run(number: int, runs: int, warmup: int) -> dict:
    flow = _setup_flow()
    torch = _setup_torch()
    results = []
    for name, desc, stmt, fenv, tenv, _ in make_cases(flow, torch):
        n = max(1, number // 10) if "backward" in name else number
        measure(stmt, fenv, warmup)
        measure(stmt, tenv, warmup)
        ft, tt = [], []
        for _ in range(runs):  # alternate so that load drifts hit both frameworks
            ft.append(measure(stmt, fenv, n))
            tt.append(measure(stmt, tenv, n))
        fm, tm = statistics.median(ft), statistics.median(tt)
        results.append({"case": name, "what": desc, "number": n, "runs": runs,
                        "flow_us": fm * 1e6, "torch_us": tm * 1e6, "ratio": fm / tm,
                        "flow_min_us": min(ft) * 1e6, "torch_min_us": min(tt) * 1e6})
    import numpy as np

    return {
        "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "threads": THREADS,
                    "python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                    "flow": flow.__version__},
        "results": results,
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def print_table(report: dict, out=sys.stdout) -> None:
    m = report["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['threads']} threads each; Python {m['python']}, "
          f"NumPy {m['numpy']}, torch {m['torch']}, flow {m['flow']}", file=out)
    print(f"{'case':<22}{'flow (us)':>12}{'torch (us)':>12}{'flow/torch':>12}", file=out)
    for r in report["results"]:
        print(f"{r['case']:<22}{r['flow_us']:>12.2f}{r['torch_us']:>12.2f}{r['ratio']:>12.2f}", file=out)
    print("(medians of alternating runs; each run times a loop of the statement with gc off)", file=out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--number", type=int, default=20000, help="executions per run (a tenth for backward cases)")
    p.add_argument("--runs", type=int, default=15, help="runs per framework and case (median taken)")
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    args = p.parse_args(argv)
    number, runs, warmup = args.number, args.runs, 2000
    if args.quick:
        number, runs, warmup = 200, 3, 20
    report = run(number, runs, warmup)
    print_table(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
