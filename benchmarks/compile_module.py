"""``flow.compile(module)`` next to eager flow, eager PyTorch and ``torch.compile``: an MLP training step.

    python benchmarks/compile_module.py                 # the table: 1 and 2 threads, 2 rounds
    python benchmarks/compile_module.py --quick         # a smoke run (numbers are noisy)
    python benchmarks/compile_module.py --steps 20 --rounds 3 --threads 1 --json out.json

Two MLPs: ``mlp``, models.py's (784-1024-1024-10, batch 128), where matrix products take nearly
all the time, and ``mlp-small`` (64-64-64-10, batch 32), where the per-op overhead does. A training
step is ``zero_grad``, forward, cross-entropy, ``backward``, an SGD step (momentum 0.9) and
``loss.item()``, written the same way in every mode; only the module differs:

- ``flow eager``: flow eager;
- ``flow compiled``: ``flow.compile(model)`` (compiled forward and backward graphs inside eager
  autograd; the optimizer step stays eager);
- ``torch eager``: PyTorch eager;
- ``torch compiled``: ``torch.compile(model)``, which on the CPU needs a C compiler at run time: when
  compiling fails the mode is reported as skipped, with the reason.

Method: harness.py's (a fresh process per mode, model, thread count and round, rounds alternating;
wall and CPU time of every step; ratios against flow eager). The compiled modes run their first
step (which compiles) inside the setup: ``compile s`` is that step's CPU time minus a steady step's.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

import harness as H
import models as M

MODES = ("eager", "compiled", "torch", "torch.compile")
CASE_OF = {
    "eager": ("flow", "eager"),
    "compiled": ("flow", "compiled"),
    "torch": ("torch", "eager"),
    "torch.compile": ("torch", "compiled"),
}
MODELS = ("mlp", "mlp-small")
SMALL_BATCH = 32


def _step_fn(fw, model, opt, x, y):
    F = fw.nn.functional

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def _workload(fw, model: str):
    """The module and the batch ``(x, y)`` of ``model``."""
    if model == "mlp":
        batch = M.make_batch("mlp")
        return M.make_mlp(fw.nn, fw.nn.functional), fw.from_numpy(batch["x"]), fw.from_numpy(batch["y"])
    import numpy as np

    nn = fw.nn
    rng = np.random.default_rng(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    x = fw.from_numpy(rng.standard_normal((SMALL_BATCH, 64), dtype=np.float32))
    return m, x, fw.from_numpy(rng.integers(0, 10, SMALL_BATCH))


def setup(framework: str, compiled: bool, model: str):
    """harness setup: the MLP step of ``framework``; when ``compiled``, the compiled module, compiled here."""
    fw = importlib.import_module(framework)
    fw.manual_seed(0)
    module, x, y = _workload(fw, model)
    if compiled:
        module = fw.compile(module)
    opt = fw.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
    step = _step_fn(fw, module, opt, x, y)
    first = None
    if compiled:
        c0 = time.process_time()
        try:
            step()
        except Exception as e:  # torch.compile without a working C toolchain
            if framework != "torch":
                raise
            raise H.Skip(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from e
        first = time.process_time() - c0
    return step, lambda: {"first_step_cpu_s": first} if first is not None else {}


def compile_table(report: dict) -> str:
    out = ["| model | threads | case | compile s |", "|---|---:|---|---:|"]
    for r in report["results"]:
        if "first_step_cpu_s" in r.get("extra", {}):
            comp = r["extra"]["first_step_cpu_s"]["median"] - r["cpu"]["median"]
            out.append(f"| {r['group']} | {r['threads']} | {r['case']} | {comp:.2f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    H.add_args(p, rounds=2)
    args = p.parse_args(argv)
    try:
        models = H.parse_list(args.models, MODELS, "model")
        modes = H.parse_list(args.modes, MODES, "mode")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    cases = []
    for m in models:
        for md in modes:
            fw, variant = CASE_OF[md]
            cases.append(
                H.Case(
                    fw,
                    variant,
                    "compile_module:setup",
                    {"framework": fw, "compiled": variant == "compiled", "model": m},
                    group=m,
                )
            )
    baseline = "flow eager" if "eager" in modes else None
    report = H.run_args(args, cases, 2, 5 if args.quick else 20, baseline=baseline)
    print(H.markdown(report))
    print()
    print(compile_table(report))
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
