"""The 20 convolutions of a ResNet-18 step (CIFAR-style 32x32 input, batch 32): forward + both backwards.

One process per framework and mode, alternating rounds; the median CPU time at 1 thread of the
forward pass, of the backward pass (input and weight gradients) and of the two together:

    python benchmarks/conv_native.py            # flow native columns, flow reference, torch
    python benchmarks/conv_native.py --rounds 7

``flow-reference`` is the NumPy im2col / col2im path (``FLOW_CONV_REFERENCE=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

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


def _child(fw: str, reps: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    data = []
    for cin, cout, k, s, size in _layers():
        x = rng.standard_normal((BATCH, cin, size, size)).astype(np.float32)
        w = (rng.standard_normal((cout, cin, k, k)) * 0.05).astype(np.float32)
        out = (size + 2 * (k // 2) - k) // s + 1
        g = rng.standard_normal((BATCH, cout, out, out)).astype(np.float32)
        data.append((x, w, g, s, k // 2))
    if fw == "torch":
        import torch

        torch.set_num_threads(1)
        lib, conv = torch, torch.nn.functional.conv2d
    else:
        import flow
        import flow.nn.functional as F

        flow.set_num_threads(1)
        lib, conv = flow, F.conv2d
    args = [
        (lib.tensor(x, requires_grad=True), lib.tensor(w, requires_grad=True), lib.tensor(g), s, p)
        for x, w, g, s, p in data
    ]

    def step() -> tuple[float, float]:
        t0 = time.process_time()
        ys = [conv(x, w, stride=s, padding=p) for x, w, _, s, p in args]
        t1 = time.process_time()
        for y, (x, w, g, _, _) in zip(ys, args):
            x.grad = w.grad = None
            y.backward(g)
        return t1 - t0, time.process_time() - t1

    step()  # warm up
    print(json.dumps([step() for _ in range(reps)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--child", default=None)
    a = p.parse_args()
    if a.child:
        _child(a.child, a.reps)
        return
    env1 = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    runs = {
        "flow-native": ("flow", {"FLOW_CONV_REFERENCE": "0"}),
        "flow-reference": ("flow", {"FLOW_CONV_REFERENCE": "1"}),
        "torch": ("torch", {}),
    }
    res: dict[str, list] = {k: [] for k in runs}
    print(f"load average before: {os.getloadavg()}")
    for _ in range(a.rounds):
        for name, (fw, extra) in runs.items():
            out = subprocess.run(
                [sys.executable, __file__, "--child", fw, "--reps", str(a.reps)],
                env={**env1, **extra},
                capture_output=True,
                text=True,
                check=True,
            )
            res[name] += json.loads(out.stdout.strip().splitlines()[-1])
    print(f"load average after: {os.getloadavg()}")
    print(f"{len(_layers())} convolutions, batch {BATCH}, 32x32 input, 1 thread; median CPU ms")
    print(f"{'':15s} {'forward':>9s} {'backward':>9s} {'total':>9s}")
    for name, ts in res.items():
        fwd, bwd = (statistics.median(t[i] for t in ts) * 1e3 for i in (0, 1))
        tot = statistics.median(f + b for f, b in ts) * 1e3
        print(f"{name:15s} {fwd:9.1f} {bwd:9.1f} {tot:9.1f}  (n={len(ts)})")


if __name__ == "__main__":
    main()
