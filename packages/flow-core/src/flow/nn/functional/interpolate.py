"""Resizing, as ``torch.nn.functional.interpolate`` (and ``upsample``).

Nearest, nearest-exact, (bi/tri)linear and area resizing are separable linear maps: each spatial
axis is multiplied by a small (out, in) matrix built with PyTorch's index and weight formulas
(computed in float32 for float32 inputs, as PyTorch does). The result is a chain of matmuls, so
it is fast and differentiable to any order without ops of its own.
"""

from __future__ import annotations

import math

import numpy as np

from flow.errors import OpError, OpTypeError
from flow.nn.functional.conv import check_input
from flow.ops.composite import composite

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear"]

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear", "area", "bicubic")
_LINEAR_DIMS = {"linear": 1, "bilinear": 2, "trilinear": 3}


def _scale_value(scale, L: int, n: int, ftype):
    # PyTorch's compute_scales_value: 1 / scale_factor when one is used, else in / out
    if scale is not None and scale > 0:
        return ftype(1.0 / scale)
    return ftype(L) / ftype(n)


def nearest_matrix(L: int, n: int, scale, exact: bool) -> np.ndarray:
    """(n, L) selection matrix of PyTorch's nearest (or nearest-exact) source indices."""
    dst = np.arange(n)
    if n == L:
        src = dst
    elif n == 2 * L:
        src = dst >> 1
    else:
        s = _scale_value(scale, L, n, np.float32)  # PyTorch computes these indices in float32
        pos = ((dst.astype(np.float32) + np.float32(0.5)) if exact else dst.astype(np.float32)) * s
        src = np.minimum(np.floor(pos).astype(np.int64), L - 1)
    A = np.zeros((n, L))
    A[dst, src] = 1.0
    return A


def linear_matrix(L: int, n: int, scale, align_corners: bool, ftype=np.float64) -> np.ndarray:
    """(n, L) matrix of PyTorch's linear interpolation weights (two taps per row)."""
    if n == L:
        return np.eye(L)
    if align_corners:
        s = ftype(L - 1) / ftype(n - 1) if n > 1 else ftype(0)
    else:
        s = _scale_value(scale, L, n, ftype)
    dst = np.arange(n).astype(ftype)
    src = s * dst if align_corners else np.maximum(s * (dst + ftype(0.5)) - ftype(0.5), ftype(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), L - 1)
    lam = np.clip(src - i0.astype(ftype), 0, 1).astype(np.float64)
    i1 = i0 + (i0 < L - 1)
    A = np.zeros((n, L))
    rows = np.arange(n)
    np.add.at(A, (rows, i0), 1.0 - lam)
    np.add.at(A, (rows, i1), lam)
    return A


def _sizes(op, x, size, scale_factor, recompute_scale_factor):
    nd = x.ndim - 2
    in_size = tuple(x.shape[2:])
    if (size is None) == (scale_factor is None):
        raise OpError(op, "exactly one of 'size' and 'scale_factor' must be given")
    if size is not None:
        vals = tuple(size) if isinstance(size, (list, tuple)) else (size,) * nd
        if len(vals) != nd or any(isinstance(v, bool) or not isinstance(v, int) for v in vals):
            raise OpError(op, f"'size' must be an int or {nd} ints for a {x.ndim}-d input, got {size!r}")
        out, scales = vals, (None,) * nd
    else:
        vals = tuple(scale_factor) if isinstance(scale_factor, (list, tuple)) else (scale_factor,) * nd
        if len(vals) != nd or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in vals):
            raise OpError(
                op, f"'scale_factor' must be a number or {nd} numbers for a {x.ndim}-d input, got {scale_factor!r}"
            )
        if any(not v > 0 or not math.isfinite(v) for v in vals):
            raise OpError(op, f"'scale_factor' must be positive and finite, got {scale_factor!r}")
        out = tuple(int(math.floor(float(L) * float(s))) for L, s in zip(in_size, vals))
        scales = (None,) * nd if recompute_scale_factor else tuple(float(v) for v in vals)
    if any(o < 1 for o in out):
        raise OpError(
            op,
            f"the output size {out} must be >= 1 (input spatial size {in_size}, size={size!r}, "
            f"scale_factor={scale_factor!r})",
        )
    return in_size, out, scales


def _const(a: np.ndarray, like):
    from flow._creation import tensor

    return tensor(a, dtype=like.dtype, device=like.device)


def apply_separable(x, mats):
    """Multiply each spatial axis k of x (N, C, *spatial) by ``mats[k]`` (n_k, L_k); None skips an axis."""
    nd = x.ndim - 2
    out = x
    for k in reversed(range(nd)):
        A = mats[k]
        if A is None or (A.shape[0] == A.shape[1] and np.array_equal(A, np.eye(A.shape[0]))):
            continue
        if k == nd - 1:
            out = out.matmul(_const(np.ascontiguousarray(A.T), x))
        else:
            shp = tuple(out.shape)
            rest = int(np.prod(shp[3 + k :]))
            y = _const(A, x).matmul(out.reshape(shp[: 2 + k] + (shp[2 + k], rest)))
            out = y.reshape(shp[: 2 + k] + (A.shape[0],) + shp[3 + k :])
    return out


@composite("interpolate")
def interpolate(
    input,
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias=False,
):
    """Resize a 3-d, 4-d or 5-d (N, C, *spatial) input to ``size`` or by ``scale_factor``.

    Modes: ``nearest``, ``nearest-exact``, ``linear`` (3-d), ``bilinear`` (4-d), ``trilinear`` (5-d),
    ``area``; ``align_corners`` for the linear modes.
    """
    op = "interpolate"
    check_input(op, input, "input", (3, 4, 5))
    if mode not in _MODES:
        raise OpError(op, f"'mode' must be one of {_MODES}, got {mode!r}")
    if mode == "bicubic":
        raise OpError(op, "mode 'bicubic' is not supported yet")
    if antialias:
        raise OpError(op, "antialias=True is not supported")
    if not input.dtype.is_floating_point:
        raise OpTypeError(op, f"'input' must be a floating-point tensor, got {input.dtype}")
    nd = input.ndim - 2
    if mode in _LINEAR_DIMS:
        if _LINEAR_DIMS[mode] != nd:
            raise OpError(
                op,
                f"mode '{mode}' needs a {_LINEAR_DIMS[mode] + 2}-d input, got a {input.ndim}-d input "
                f"of shape {tuple(input.shape)}",
            )
    elif align_corners is not None:
        raise OpError(
            op,
            "'align_corners' can only be set with the linear modes (linear, bilinear, trilinear), "
            f"not with mode '{mode}'",
        )
    in_size, out_size, scales = _sizes(op, input, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        from flow.nn.functional.pooling import adaptive_avg_pool1d, adaptive_avg_pool2d, averaging_matrix

        if nd == 1:
            return adaptive_avg_pool1d(input, out_size)
        if nd == 2:
            return adaptive_avg_pool2d(input, out_size)
        return apply_separable(input, [averaging_matrix(L, n) for L, n in zip(in_size, out_size)])
    if mode in ("nearest", "nearest-exact"):
        mats = [nearest_matrix(L, n, s, mode == "nearest-exact") for L, n, s in zip(in_size, out_size, scales)]
    else:
        ftype = np.float64 if input.dtype.np == np.float64 else np.float32
        mats = [linear_matrix(L, n, s, bool(align_corners), ftype) for L, n, s in zip(in_size, out_size, scales)]
    return apply_separable(input, mats)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of :func:`interpolate` (as in PyTorch)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
