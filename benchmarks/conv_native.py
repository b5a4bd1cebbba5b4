"""The 20 convolutions of a ResNet-18 step (CIFAR-style 32x32 input, batch 32): forward, and forward + both backwards.

    python benchmarks/conv_native.py                        # flow native, flow reference, torch; 1 and 2 threads
    python benchmarks/conv_native.py --rounds 3 --steps 3 --threads 1
    python benchmarks/conv_native.py --quick

Variants: ``flow native`` (native im2col / col2im, ``FLOW_CONV_REFERENCE=0``), ``flow reference``
(the NumPy im2col / col2im path, ``FLOW_CONV_REFERENCE=1``) and ``torch eager``. Two groups: ``forward``
(a step is the 20 forward convolutions) and ``forward+backward`` (then each output's backward with
a fixed gradient: input and weight gradients); the backward alone is the difference of the two.
Method: harness.py's (a fresh process per variant, group, thread count and round, rounds
alternating; wall and CPU time of every step).
"""

from __future__ import annotations

import argparse
import importlib
import sys

import harness as H

BATCH = 32


def _layers() -> list[tuple[int, int, int, int, int]]:
    """(in channels, out channels, kernel, stride, input size) of ResNet-18's convolutions (CIFAR stem)."""
    layers = [(3, 64, 3, 1, 32)]
    cin, size = 64, 32
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            layers.append((cin, cout, 3, s, size))
            if s != 1 or cin != cout:
                layers.append((cin, cout, 1, s, size))  # the downsample shortcut
            size //= s
            layers.append((cout, cout, 3, 1, size))
            cin = cout
    return layers


def setup(framework: str, backward: bool):
    """harness setup: the 20 convolutions in ``framework``; with ``backward``, their gradients too."""
    import numpy as np

    rng = np.random.default_rng(0)
    fw = importlib.import_module(framework)
    conv = fw.nn.functional.conv2d
    args = []
    for cin, cout, k, s, size in _layers():
        x = rng.standard_normal((BATCH, cin, size, size)).astype(np.float32)
        w = (rng.standard_normal((cout, cin, k, k)) * 0.05).astype(np.float32)
        out = (size + 2 * (k // 2) - k) // s + 1
        g = rng.standard_normal((BATCH, cout, out, out)).astype(np.float32)
        args.append((fw.tensor(x, requires_grad=True), fw.tensor(w, requires_grad=True), fw.tensor(g), s, k // 2))

    def step():
        ys = [conv(x, w, stride=s, padding=p) for x, w, _, s, p in args]
        if backward:
            for y, (x, w, g, _, _) in zip(ys, args):
                x.grad = w.grad = None
                y.backward(g)

    return step


def cases() -> list[H.Case]:
    out = []
    for group, backward in (("forward", False), ("forward+backward", True)):
        for fw, variant, env in (
            ("flow", "native", {"FLOW_CONV_REFERENCE": "0"}),
            ("flow", "reference", {"FLOW_CONV_REFERENCE": "1"}),
            ("torch", "eager", {}),
        ):
            out.append(H.Case(fw, variant, "conv_native:setup", {"framework": fw, "backward": backward}, group, env))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    H.add_args(p, rounds=5)
    args = p.parse_args(argv)
    report = H.run_args(args, cases(), 1, 1 if args.quick else 3, baseline="torch eager")
    print(f"{len(_layers())} convolutions, batch {BATCH}, 32x32 input")
    print(H.markdown(report))
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
