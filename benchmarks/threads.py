"""1 -> 2 thread scaling of training steps: flow (with and without its CPU thread policy) next to PyTorch.

    python benchmarks/threads.py                          # resnet18, mlp, gpt; 3 rounds
    python benchmarks/threads.py --models mlp,gpt,resnet18 --variants flow,torch --rounds 2
    python benchmarks/threads.py --quick                  # a smoke run (MLP only, one round)
    python benchmarks/threads.py --models resnet18 --rounds 5 --json out.json

Variants: ``flow`` (the policy of flow.backends.cpu.threads: OpenBLAS single-threaded, GEMM called
from flow's OpenMP threads), ``flow-nopolicy`` (``FLOW_CPU_THREAD_POLICY=0``: OpenBLAS's own pool next
to flow's OpenMP one, the code path from before the policy) and ``torch``.

Method: harness.py's, at 1 and 2 threads (a fresh process per variant, model, thread count and
round; rounds alternate the order; the wall clock and the process's CPU time of every step; the
load average before and after every round). Reported per variant: the medians, the range of the
per-process medians, the 1 -> 2 speed-up of the wall time (t1 / t2; 2.0 is perfect) and the CPU
growth (cpu2 / cpu1; 1.0 is no CPU spent on spinning). On a shared machine a load above the core
count makes the 2-thread figures pessimistic for every variant alike.
"""

from __future__ import annotations

import argparse
import sys

import harness as H
import models as M

VARIANTS = ("flow", "flow-nopolicy", "torch")
CASE_OF = {"flow": ("flow", "policy"), "flow-nopolicy": ("flow", "nopolicy"), "torch": ("torch", "eager")}
STEPS = {"resnet18": (2, 5), "mlp": (5, 30), "gpt": (2, 8)}  # (warmup, timed) per process
QUICK_STEPS = {"resnet18": (1, 2), "mlp": (2, 5), "gpt": (1, 2)}


def setup_policy(framework: str, model: str):
    """harness setup: models.py's eager step; for flow the report says which BLAS path the policy chose."""
    step, report = M.setup_eager(framework, model)
    if framework != "flow":
        return step, report

    def policy_report() -> dict:
        from flow.backends.cpu import threads as policy

        return {**report(), "blas_threads": policy.blas_get_num_threads(), "policy": policy.BLAS_PATH is not None}

    return step, policy_report


def cases(models, variants) -> list[H.Case]:
    out = []
    for m in models:
        for v in variants:
            fw, variant = CASE_OF[v]
            env = {} if fw == "torch" else {"FLOW_CPU_THREAD_POLICY": "0" if v == "flow-nopolicy" else "1"}
            out.append(H.Case(fw, variant, "threads:setup_policy", {"framework": fw, "model": m}, group=m, env=env))
    return out


def scaling_table(report: dict) -> str:
    """Per model and variant: wall and CPU at each thread count, speed-up and CPU growth between 1 and 2."""
    by = {}
    for r in report["results"]:
        by.setdefault((r["group"], r["case"]), {})[r["threads"]] = r
    out = [
        "| model | variant | wall 1t s | wall 2t s | speed-up | cpu x | 2t wall range |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for (model, case), t in by.items():
        if 1 not in t or 2 not in t:
            continue
        w1, w2 = t[1]["wall"], t[2]["wall"]
        speed = w1["median"] / w2["median"]
        growth = t[2]["cpu"]["median"] / t[1]["cpu"]["median"]
        out.append(
            f"| {model} | {case} | {w1['median']:.3f} | {w2['median']:.3f} | {speed:.2f} | {growth:.2f} "
            f"| {w2['min']:.3f}-{w2['max']:.3f} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", help=f"comma-separated, from {', '.join(STEPS)} (default: all; --quick: mlp)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    H.add_args(p, rounds=3)
    args = p.parse_args(argv)
    try:
        models = H.parse_list(args.models or ("mlp" if args.quick else "resnet18,mlp,gpt"), tuple(STEPS), "model")
        variants = H.parse_list(args.variants, VARIANTS, "variant")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    table = QUICK_STEPS if args.quick else STEPS
    report = H.run_args(
        args,
        cases(models, variants),
        lambda c: table[c.kwargs["model"]][0],
        lambda c: table[c.kwargs["model"]][1],
        baseline="torch eager" if "torch" in variants else None,
    )
    print(H.markdown(report, unit="s" if not args.quick else "ms"))
    print()
    print(scaling_table(report))
    print("(seconds per step, medians; speed-up = wall 1t / wall 2t; cpu x = cpu 2t / cpu 1t)")
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
