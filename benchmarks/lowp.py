"""bfloat16 / float16 against float32 on the CPU, per op, in flow and in PyTorch (one run, 1 thread).

On a CPU without bf16 / fp16 arithmetic, flow runs low-precision ops as float32 compute between
native conversions (flow.backends.cpu.lowp). The table gives each op's float32 time and the
low-precision times as ratios to it, next to what NumPy does with ml_dtypes' bfloat16 directly
(what flow did before) and PyTorch's bf16 / fp32 ratio on the same machine.

    python benchmarks/lowp.py            # the table (about two minutes)
    python benchmarks/lowp.py --quick    # a smoke run (noisy)

Each figure is the median over ``rounds`` rounds of the median of ``steps`` calls (after a warm-up).
``matmul panels`` is the block-wise variant of the low-precision GEMM (A converted and multiplied in
row panels of 64, B converted once), timed to choose between it and whole-operand conversion.
"""

from __future__ import annotations

import argparse
import os
import sys

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from _common import machine_info, median, setup_flow, time_steps  # noqa: E402

flow = setup_flow(1)
import flow.nn.functional as F  # noqa: E402
from flow.backends.cpu import lowp, native  # noqa: E402

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - torch is optional
    torch = None

BF16 = np.dtype(ml_dtypes.bfloat16)


def _shapes():
    return {
        "cast to low": ((1024, 1024),),
        "cast to f32": ((1024, 1024),),
        "matmul": ((256, 1024), (1024, 1024)),
        "matmul panels": ((256, 1024), (1024, 1024)),
        "linear": ((256, 1024), (1024, 1024), (1024,)),
        "conv2d": ((4, 64, 56, 56), (64, 64, 3, 3)),
        "relu": ((1024, 1024),),
        "gelu": ((1024, 1024),),
        "add": ((1024, 1024), (1024, 1024)),
        "softmax": ((1024, 1024),),
        "layer_norm": ((1024, 1024),),
    }


def _panel_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bf = lowp.to_f32(b)
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    for i in range(0, a.shape[0], 64):
        native.f32_to_bf16(lowp.to_f32(a[i : i + 64]) @ bf, out=out[i : i + 64])
    return out


def flow_case(name: str, arrays: list, dt):
    """A no-argument callable running ``name`` in flow on ``arrays`` as ``dt`` tensors."""
    ts = [flow.tensor(a).to(dt) for a in arrays]
    if name == "cast to low":  # float32: a plain copy of the same array, the baseline of a cast
        x = flow.tensor(arrays[0])
        return (lambda: x.clone()) if dt is flow.float32 else (lambda: x.to(dt))
    if name == "cast to f32":
        return (lambda: ts[0].clone()) if dt is flow.float32 else (lambda: ts[0].float())
    if name == "matmul":
        return lambda: ts[0] @ ts[1]
    if name == "matmul panels":
        if dt is not flow.bfloat16:
            return lambda: ts[0] @ ts[1]
        a, b = ts[0]._data, ts[1]._data
        return lambda: _panel_matmul(a, b)
    if name == "linear":
        return lambda: F.linear(*ts)
    if name == "conv2d":
        return lambda: F.conv2d(ts[0], ts[1], padding=1)
    if name == "relu":
        return lambda: F.relu(ts[0])
    if name == "gelu":
        return lambda: F.gelu(ts[0])
    if name == "add":
        return lambda: ts[0] + ts[1]
    if name == "softmax":
        return lambda: F.softmax(ts[0], -1)
    if name == "layer_norm":
        return lambda: F.layer_norm(ts[0], (arrays[0].shape[-1],))
    raise KeyError(name)


def numpy_case(name: str, arrays: list, np_dtype):
    """What NumPy (ml_dtypes for bfloat16) does on the arrays directly: flow's eager path before."""
    xs = [a.astype(np_dtype) for a in arrays]
    table = {
        "cast to low": lambda: arrays[0].astype(np_dtype),
        "cast to f32": lambda: xs[0].astype(np.float32),
        "matmul": lambda: xs[0] @ xs[1],
        "matmul panels": lambda: xs[0] @ xs[1],
        "linear": lambda: xs[0] @ xs[1].T + xs[2],
        "relu": lambda: np.maximum(xs[0], np_dtype.type(0)),
        "add": lambda: xs[0] + xs[1],
    }
    return table.get(name)


def torch_case(name: str, arrays: list, dt):
    if torch is None:
        return None
    tf = torch.nn.functional
    ts = [torch.from_numpy(a).to(dt) for a in arrays]
    table = {
        "cast to low": lambda: ts[0].clone() if dt is torch.float32 else torch.from_numpy(arrays[0]).to(dt),
        "cast to f32": lambda: ts[0].clone() if dt is torch.float32 else ts[0].float(),
        "matmul": lambda: ts[0] @ ts[1],
        "matmul panels": lambda: ts[0] @ ts[1],
        "linear": lambda: tf.linear(*ts),
        "conv2d": lambda: tf.conv2d(ts[0], ts[1], padding=1),
        "relu": lambda: tf.relu(ts[0]),
        "gelu": lambda: tf.gelu(ts[0]),
        "add": lambda: ts[0] + ts[1],
        "softmax": lambda: tf.softmax(ts[0], -1),
        "layer_norm": lambda: tf.layer_norm(ts[0], (arrays[0].shape[-1],)),
    }
    return table[name]


def timed(fn, steps: int, rounds: int) -> float | None:
    if fn is None:
        return None
    return median([median(time_steps(fn, steps, 1)) for _ in range(rounds)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", help="op names to run")
    args = ap.parse_args()
    steps, rounds = (2, 2) if args.quick else (3, 5)
    info = machine_info()
    print(f"# {info.get('cpu', '')}; 1 thread; numpy {np.__version__}; torch {getattr(torch, '__version__', '-')}")
    print(f"# F16C conversions: {flow._C.lowp_has_f16c()}")
    cols = [
        "op",
        "flow f32 ms",
        "bf16/f32",
        "fp16/f32",
        "numpy bf16/f32",
        "torch f32 ms",
        "torch bf16/f32",
        "flow/torch bf16",
    ]
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    rng = np.random.default_rng(0)
    for name, shapes in _shapes().items():
        if args.only and name not in args.only:
            continue
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        if name == "conv2d":
            arrays[1] *= 0.05
        t32 = timed(flow_case(name, arrays, flow.float32), steps, rounds)
        tb = timed(flow_case(name, arrays, flow.bfloat16), steps, rounds)
        th = timed(flow_case(name, arrays, flow.float16), steps, rounds)
        n32 = timed(numpy_case(name, arrays, np.dtype(np.float32)), steps, rounds)
        nb = timed(numpy_case(name, arrays, BF16), steps, rounds)
        t_t32 = timed(torch_case(name, arrays, torch.float32) if torch else None, steps, rounds)
        t_tb = timed(torch_case(name, arrays, torch.bfloat16) if torch else None, steps, rounds)

        def r(a, b):
            return "-" if a is None or b is None else f"{a / b:.2f}"

        row = [name, f"{t32 * 1e3:.2f}", r(tb, t32), r(th, t32), r(nb, n32)]
        row += ["-" if t_t32 is None else f"{t_t32 * 1e3:.2f}", r(t_tb, t_t32), r(tb, t_tb)]
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
