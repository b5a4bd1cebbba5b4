"""The CPU caching allocator on and off: CPU time (user / system) and page faults per training step.

    python benchmarks/allocator.py                       # resnet18 + gpt, 3 rounds, 1 thread
    python benchmarks/allocator.py --models gpt --rounds 5 --steps 6 --json out.json
    python benchmarks/allocator.py --quick               # a smoke run (MLP only, one round)

Settings, on models.py's training steps: ``flow-cache`` (flow with its caching allocator),
``flow-nocache`` (``FLOW_CPU_CACHING_ALLOCATOR=0``) and ``torch`` for comparison.

Method: harness.py's (a fresh process per setting, model, thread count and round; rounds alternate
the order; the load average before and after every round). Each timed step is measured with
``getrusage(RUSAGE_SELF)``: user and system CPU seconds and minor page faults (``ru_minflt``). The
table gives, per setting, the median over all timed steps of all rounds and the range (min-max) of
the per-process medians, and flow's allocator peak (``flow.cpu.memory_stats()``).
"""

from __future__ import annotations

import argparse
import sys

import harness as H
import models as M

SETTINGS = ("flow-cache", "flow-nocache", "torch")
CASE_OF = {"flow-cache": ("flow", "cache"), "flow-nocache": ("flow", "nocache"), "torch": ("torch", "eager")}


def cases(models, settings) -> list[H.Case]:
    out = []
    for m in models:
        for s in settings:
            fw, variant = CASE_OF[s]
            env = {} if fw == "torch" else {"FLOW_CPU_CACHING_ALLOCATOR": "0" if s == "flow-nocache" else "1"}
            out.append(H.Case(fw, variant, "models:setup_eager", {"framework": fw, "model": m}, group=m, env=env))
    return out


def rusage_table(report: dict) -> str:
    out = [
        "| model | threads | setting | user s | system s | minor faults | flow allocator peak MiB |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        flt = r["minflt"]
        peak = H.fmt(r["flow_peak_mib"], digits=1) if "flow_peak_mib" in r else "-"
        out.append(
            f"| {r['group']} | {r['threads']} | {r['case']} | {H.fmt(r['user'], digits=3)} | "
            f"{H.fmt(r['sys'], digits=3)} | {H.fmt(flt, digits=0)} | {peak} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", help=f"comma-separated, from {', '.join(M.MODELS)} (default resnet18,gpt; --quick: mlp)")
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, from {', '.join(SETTINGS)}")
    H.add_args(p, rounds=3, threads="1")
    args = p.parse_args(argv)
    try:
        models = H.parse_list(args.models or ("mlp" if args.quick else "resnet18,gpt"), M.MODELS, "model")
        settings = H.parse_list(args.settings, SETTINGS, "setting")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    steps = 2 if args.quick else 4
    report = H.run_args(args, cases(models, settings), 1 if args.quick else 2, steps, baseline="flow cache")
    print(H.markdown(report))
    print()
    print(rusage_table(report))
    print("(per training step: median [range of the per-process medians])")
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
