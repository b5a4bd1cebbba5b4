"""Winograd F(2x2, 3x3) convolution on the CPU (``flow._C.conv2d_winograd_forward``).

A 3x3, stride-1, dilation-1, ungrouped float32 / float64 conv2d costs 16 multiplications per 2x2
output tile and (input, output) channel pair instead of 36; the 16 channel sums are GEMMs through
the single-threaded BLAS inside flow's OpenMP pool (see ``csrc/winograd.cpp``). The input gradient of
such a layer is again one (the flipped, transposed kernel at padding ``2 - p``), served the same way;
the weight gradient stays the im2col GEMM of :mod:`flow.backends.cpu.conv`.

Where it is used:

* graph mode with autotuning: ``conv2d`` and ``conv2d_backward_input`` have a second CPU kernel named
  ``"winograd"``; the executor times it against ``"default"`` (the GEMM) and keeps the faster.
* eager mode: off by default; :func:`set_conv_algorithm` switches to ``"winograd"`` (wherever it
  applies) or ``"auto"`` (the faster of the two, timed once per layer shape, like
  ``torch.backends.cudnn.benchmark``). The switch also applies to the graph's ``"default"`` kernel,
  which is the eager one.

Accuracy rule: Winograd's transforms add rounding error that grows with the channel count. Before
its first use on a layer shape (dtype, channels, spatial size, padding) it is run once on one image of
standard-normal input with a standard-normal kernel and compared with the float64 reference
convolution; it is refused for that shape (the GEMM runs, silently) unless
``max|y - y_ref| / max|y_ref| < TOLERANCE[dtype]`` (float32: 1e-4, float64: 1e-10).
Shapes it does not apply to (other kernel sizes, strides, dilations, groups, dtypes) run the GEMM.
"""

from __future__ import annotations

import time

import numpy as np

from flow.backends.cpu import conv, native, threads
from flow.errors import OpError
from flow.ops import nn_conv as R

__all__ = [
    "ALGORITHMS",
    "TOLERANCE",
    "applies",
    "conv2d_backward_input",
    "conv2d_forward",
    "get_conv_algorithm",
    "probe_error",
    "set_conv_algorithm",
]

ALGORITHMS = ("gemm", "winograd", "auto")
TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-10}

_state = {"algorithm": "gemm"}
_accurate: dict[tuple, bool] = {}  # layer shape -> passed the accuracy probe
_faster: dict[tuple, bool] = {}  # layer shape -> Winograd was faster ("auto")


def set_conv_algorithm(name: str) -> None:
    """Choose eager conv2d's CPU algorithm: ``"gemm"`` (default), ``"winograd"`` or ``"auto"``."""
    if name not in ALGORITHMS:
        raise OpError(
            "set_conv_algorithm", f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, got {name!r}"
        )
    _state["algorithm"] = name
    # conv.py calls the hook first when one is installed (None there: the plain GEMM path, no overhead)
    hooked = name != "gemm"
    conv.eager_forward = _eager_forward if hooked else None
    conv.eager_backward_input = _eager_backward_input if hooked else None


def get_conv_algorithm() -> str:
    """The eager conv2d algorithm set by :func:`set_conv_algorithm`."""
    return _state["algorithm"]


def applies(x: np.ndarray, w: np.ndarray, stride: tuple, dilation: tuple, groups: int) -> bool:
    """Whether the Winograd kernel can compute this conv2d (3x3, stride 1, dilation 1, groups 1, float)."""
    return (
        native.HAVE_NATIVE
        and threads.BLAS_PATH is not None
        and hasattr(native._C, "conv2d_winograd_forward")
        and groups == 1
        and tuple(stride) == (1, 1)
        and tuple(dilation) == (1, 1)
        and x.ndim == 4
        and w.ndim == 4
        and w.shape[2:] == (3, 3)
        and x.dtype == w.dtype
        and x.dtype in TOLERANCE
    )


def _run(x: np.ndarray, w: np.ndarray, padding: tuple, Ho: int, Wo: int, out: np.ndarray | None = None) -> np.ndarray:
    if out is None:
        out = np.empty((x.shape[0], w.shape[0], Ho, Wo), dtype=x.dtype)
    native._C.conv2d_winograd_forward(np.ascontiguousarray(x), np.ascontiguousarray(w), out, padding[0], padding[2])
    return out


def probe_error(dtype, C: int, O: int, H: int, W: int, padding: tuple, seed: int = 0) -> float:
    """Max relative error (``max|y - y_ref| / max|y_ref|``) of the Winograd kernel on one image of
    standard-normal data of this shape, against the float64 reference convolution."""
    rng = np.random.default_rng(seed)
    x64 = rng.standard_normal((1, C, H, W))
    w64 = rng.standard_normal((O, C, 3, 3))
    Ho, Wo = R.conv_out_size("conv2d", (H, W), (3, 3), (1, 1), padding, (1, 1))
    ref = R.conv2d_forward(np, x64, w64, None, (1, 1), tuple(padding), (1, 1), 1)
    got = _run(x64.astype(dtype), w64.astype(dtype), padding, Ho, Wo)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return float(np.max(np.abs(got - ref))) / scale if scale > 0 else 0.0


def _accurate_for(dtype, C: int, O: int, H: int, W: int, padding: tuple) -> bool:
    key = (np.dtype(dtype), C, O, H, W, tuple(padding))
    ok = _accurate.get(key)
    if ok is None:
        ok = _accurate[key] = probe_error(dtype, C, O, H, W, padding) < TOLERANCE[key[0]]
    return ok


