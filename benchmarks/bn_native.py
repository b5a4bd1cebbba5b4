"""Batch norm, forward + backward, for the 20 BatchNorm2d layers of a ResNet-18 step (batch 32, 32x32 input).

    python benchmarks/bn_native.py                         # flow fused, flow composite, torch; 1 and 2 threads
    python benchmarks/bn_native.py --rounds 3 --steps 2 --threads 1
    python benchmarks/bn_native.py --quick

Variants: ``flow fused`` (the fused ``batch_norm`` op, native kernel), ``flow composite`` (the former
composite path, ``FLOW_BATCH_NORM_COMPOSITE=1``) and ``torch eager``. A step runs all 20 layers
forward and backward (``y.backward(ones_like(y))``). Method: harness.py's (a fresh process per
variant, thread count and round, rounds alternating; wall and CPU time of every step).
"""

from __future__ import annotations

import argparse
import importlib
import sys

import harness as H

# (channels, spatial size) of ResNet-18's 20 batch norms on a 32x32 input (CIFAR stem: no max-pool)
LAYERS = [(64, 32)] * 5 + [(128, 16)] * 5 + [(256, 8)] * 5 + [(512, 4)] * 5
BATCH = 32


def setup(framework: str):
    """harness setup: the 20 layers' batch norms in ``framework``, forward and backward, one step."""
    import numpy as np

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((BATCH, c, s, s)).astype(np.float32) for c, s in LAYERS]
    fw = importlib.import_module(framework)
    mods = [fw.nn.BatchNorm2d(c) for c, _ in LAYERS]
    ins = [fw.tensor(x, requires_grad=True) for x in xs]

    def step():
        for m, x in zip(mods, ins):
            y = m(x)
            y.backward(fw.ones_like(y))

    return step


CASES = [
    H.Case("flow", "fused", "bn_native:setup", {"framework": "flow"}, group="bn x20"),
    H.Case("flow", "composite", "bn_native:setup", {"framework": "flow"}, "bn x20", {"FLOW_BATCH_NORM_COMPOSITE": "1"}),
    H.Case("torch", "eager", "bn_native:setup", {"framework": "torch"}, group="bn x20"),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    H.add_args(p, rounds=5)
    args = p.parse_args(argv)
    report = H.run_args(args, CASES, 1, 1 if args.quick else 3, baseline="torch eager")
    print(H.markdown(report))
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
