"""The one runner of benchmarks/: every case in a fresh process, rounds alternating, medians with ranges.

A benchmark script describes what it measures as :class:`Case` objects (a framework, a variant such
as ``eager`` or ``graph``, and a setup function named by module and function, so that a fresh process
can import it) and hands them to :func:`run`. For every round and every thread count, each case runs
in its own subprocess (``python harness.py --worker CASE-JSON``), in an order that is reversed every
other round so that a drift in machine load hits every case alike. The worker:

1. calls ``setup(**kwargs)``, which returns the step callable, or ``(step, report)`` where
   ``report()`` returns a dict of extra figures (compile time, saved bytes, a loss ...) taken after
   the timed steps;
2. sets the thread count (OMP/OPENBLAS/MKL_NUM_THREADS are set by the parent before Python starts;
   ``torch.set_num_threads`` / ``flow.set_num_threads`` in the worker);
3. runs ``warmup`` untimed steps (the first one's wall time is kept as ``first_s``: a graph's compile)
   and ``steps`` timed ones, each measured with the wall clock, the process's CPU time and
   ``getrusage`` (user and system seconds, minor page faults);
4. reports the RSS high-water mark minus the RSS before setup (or where the setup called
   :func:`mark_baseline`), and flow's allocator peak where flow was imported.

The parent records ``os.getloadavg()`` before and after every round. Per (case, thread count) a
figure is the median over all timed steps of all rounds, with the range (min-max) of the per-process
medians; ratios are taken against a named baseline case of the same group at the same thread count.
Results print as a markdown table and, with ``--json PATH``, are written as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
FRAMEWORKS = ("flow", "torch", "numpy")
# what each timed step records; "wall" and "cpu" are the headline figures
MEASURES = ("wall", "cpu", "user", "sys", "minflt")


@dataclasses.dataclass(frozen=True)
class Case:
    """One thing to time: ``setup`` is ``"module:function"`` of a module in benchmarks/ (imported in a fresh
    process), called as ``function(**kwargs)``. ``group`` gathers the cases compared with each other (a
    model, a kernel); ``env`` is added to the worker's environment (e.g. a feature switch); the step
    time is divided by ``ops_per_step`` (a timeit-style loop of that many ops); ``gc_off`` disables the
    garbage collector while timing, as timeit does."""

    framework: str
    variant: str
    setup: str
    kwargs: dict = dataclasses.field(default_factory=dict)
    group: str = ""
    env: dict = dataclasses.field(default_factory=dict)
    ops_per_step: int = 1
    gc_off: bool = False

    def __post_init__(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"Case.framework must be one of {', '.join(FRAMEWORKS)}, got {self.framework!r}")
        module, sep, func = self.setup.partition(":")
        if not sep or not module or not func:
            raise ValueError(f"Case.setup must be 'module:function', got {self.setup!r}")
        if self.ops_per_step < 1:
            raise ValueError(f"Case.ops_per_step must be >= 1, got {self.ops_per_step}")

    @property
    def name(self) -> str:
        return f"{self.framework} {self.variant}"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Case:
        return cls(**json.loads(text))


class Skip(Exception):
    """Raised by a setup when its case cannot run here (e.g. ``torch.compile`` without a C compiler):
    the case's rows then say why instead of holding figures."""


# -- statistics and order (pure Python: tested without flow or torch) ---------------------------
def schedule(cases: Sequence[Case], threads: Sequence[int], rounds: int) -> list[list[tuple[Case, int]]]:
    """The processes of each round, in order: every (case, thread count) once, the order reversed on
    odd rounds so that no case always runs first (on a cold cache) or last (after the others' load)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not cases:
        raise ValueError("no cases to run")
    if not threads or any(t < 1 for t in threads):
        raise ValueError(f"thread counts must be >= 1, got {list(threads)}")
    combos = [(c, t) for t in threads for c in cases]
    return [combos if r % 2 == 0 else combos[::-1] for r in range(rounds)]


def summarise(per_process: Sequence[Sequence[float]]) -> dict:
    """``median`` over every value of every process, ``min``/``max`` of the per-process medians, ``best`` the
    smallest single value (the step least disturbed by the load), ``n`` values."""
    values = [v for p in per_process for v in p]
    if not values:
        raise ValueError("no values to summarise")
    medians = [statistics.median(p) for p in per_process if p]
    return {
        "median": statistics.median(values),
        "min": min(medians),
        "max": max(medians),
        "best": min(values),
        "n": len(values),
    }


def ratio(a: dict, b: dict) -> float | None:
    """``a``'s median over ``b``'s, or None where ``b``'s is zero."""
    return a["median"] / b["median"] if b["median"] else None