def _winograd_or_none(x, w, b, stride, padding, dilation, groups, out=None, op="conv2d"):
    """The Winograd result (written into ``out`` when given), or None where it does not apply or failed
    the accuracy probe."""
    if not applies(x, w, stride, dilation, groups):
        return None
    N, C, H, W = x.shape
    if w.shape[1] != C:
        return None  # the GEMM path raises the shape error
    Ho, Wo = R.conv_out_size("conv2d", (H, W), (3, 3), (1, 1), padding, (1, 1))
    if N * C * Ho * Wo == 0 or not _accurate_for(x.dtype, C, w.shape[0], H, W, padding):
        return None
    if out is not None:
        conv._check_out(op, out, (N, w.shape[0], Ho, Wo), x.dtype, (x, w, b))
    out = _run(x, w, padding, Ho, Wo, out)
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def _flip(w: np.ndarray) -> np.ndarray:
    """The kernel of the input gradient: (O, C, 3, 3) -> (C, O, 3, 3), flipped in both spatial axes."""
    return np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])


def _bwi_args(w, padding):
    """The input gradient's kernel and padding: a 3x3 stride-1 conv at padding 2 - p."""
    pt, pb, pl, pr = padding
    return _flip(w), (2 - pt, 2 - pb, 2 - pl, 2 - pr)


def conv2d_forward(
    x, w, b, stride: tuple, padding: tuple, dilation: tuple, groups: int, out: np.ndarray | None = None
) -> np.ndarray:
    """conv2d by Winograd where it applies and passes the accuracy rule, else the GEMM kernel.
    ``out``: an (N, O, Ho, Wo) array the result is written into (and returned), on either path."""
    y = _winograd_or_none(x, w, b, stride, padding, dilation, groups, out)
    return y if y is not None else conv.conv2d_forward(x, w, b, stride, padding, dilation, groups, out=out)


def conv2d_backward_input(
    g, w, input_size: tuple, stride: tuple, padding: tuple, dilation: tuple, groups: int, out=None
) -> np.ndarray:
    """The input gradient of conv2d, by Winograd where it applies, else the GEMM kernel (``out`` as in
    :func:`conv2d_forward`)."""
    dx = _backward_input_or_none(g, w, input_size, stride, padding, dilation, groups, out)
    if dx is not None:
        return dx
    return conv.conv2d_backward_input(g, w, input_size, stride, padding, dilation, groups, out=out)


def _backward_input_or_none(g, w, input_size, stride, padding, dilation, groups, out=None):
    """The input gradient by Winograd, or None where it does not apply (then the GEMM runs)."""
    if not applies(g, w, stride, dilation, groups) or g.shape[1] != w.shape[0]:
        return None
    wf, pad = _bwi_args(w, padding)
    try:
        size = R.conv_out_size("conv2d_backward_input", tuple(g.shape[2:]), (3, 3), (1, 1), pad, (1, 1))
    except OpError:
        return None  # the GEMM path reports the bad geometry
    if tuple(size) != tuple(input_size):
        return None  # a stride-1 layer whose input size the output does not determine: the GEMM
    return _winograd_or_none(g, wf, None, (1, 1), pad, (1, 1), 1, out, "conv2d_backward_input")


def _timed(fn, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def _auto(key: tuple, wino, gemm):
    """``"auto"``: time both once for a layer shape (the first call pays both), then run the faster."""
    fast = _faster.get(key)
    if fast is None:
        tw, out = _timed(wino)
        if out is None:
            return None
        tg, _ = _timed(gemm)
        _faster[key] = tw < tg
        return out
    return wino() if fast else None


def _eager_forward(x, w, b, stride, padding, dilation, groups):
    """conv.py's eager hook: the Winograd result or None (then the GEMM runs)."""
    if _state["algorithm"] == "winograd":
        return _winograd_or_none(x, w, b, stride, padding, dilation, groups)
    if not applies(x, w, stride, dilation, groups):
        return None
    key = ("fwd", x.dtype, x.shape, w.shape, tuple(padding))
    return _auto(
        key,
        lambda: _winograd_or_none(x, w, b, stride, padding, dilation, groups),
        lambda: _gemm_only(conv.conv2d_forward, x, w, b, stride, padding, dilation, groups),
    )


def _eager_backward_input(g, w, input_size, stride, padding, dilation, groups):
    """conv.py's eager hook for the input gradient (None: the GEMM runs)."""
    if _state["algorithm"] == "winograd":
        return _backward_input_or_none(g, w, input_size, stride, padding, dilation, groups)
    if not applies(g, w, stride, dilation, groups):
        return None
    key = ("bwi", g.dtype, g.shape, w.shape, tuple(padding))
    return _auto(
        key,
        lambda: _backward_input_or_none(g, w, input_size, stride, padding, dilation, groups),
        lambda: _gemm_only(conv.conv2d_backward_input, g, w, input_size, stride, padding, dilation, groups),
    )


def _gemm_only(fn, *args):
    """``fn`` with the eager hooks off (the GEMM side of an ``"auto"`` timing)."""
    saved = conv.eager_forward, conv.eager_backward_input
    conv.eager_forward = conv.eager_backward_input = None
    try:
        return fn(*args)
    finally:
        conv.eager_forward, conv.eager_backward_input = saved
