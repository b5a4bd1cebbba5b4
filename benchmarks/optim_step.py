"""``optimizer.step()`` alone on the models of ``models.py``: flow (one or more source trees) next to PyTorch.

    python benchmarks/optim_step.py                                    # installed flow vs PyTorch, 1 thread
    python benchmarks/optim_step.py --models gpt,dlrm --rounds 7 --steps 30 --threads 1,2
    python benchmarks/optim_step.py --variant old=/tmp/old/packages/flow-core/src --variant new=packages/flow-core/src
    python benchmarks/optim_step.py --quick

Each model uses its optimizer from ``models.py`` (MLP: SGD; GPT: AdamW; ResNet-18: SGD with momentum
and weight decay; DLRM: SGD over 8 tables of 100,000 x 64; tiny: SGD with momentum over 8 parameters of
16 x 16 and 16, where step()'s fixed cost per call shows). A worker builds the model and optimizer,
runs two whole training steps (one with ``--quick``; so the gradients and the optimizer's states
exist), then harness.py times ``--steps`` calls of ``opt.step()`` alone on the last gradients (after
``--warmup`` untimed calls, default 1). Afterwards it builds a second optimizer on the same model
and times its first ``step()`` (with the states' allocation) and the RSS that first step adds.

``--variant NAME=PATH`` runs flow from the source tree ``PATH`` (a ``packages/flow-core/src``
folder with a built ``flow/_C`` extension in it) instead of the installed one; ``torch`` is
PyTorch. Method: harness.py's (a fresh process per variant, model, thread count and round, rounds
alternating; wall and CPU time of every call; ratios against PyTorch).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

import harness as H
import models as M

MODELS = ("mlp", "gpt", "resnet18", "dlrm", "tiny")


def _tiny_workload(fw):
    """Four Linear(16, 16) layers (8 small parameters), SGD with momentum: step()'s fixed cost per
    update call, which the real models' tensor sizes hide."""
    m = fw.nn.Sequential(*[fw.nn.Linear(16, 16) for _ in range(4)])
    opt = fw.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = fw.randn(8, 16)

    def step():
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()

    return m, opt, step


def _use_tree(path: str) -> None:
    """Import flow from the source tree ``path``, not from the (editable) installation."""
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
    sys.path.insert(0, os.path.abspath(path))


def _use_tree(path: str) -> None:
    """Import flow from the source tree ``path``, not from the (editable) installation."""
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
    sys.path.insert(0, os.path.abspath(path))


def setup(framework: str, model: str, warmup: int, path: str | None = None):
    """harness setup: ``opt.step()`` of ``model`` after ``warmup`` training steps; the report times the
    first step() of a fresh optimizer on the same model and the RSS it adds."""
    if path:
        _use_tree(path)
    fw = importlib.import_module(framework)
    fw.manual_seed(0)
    m, opt, step = _tiny_workload(fw) if model == "tiny" else M.make_workload(fw, model, M.make_batch(model))
    for _ in range(warmup):
        step()

    def report() -> dict:
        hyper = {k: v for k, v in opt.defaults.items() if k in ("lr", "momentum", "weight_decay")}
        fresh = type(opt)(m.parameters(), **hyper)
        rss0, w0, c0 = H._rss_bytes(), time.perf_counter(), time.process_time()
        fresh.step()
        return {
            "first_step_wall_s": time.perf_counter() - w0,
            "first_step_cpu_s": time.process_time() - c0,
            "first_step_rss_mib": (H._rss_bytes() - rss0) / (1 << 20),
            "flow_file": getattr(fw, "__file__", "?"),
        }

    return opt.step, report


def first_step_table(report: dict) -> str:
    out = ["| model | threads | case | first step() cpu ms | first step() +MiB |", "|---|---:|---|---:|---:|"]
    for r in report["results"]:
        e = r["extra"]
        out.append(
            f"| {r['group']} | {r['threads']} | {r['case']} | {H.fmt(e['first_step_cpu_s'], 1e3, 1)} "
            f"| {H.fmt(e['first_step_rss_mib'], digits=1)} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=PATH", help="flow from a source tree")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    H.add_args(p, rounds=5, threads="1")
    args = p.parse_args(argv)
    variants: dict = {}
    for spec in args.variant:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path or " " in name:
            p.error(f"--variant expects NAME=PATH (NAME without spaces), got {spec!r}")
        variants[name] = os.path.abspath(path)
    variants = variants or {"installed": None}
    try:
        models = H.parse_list(
            "tiny,mlp" if args.quick and args.models == ",".join(MODELS) else args.models, MODELS, "model"
        )
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    warmup = 1 if args.quick else 2  # whole training steps inside the setup
    cases = []
    for model in models:
        for name, path in variants.items():
            kw = {"framework": "flow", "model": model, "warmup": warmup, "path": path}
            cases.append(H.Case("flow", name, "optim_step:setup", kw, group=model))
        if not args.no_torch:
            kw = {"framework": "torch", "model": model, "warmup": warmup}
            cases.append(H.Case("torch", "eager", "optim_step:setup", kw, group=model))
    steps = 5 if args.quick else 20
    baseline = None if args.no_torch else "torch eager"
    report = H.run_args(args, cases, 1, steps, baseline=baseline)
    print("optimizer.step() alone")
    print(H.markdown(report))
    print()
    print(first_step_table(report))
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