def aggregate(runs: dict[tuple[str, str, int], list[dict]], baseline: str | None) -> list[dict]:
    """One row per (group, case name, threads) from the workers' outputs: summaries of every measure,
    of peak memory and of the extra figures, and ratios against ``baseline`` (a case name) in the group."""
    rows = []
    for (group, name, threads), outs in runs.items():
        row: dict = {"group": group, "case": name, "threads": threads, "processes": len(outs)}
        row["framework"], row["variant"] = outs[0]["framework"], outs[0]["variant"]
        row["ops_per_step"] = outs[0].get("ops_per_step", 1)
        for m in MEASURES:
            row[m] = summarise([o["steps"][m] for o in outs])
        firsts = [[o["first_s"]] for o in outs if o["first_s"] is not None]
        row["first_s"] = summarise(firsts) if firsts else None  # None: no process ran a warm-up step
        row["peak_mib"] = summarise([[o["peak_mib"]] for o in outs])
        if all(o.get("flow_peak_mib") is not None for o in outs):
            row["flow_peak_mib"] = summarise([[o["flow_peak_mib"]] for o in outs])
        keys = sorted({k for o in outs for k, v in o["extra"].items() if isinstance(v, (int, float))})
        row["extra"] = {k: summarise([[o["extra"][k]] for o in outs if k in o["extra"]]) for k in keys}
        row["extra_last"] = outs[-1]["extra"]  # non-numeric figures (dicts of bytes by dtype ...) as reported
        rows.append(row)
    if baseline is not None:
        base = {(r["group"], r["threads"]): r for r in rows if r["case"] == baseline}
        for r in rows:
            b = base.get((r["group"], r["threads"]))
            r["baseline"] = baseline if b else None
            r["ratio_wall"] = ratio(r["wall"], b["wall"]) if b else None
            r["ratio_cpu"] = ratio(r["cpu"], b["cpu"]) if b else None
    return rows


def fmt(s: dict, scale: float = 1.0, digits: int = 2) -> str:
    """``median [min-max]`` of a summary, times ``scale``."""
    return f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f}]"


