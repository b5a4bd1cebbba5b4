"""Per-op eager overhead of flow next to PyTorch, each framework in its own process.

Each case runs one small op (or a small fixed program) on tiny tensors, so the time is almost
all framework overhead: argument handling, type promotion, dispatch, wrapping the result and
recording autograd.

    python benchmarks/overhead.py                 # the table: 1 and 2 threads, 3 rounds (a few minutes)
    python benchmarks/overhead.py --quick         # a smoke run (numbers are noisy)
    python benchmarks/overhead.py --threads 2 --rounds 7 --json out.json

Method: harness.py's. A timed step is one timeit loop (garbage collector off) of ``--number``
executions of the case's statement (a tenth for the backward case), and the figure is the time per
execution; each (framework, case, thread count) runs in a fresh process per round, rounds
alternating the order, the wall clock and the process's CPU time of every loop recorded. Figures
are medians over all loops with the range of the per-process medians; the ratio is flow's median
over PyTorch's. The "NumPy call" is the raw array call flow's kernel makes (``np.add``,
``np.matmul``) timed the same way: flow's own overhead is its time minus that.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import timeit

import harness as H

# name -> (description, statement, the NumPy call flow's kernel makes or None)
CASES = {
    "add": ("a + b, shape (4,), no grad", "a + b", "np.add(na, nb)"),
    "add (autograd)": ("a + b, shape (4,), inputs require grad (records a node)", "ag + bg", "np.add(na, nb)"),
    "matmul 16x16": ("m1 @ m2, 16x16 float32, no grad", "m1 @ m2", "np.matmul(nm1, nm2)"),
    "10 adds + backward": ("y = x; 10 x (y = y + w); y.sum().backward(), shape (4,)", "chain(x, w)", None),
}


def chain(x, w) -> None:
    y = x
    for _ in range(10):
        y = y + w
    y.sum().backward()


def make_env(framework: str) -> dict:
    """The globals the statements run in: tensors of ``framework`` (for ``numpy``: the arrays flow's kernels see)."""
    import numpy as np

    if framework == "numpy":
        rng = np.random.default_rng(0)
        f32 = np.float32
        arrays = {k: rng.standard_normal(s).astype(f32) for k, s in (("na", 4), ("nb", 4))}
        arrays.update({k: rng.standard_normal((16, 16)).astype(f32) for k in ("nm1", "nm2")})
        return {"np": np, **arrays}
    fw = importlib.import_module(framework)
    env = {"chain": chain, "a": fw.randn(4), "b": fw.randn(4), "m1": fw.randn(16, 16), "m2": fw.randn(16, 16)}
    for k in ("ag", "bg", "x", "w"):
        env[k] = fw.randn(4, requires_grad=True)
    return env


def setup_case(framework: str, case: str, number: int):
    """harness setup: one timeit loop of ``number`` executions of ``case``'s statement (or its NumPy call)."""
    _, stmt, np_stmt = CASES[case]
    timer = timeit.Timer(np_stmt if framework == "numpy" else stmt, globals=make_env(framework))
    return lambda: timer.timeit(number)


def cases(number: int) -> list[H.Case]:
    out = []
    for name, (_, _, np_stmt) in CASES.items():
        n = max(1, number // 10) if "backward" in name else number
        for fw in ("flow", "torch", "numpy"):
            if fw == "numpy" and np_stmt is None:
                continue
            variant = "call" if fw == "numpy" else "eager"
            kwargs = {"framework": fw, "case": name, "number": n}
            out.append(H.Case(fw, variant, "overhead:setup_case", kwargs, group=name, ops_per_step=n, gc_off=True))
    return out


def summary(report: dict) -> list[dict]:
    """One row per case (the old report's shape), µs per op at each thread count; the top level is the first."""
    by = {}
    for r in report["results"]:
        us = {k: r[k]["median"] * 1e6 / r["ops_per_step"] for k in ("wall", "cpu")}
        by.setdefault(r["group"], {}).setdefault(r["threads"], {})[r["framework"]] = us
    rows = []
    for name, (what, _, _) in CASES.items():
        per = {}
        for t, fws in by.get(name, {}).items():
            per[t] = {
                f"{fw}_{k}_us": fws[fw][k] for fw in ("flow", "torch", "numpy") if fw in fws for k in ("wall", "cpu")
            }
            per[t]["ratio_wall"] = per[t]["flow_wall_us"] / per[t]["torch_wall_us"]
            per[t]["ratio_cpu"] = per[t]["flow_cpu_us"] / per[t]["torch_cpu_us"]
        first = per[report["threads"][0]]
        rows.append(
            {
                "case": name,
                "what": what,
                "flow_us": first["flow_wall_us"],
                "torch_us": first["torch_wall_us"],
                "ratio": first["ratio_wall"],
                "numpy_us": first.get("numpy_wall_us"),
                "threads": report["threads"][0],
                "by_threads": per,
            }
        )
    return rows


def print_table(rows: list[dict], out=sys.stdout) -> None:
    print(
        "| case | threads | flow wall µs | torch wall µs | flow/torch wall | flow cpu µs | torch cpu µs "
        "| flow/torch cpu | NumPy call wall µs |",
        file=out,
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|", file=out)
    for r in rows:
        for t, f in r["by_threads"].items():
            npc = f"{f['numpy_wall_us']:.2f}" if "numpy_wall_us" in f else "-"
            print(
                f"| {r['case']} | {t} | {f['flow_wall_us']:.2f} | {f['torch_wall_us']:.2f} | {f['ratio_wall']:.2f} "
                f"| {f['flow_cpu_us']:.2f} | {f['torch_cpu_us']:.2f} | {f['ratio_cpu']:.2f} | {npc} |",
                file=out,
            )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--number", type=int, default=20000, help="executions per timed loop (a tenth for backward)")
    H.add_args(p, rounds=3)
    args = p.parse_args(argv)
    if args.number < 1:
        p.error("--number must be >= 1")
    number, steps, warmup = (200, 3, 1) if args.quick else (args.number, 7, 1)
    report = H.run_args(args, cases(number), warmup, steps, baseline="torch eager")
    print(H.markdown(report, unit="us"))
    print()
    rows = summary(report)
    print_table(rows)
    H.write_json({"machine": report["machine"], "results": rows, "harness": report}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
