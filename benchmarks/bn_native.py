"""Batch norm, forward + backward, for the 20 BatchNorm2d layers of a ResNet-18 step (batch 32, 32x32 input).

One process per framework and mode, alternating rounds; the median CPU time of a round at 1 thread:

    python benchmarks/bn_native.py            # flow fused, flow composite, torch
    python benchmarks/bn_native.py --rounds 7

``flow-composite`` is the former composite path (``FLOW_BATCH_NORM_COMPOSITE=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (channels, spatial size) of ResNet-18's 20 batch norms on a 32x32 input (CIFAR stem: no max-pool)
LAYERS = [(64, 32)] * 5 + [(128, 16)] * 5 + [(256, 8)] * 5 + [(512, 4)] * 5
BATCH = 32


def _child(fw: str, reps: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((BATCH, c, s, s)).astype(np.float32) for c, s in LAYERS]
    if fw == "torch":
        import torch

        torch.set_num_threads(1)
        mods = [torch.nn.BatchNorm2d(c) for c, _ in LAYERS]
        ins = [torch.tensor(x, requires_grad=True) for x in xs]

        def step():
            for m, x in zip(mods, ins):
                y = m(x)
                y.backward(torch.ones_like(y))
    else:
        import flow
        from flow import nn

        flow.set_num_threads(1)
        mods = [nn.BatchNorm2d(c) for c, _ in LAYERS]
        ins = [flow.tensor(x, requires_grad=True) for x in xs]

        def step():
            for m, x in zip(mods, ins):
                y = m(x)
                y.backward(flow.ones_like(y))

    step()  # warm up
    times = []
    for _ in range(reps):
        t = time.process_time()
        step()
        times.append(time.process_time() - t)
    print(json.dumps(times))


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
        "flow-fused": ("flow", {}),
        "flow-composite": ("flow", {"FLOW_BATCH_NORM_COMPOSITE": "1"}),
        "torch": ("torch", {}),
    }
    res: dict[str, list[float]] = {k: [] for k in runs}
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
    for name, ts in res.items():
        print(f"{name:15s} median {statistics.median(ts) * 1e3:8.1f} ms CPU  (n={len(ts)})")


if __name__ == "__main__":
    main()