def markdown(report: dict, unit: str = "ms", columns: Sequence[str] = ("wall", "cpu")) -> str:
    """The rows of ``report`` as a markdown table: time per op in ``unit`` (median [range]), ratios, peak, load."""
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    head = ["group", "case", "threads", *(f"{c} {unit}" for c in columns), "wall / base", "cpu / base", "peak MiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for r in report["results"]:
        if "skipped" in r:
            lines.append(f"| {r['group']} | {r['case']} | {r['threads']} | skipped: {r['skipped']} |")
            continue
        per_op = scale / r.get("ops_per_step", 1)
        cells = [r["group"], r["case"], str(r["threads"]), *(fmt(r[c], per_op) for c in columns)]
        for k in ("ratio_wall", "ratio_cpu"):
            cells.append(f"{r[k]:.2f}" if r.get(k) is not None else "-")
        cells.append(fmt(r["peak_mib"], digits=1))
        lines.append("| " + " | ".join(cells) + " |")
    loads = [x for ld in report["loads"] for x in (ld["before"][0], ld["after"][0])]
    base = report.get("baseline")
    lines.append(
        f"\n(median over all timed steps, [range of the per-process medians]; {report['rounds']} round(s), "
        f"alternating; ratios against {base or 'no baseline'}; 1-min load average over the rounds "
        f"{min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} cores)"
    )
    return "\n".join(lines)


# -- the worker (one case in this process) --------------------------------------------------------
def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return _peak_rss_bytes()


def _peak_rss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024  # bytes on macOS, KiB elsewhere


_BASELINE_RSS: list[int] = []


def mark_baseline() -> None:
    """Called by a setup: peak memory counts from here (e.g. after the batch is made, before the model)."""
    _BASELINE_RSS[:] = [_rss_bytes()]


def set_threads(framework: str, threads: int) -> None:
    """The framework's intra-op threads (the BLAS/OpenMP pools read the environment set by the parent)."""
    if framework == "torch":
        import torch

        torch.set_num_threads(threads)
    elif framework == "flow":
        import flow

        flow.set_num_threads(threads)


def worker(case: Case, threads: int, warmup: int, steps: int) -> dict:
    """Set up ``case`` in this process and time ``steps`` steps after ``warmup`` untimed ones."""
    module, _, func = case.setup.partition(":")
    setup: Callable = getattr(importlib.import_module(module), func)
    _BASELINE_RSS[:] = [_rss_bytes()]
    try:
        made = setup(**case.kwargs)
    except Skip as e:
        return {"framework": case.framework, "variant": case.variant, "skipped": str(e)}
    base_rss = _BASELINE_RSS[0]
    # after the setup, which may choose where the framework is imported from (a source tree); the
    # pools read OMP/OPENBLAS/MKL_NUM_THREADS when they start, so building the model is unaffected
    set_threads(case.framework, threads)
    step, report = made if isinstance(made, tuple) else (made, None)
    first = None
    for i in range(warmup):
        t0 = time.perf_counter()
        step()
        if i == 0:
            first = time.perf_counter() - t0
    rec: dict = {m: [] for m in MEASURES}
    if case.gc_off:
        gc.collect()
        gc.disable()
    try:
        for _ in range(steps):
            r0, w0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), time.process_time()
            step()
            w1, c1, r1 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
            rec["wall"].append(w1 - w0)
            rec["cpu"].append(c1 - c0)
            rec["user"].append(r1.ru_utime - r0.ru_utime)
            rec["sys"].append(r1.ru_stime - r0.ru_stime)
            rec["minflt"].append(float(r1.ru_minflt - r0.ru_minflt))
    finally:
        gc.enable()
    out = {
        "framework": case.framework,
        "variant": case.variant,
        "ops_per_step": case.ops_per_step,
        "steps": rec,
        "first_s": first,
        "peak_mib": (_peak_rss_bytes() - base_rss) / (1 << 20),
        "flow_peak_mib": None,
        "extra": report() if report else {},
    }
    if "flow" in sys.modules:
        stats = sys.modules["flow"].cpu.memory_stats()
        out["flow_peak_mib"] = stats.get("allocated_bytes.peak", 0) / (1 << 20)
        out["version_flow"] = getattr(sys.modules["flow"], "__version__", "?")
    if "torch" in sys.modules:
        out["version_torch"] = sys.modules["torch"].__version__
    return out


