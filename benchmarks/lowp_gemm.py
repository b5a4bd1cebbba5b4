"""bfloat16 GEMM on the CPU: the native 16-bit GEMM (csrc/lowp_gemm.cpp) against the convert-call-convert
path it replaced, float32, and PyTorch's bfloat16 matmul, on the GEMMs of one GPT training step.

    python benchmarks/lowp_gemm.py            # the table (about a minute)
    python benchmarks/lowp_gemm.py --quick    # a smoke run (noisy)

The shapes are those of benchmarks/models.py ``make_gpt`` at its benchmark batch (8 sequences of 128
tokens, d_model 256, 4 heads, vocab 512): every Linear's forward product and both backward products,
and the attention batched products. Each mode runs in its own process at 1 thread; a figure is the
median (and min-max range) over rounds of the CPU time of one pass over all the GEMMs. The load
average is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

MODES = ("flow-old", "flow-new", "flow-f32", "torch-bf16", "torch-f32")
ROWS, D, HEADS, SEQ, VOCAB = 8 * 128, 256, 4, 128, 512
LINEARS = [(3 * D, D), (D, D), (4 * D, D), (D, 4 * D)] * 4 + [(VOCAB, D)]  # (out, in) per layer, then the head


def gemm_shapes() -> list[tuple[tuple[int, ...], tuple[int, ...], bool, bool]]:
    """(a shape, b shape, a transposed, b transposed) of one step's GEMMs, as the kernels see them."""
    shapes = []
    for out, inp in LINEARS:
        shapes.append(((ROWS, inp), (inp, out), False, True))  # x @ W.T
        shapes.append(((ROWS, out), (out, inp), False, False))  # grad_x = g @ W
        shapes.append(((out, ROWS), (ROWS, inp), True, False))  # grad_W = g.T @ x
    bh, hd = 8 * HEADS, D // HEADS
    for _ in range(4):
        shapes.append(((bh, SEQ, hd), (bh, hd, SEQ), False, True))  # q @ k^T
        shapes.append(((bh, SEQ, SEQ), (bh, SEQ, hd), False, False))  # att @ v
    return shapes


def _operands(xp_rand, shapes):
    ops = []
    for sa, sb, ta, tb in shapes:
        a = xp_rand(sa[:-2] + (sa[-1], sa[-2])).swapaxes(-1, -2) if ta else xp_rand(sa)
        b = xp_rand(sb[:-2] + (sb[-1], sb[-2])).swapaxes(-1, -2) if tb else xp_rand(sb)
        ops.append((a, b))
    return ops


def worker(mode: str, rounds: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    shapes = gemm_shapes()
    if mode.startswith("flow"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _common import setup_flow

        setup_flow(1)
        import ml_dtypes

        from flow.backends.cpu import lowp, threads

        bf16 = np.dtype(ml_dtypes.bfloat16)
        dt = np.float32 if mode == "flow-f32" else bf16
        ops = _operands(lambda s: rng.standard_normal(s).astype(dt), shapes)
        if mode == "flow-new":
            fn = lowp.gemm
        elif mode == "flow-old":  # what the low-precision adapter ran: widen both, float32 GEMM, round back

            def fn(a, b):
                return lowp.from_f32(threads.matmul(lowp.to_f32(a), lowp.to_f32(b)), bf16)
        else:
            fn = threads.matmul
    else:
        import torch

        torch.set_num_threads(1)
        dt = torch.bfloat16 if mode == "torch-bf16" else torch.float32
        ops = _operands(lambda s: torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(dt), shapes)
        fn = torch.matmul
    for a, b in ops:  # warm-up (buffers, BLAS init)
        fn(a, b)
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        for a, b in ops:
            fn(a, b)
        times.append(time.process_time() - t0)
    return {"mode": mode, "times": times}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15, help="timed passes over the GEMMs per process")
    p.add_argument("--quick", action="store_true", help="3 rounds (noisy)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    p.add_argument("--worker", metavar="MODE", help="internal: one mode in this process, print JSON")
    args = p.parse_args()
    rounds = 3 if args.quick else args.rounds
    if rounds < 1:
        p.error("--rounds must be >= 1")
    if args.worker:
        if args.worker not in MODES:
            p.error(f"unknown mode {args.worker!r}")
        print(json.dumps(worker(args.worker, rounds)))
        return
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r}; choose from {', '.join(MODES)}")
    load0 = os.getloadavg()
    res = {}
    for m in modes:
        r = subprocess.run(
            [sys.executable, __file__, "--worker", m, "--rounds", str(rounds)], capture_output=True, text=True
        )
        if r.returncode != 0:
            print(f"{m}: failed ({r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode})")
            continue
        res[m] = json.loads(r.stdout.strip().splitlines()[-1])["times"]
    load1 = os.getloadavg()
    n = len(gemm_shapes())
    flops = 0
    for sa, sb, _, _ in gemm_shapes():
        batch = 1
        for d in sa[:-2]:
            batch *= d
        flops += 2 * batch * sa[-2] * sa[-1] * sb[-1]
    print(f"{n} GEMMs of a GPT step ({flops / 1e9:.2f} GFLOP), 1 thread, CPU time per pass, {rounds} rounds")
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    base = res.get("flow-f32")
    base_med = sorted(base)[len(base) // 2] if base else None
    for m, ts in res.items():
        s = sorted(ts)
        med = s[len(s) // 2]
        rel = f"  {med / base_med:5.2f}x flow-f32" if base_med else ""
        print(f"{m:11s} {med * 1e3:8.1f} ms  [{s[0] * 1e3:.1f} - {s[-1] * 1e3:.1f}]{rel}")


if __name__ == "__main__":
    main()
