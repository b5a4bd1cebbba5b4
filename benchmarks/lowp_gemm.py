"""bfloat16 GEMM on the CPU: the native 16-bit GEMM (csrc/lowp_gemm.cpp) against the convert-call-convert
path it replaced, float32, and PyTorch's bfloat16 matmul, on the GEMMs of one GPT training step.

    python benchmarks/lowp_gemm.py                       # the table: 1 and 2 threads, 5 rounds
    python benchmarks/lowp_gemm.py --rounds 5 --threads 1
    python benchmarks/lowp_gemm.py --quick               # a smoke run (noisy)

The shapes are those of benchmarks/models.py ``make_gpt`` at its benchmark batch (8 sequences of 128
tokens, d_model 256, 4 heads, vocab 512): every Linear's forward product and both backward products,
and the attention batched products. A step is one pass over all the GEMMs. Modes: ``flow-new`` (the
native GEMM, the default), ``flow-old`` (widen both operands, float32 GEMM, round back), ``flow-f32``,
``torch-bf16``, ``torch-f32``. Method: harness.py's (a fresh process per mode, thread count and
round, rounds alternating; wall and CPU time of every pass; ratios against ``flow-f32``).
"""

from __future__ import annotations

import argparse
import sys

import harness as H

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


def setup(mode: str):
    """harness setup: one pass over the GEMMs of a GPT step in ``mode``."""
    import numpy as np

    rng = np.random.default_rng(0)
    shapes = gemm_shapes()
    if mode.startswith("flow"):
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

        dt = torch.bfloat16 if mode == "torch-bf16" else torch.float32
        ops = _operands(lambda s: torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(dt), shapes)
        fn = torch.matmul

    def step():
        for a, b in ops:
            fn(a, b)

    return step


def gflop() -> float:
    flops = 0
    for sa, sb, _, _ in gemm_shapes():
        batch = 1
        for d in sa[:-2]:
            batch *= d
        flops += 2 * batch * sa[-2] * sa[-1] * sb[-1]
    return flops / 1e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    H.add_args(p, rounds=5)
    args = p.parse_args(argv)
    try:
        modes = H.parse_list(args.modes, MODES, "mode")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    cases = [H.Case(m.split("-")[0], m.split("-")[1], "lowp_gemm:setup", {"mode": m}, group="gpt gemms") for m in modes]
    baseline = "flow f32" if "flow-f32" in modes else None
    report = H.run_args(args, cases, 1, 1 if args.quick else 3, baseline=baseline)
    print(f"{len(gemm_shapes())} GEMMs of a GPT step ({gflop():.2f} GFLOP) per step")
    print(H.markdown(report))
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