def run_process(case: Case, threads: int, warmup: int, steps: int) -> dict:
    """One worker process for ``case`` at ``threads`` threads; its JSON result."""
    env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}, **case.env}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", case.to_json(), str(threads), str(warmup), str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{case.group} {case.name} x{threads} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(
    cases: Sequence[Case],
    rounds: int = 3,
    threads: Sequence[int] = (1, 2),
    warmup: int | Callable[[Case], int] = 1,
    steps: int | Callable[[Case], int] = 5,
    baseline: str | None = None,
    log=sys.stderr,
) -> dict:
    """Run every case at every thread count ``rounds`` times, each in a fresh process (see the module's
    docstring); ``warmup`` / ``steps`` may depend on the case. Returns the report: rows, loads, machine."""
    names = {(c.group, c.name) for c in cases}
    if len(names) != len(cases):
        raise ValueError("two cases share a group, framework and variant")
    if baseline is not None and baseline not in {c.name for c in cases}:
        raise ValueError(f"baseline {baseline!r} is none of the cases ({', '.join(sorted({c.name for c in cases}))})")
    plan = schedule(cases, threads, rounds)
    runs: dict[tuple[str, str, int], list[dict]] = {(c.group, c.name, t): [] for t in threads for c in cases}
    loads, versions, skipped = [], {}, {}
    for r, order in enumerate(plan):
        before = os.getloadavg()
        for case, t in order:
            w = warmup(case) if callable(warmup) else warmup
            s = steps(case) if callable(steps) else steps
            out = run_process(case, t, w, s)
            if "skipped" in out:
                skipped[(case.group, case.name, t)] = out["skipped"]
                print(f"  round {r + 1}/{rounds} {case.group} {case.name} x{t}: skipped: {out['skipped']}", file=log)
                continue
            runs[(case.group, case.name, t)].append(out)
            versions.update({k[8:]: v for k, v in out.items() if k.startswith("version_")})
            med = statistics.median(out["steps"]["wall"]) / case.ops_per_step
            print(f"  round {r + 1}/{rounds} {case.group} {case.name} x{t}: wall {med * 1e3:.3f} ms", file=log)
        loads.append({"round": r, "before": before, "after": os.getloadavg()})
    results = aggregate({k: v for k, v in runs.items() if v}, baseline)
    results += [{"group": g, "case": n, "threads": t, "skipped": why} for (g, n, t), why in skipped.items()]
    return {
        "machine": machine_info(),
        "versions": versions,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "rounds": rounds,
        "threads": list(threads),
        "baseline": baseline,
        "loads": loads,
        "results": results,
    }


def machine_info() -> dict:
    import _common

    info = _common.machine_info()
    info.pop("threads", None)  # _common's default; here every row has its own thread count
    return info


# -- the common command line ----------------------------------------------------------------------
def parse_threads(text: str) -> tuple[int, ...]:
    """``"1,2"`` -> ``(1, 2)``; a clear error for anything that is not a positive integer list."""
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threads wants comma-separated integers, got {text!r}") from None
    if not out or any(t < 1 for t in out):
        raise argparse.ArgumentTypeError(f"--threads wants positive integers, got {text!r}")
    return out


def parse_list(text: str, choices: Sequence[str], what: str) -> list[str]:
    """A comma-separated list of ``choices``; argparse's error for an unknown one."""
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in choices]
    if bad or not out:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(bad) or '(none)'}; choose from {', '.join(choices)}"
        )
    return out


def add_args(p: argparse.ArgumentParser, rounds: int = 3, threads: str = "1,2") -> None:
    """The options every benchmark script shares: --rounds, --threads, --steps, --warmup, --quick, --json."""
    p.add_argument("--rounds", type=int, default=rounds, help=f"processes per case and thread count (default {rounds})")
    p.add_argument(
        "--threads", type=parse_threads, default=parse_threads(threads), help=f"e.g. 1,2 (default {threads})"
    )
    p.add_argument("--steps", type=int, help="timed steps per process (default: per case)")
    p.add_argument("--warmup", type=int, help="untimed steps per process before timing (default: per case)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 round, few steps (numbers are noisy)")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")


def run_args(args: argparse.Namespace, cases: Sequence[Case], warmup, steps, baseline=None) -> dict:
    """:func:`run` with the common options applied: --quick means one round; --steps / --warmup override."""
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    rounds = 1 if args.quick else args.rounds
    w = args.warmup if args.warmup is not None else warmup
    s = args.steps if args.steps is not None else steps
    return run(cases, rounds, args.threads, w, s, baseline)


def write_json(report: dict, path: str | None) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(report, fh, indent=1)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="internal: run one benchmark case in this process")
    p.add_argument("--worker", nargs=4, metavar=("CASE", "THREADS", "WARMUP", "STEPS"), required=True)
    args = p.parse_args(argv)
    text, threads, warmup, steps = args.worker
    sys.path.insert(0, HERE)
    # through the module a setup imports as ``harness``, not this ``__main__`` copy: mark_baseline's
    # state and the Skip class must be the ones the setup sees
    import harness

    print(json.dumps(harness.worker(harness.Case.from_json(text), int(threads), int(warmup), int(steps))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
