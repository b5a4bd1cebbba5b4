"""Pooling, as ``torch.nn.functional``: max/avg pooling (1-d, 2-d), adaptive pooling and max unpooling.

The 1-d functions pool over a unit height with the 2-d ops. Adaptive average pooling is an average
pooling when the windows tile the input, otherwise two matmuls with averaging matrices (it is
separable), so it is differentiable to any order.
"""

from __future__ import annotations

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.nn.functional.conv import check_input, ntuple
from flow.ops import nn_pool as P

__all__ = [
    "max_pool1d",
    "max_pool2d",
    "avg_pool1d",
    "avg_pool2d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "max_unpool1d",
    "max_unpool2d",
]


def _batched(x, nd: int):
    """(x as a 4-d tensor, a function undoing the reshaping) for an nd-d pooling input."""
    unbatched = x.ndim == nd + 1
    y = x.unsqueeze(0) if unbatched else x
    if nd == 1:
        y = y.unsqueeze(2)

    def undo(t):
        if nd == 1:
            t = t.squeeze(2)
        return t.squeeze(0) if unbatched else t

    return y, undo


def _window_args(op, nd, kernel_size, stride, padding, dilation):
    ks = ntuple(op, "kernel_size", kernel_size, nd, 1)
    st = (
        ks
        if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0)
        else ntuple(op, "stride", stride, nd, 1)
    )
    pad = ntuple(op, "padding", padding, nd, 0)
    dil = ntuple(op, "dilation", dilation, nd, 1)
    return ks, st, pad, dil


def _to2d(nd, *tuples):
    return tuple(t if nd == 2 else (d,) + t for t, d in zip(tuples, (1, 1, 0, 1)))


def _max_pool(op, nd, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    check_input(op, input, "input", (nd + 1, nd + 2))
    ks, st, pad, dil = _window_args(op, nd, kernel_size, stride, padding, dilation)
    P.check_pool_params(op, tuple(input.shape[-nd:]), ks, st, pad, dil, bool(ceil_mode))
    x, undo = _batched(input, nd)
    ks, st, pad, dil = _to2d(nd, ks, st, pad, dil)
    out, idx = call(P.MAX_POOL2D, x, kernel_size=ks, stride=st, padding=pad, dilation=dil, ceil_mode=bool(ceil_mode))
    return (undo(out), undo(idx)) if return_indices else undo(out)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-d max pooling of an (N, C, H, W) or (C, H, W) input; ``indices`` index each flattened input plane."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-d max pooling of an (N, C, L) or (C, L) input."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_pool(op, nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    check_input(op, input, "input", (nd + 1, nd + 2))
    ks, st, pad, dil = _window_args(op, nd, kernel_size, stride, padding, 1)
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, int):
            raise OpTypeError(op, f"'divisor_override' must be an int or None, got {divisor_override!r}")
        if divisor_override == 0:
            raise OpError(op, "'divisor_override' must be non-zero, got 0")
    rule = P.AVG_POOL2D.opdef.schema.inputs[0].dtypes if P.AVG_POOL2D.opdef else None
    if rule is not None and not rule.accepts(input.dtype):  # checked here to name this function
        raise OpTypeError(op, f"'input' must be {rule.text}, got {input.dtype}")
    P.check_pool_params(op, tuple(input.shape[-nd:]), ks, st, pad, dil, bool(ceil_mode))
    x, undo = _batched(input, nd)
    ks, st, pad = _to2d(nd, ks, st, pad)
    out = call(
        P.AVG_POOL2D,
        x,
        kernel_size=ks,
        stride=st,
        padding=pad,
        ceil_mode=bool(ceil_mode),
        count_include_pad=bool(count_include_pad),
        divisor_override=divisor_override,
    )
    return undo(out)


def avg_pool2d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    """2-d average pooling of an (N, C, H, W) or (C, H, W) input."""
    return _avg_pool(
        "avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-d average pooling of an (N, C, L) or (C, L) input."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def _output_size(op, output_size, in_size):
    n = len(in_size)
    if isinstance(output_size, (list, tuple)):
        vals = tuple(output_size)
        if len(vals) != n:
            raise OpError(op, f"'output_size' must have {n} element(s), got {output_size!r}")
    else:
        vals = (output_size,) * n
    out = []
    for v, L in zip(vals, in_size):
        if v is None:
            v = L
        if isinstance(v, bool) or not isinstance(v, int):
            raise OpTypeError(op, f"'output_size' must be int(s) or None, got {output_size!r}")
        if v < 1:
            raise OpError(op, f"'output_size' must be >= 1, got {output_size!r}")
        out.append(v)
    if any(L < 1 for L in in_size):
        raise OpError(op, f"'input' must have non-empty spatial dims, got spatial size {tuple(in_size)}")
    return tuple(out)


def averaging_matrix(L: int, n: int) -> np.ndarray:
    """(n, L) matrix averaging PyTorch's adaptive windows."""
    start, end = P.adaptive_bounds(L, n)
    cols = np.arange(L)
    A = ((cols[None, :] >= start[:, None]) & (cols[None, :] < end[:, None])).astype(np.float64)
    return A / (end - start)[:, None]


def _const(a: np.ndarray, like):
    from flow._creation import tensor

    return tensor(a, dtype=like.dtype, device=like.device)


def _adaptive_avg(op, nd, input, output_size):
    check_input(op, input, "input", (nd + 1, nd + 2))
    if not input.dtype.is_floating_point:
        raise OpTypeError(op, f"'input' must be a floating-point tensor, got {input.dtype}")
    in_size = tuple(input.shape[-nd:])
    out_size = _output_size(op, output_size, in_size)
    x, undo = _batched(input, nd)
    in2, out2 = tuple(x.shape[2:]), ((1,) + out_size if nd == 1 else out_size)
    if all(L % n == 0 for L, n in zip(in2, out2)):
        k = tuple(L // n for L, n in zip(in2, out2))
        return undo(
            call(
                P.AVG_POOL2D,
                x,
                kernel_size=k,
                stride=k,
                padding=(0, 0),
                ceil_mode=False,
                count_include_pad=True,
                divisor_override=None,
            )
        )
    (H, W), (Ho, Wo) = in2, out2
    out = x
    if Wo != W:
        out = out.matmul(_const(averaging_matrix(W, Wo).T, x))
    if Ho != H:
        out = _const(averaging_matrix(H, Ho), x).matmul(out)
    return undo(out)


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to ``output_size`` (int, pair; None keeps that dim) with PyTorch's adaptive windows."""
    return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


def adaptive_avg_pool1d(input, output_size):
    """1-d adaptive average pooling of an (N, C, L) or (C, L) input."""
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


def _adaptive_max(op, nd, input, output_size, return_indices):
    check_input(op, input, "input", (nd + 1, nd + 2))
    out_size = _output_size(op, output_size, tuple(input.shape[-nd:]))
    x, undo = _batched(input, nd)
    out, idx = call(P.ADAPTIVE_MAX_POOL2D, x, output_size=(1,) + out_size if nd == 1 else out_size)
    return (undo(out), undo(idx)) if return_indices else undo(out)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max pooling to ``output_size`` with PyTorch's adaptive windows."""
    return _adaptive_max("adaptive_max_pool2d", 2, input, output_size, return_indices)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """1-d adaptive max pooling of an (N, C, L) or (C, L) input."""
    return _adaptive_max("adaptive_max_pool1d", 1, input, output_size, return_indices)


def _max_unpool(op, nd, input, indices, kernel_size, stride, padding, output_size):
    check_input(op, input, "input", (nd + 1, nd + 2))
    check_input(op, indices, "indices", (input.ndim,))
    if tuple(indices.shape) != tuple(input.shape):
        raise OpError(op, f"'indices' shape {tuple(indices.shape)} must equal 'input' shape {tuple(input.shape)}")
    ks, st, pad, _ = _window_args(op, nd, kernel_size, stride, padding, 1)
    in_size = tuple(input.shape[-nd:])
    default = tuple((L - 1) * s - 2 * p + k for L, s, p, k in zip(in_size, st, pad, ks))
    if output_size is None:
        size = default
    else:
        size = tuple(int(v) for v in output_size)[-nd:]
        if len(size) != nd:
            raise OpError(op, f"'output_size' must end with {nd} spatial size(s), got {output_size!r}")
        for v, d, s in zip(size, default, st):
            if not d - s < v < d + s:
                raise OpError(op, f"'output_size' {size} must be within a stride of the default size {default}")
    if any(v < 1 for v in size):
        raise OpError(op, f"the output size {size} must be >= 1")
    n = int(np.prod(size))
    if indices.numel() and (int(indices._data.max()) >= n or int(indices._data.min()) < 0):
        raise OpError(op, f"'indices' must lie in [0, {n}) for an output of size {size}")
    x, undo = _batched(input, nd)
    idx, _ = _batched(indices, nd)
    return undo(call(P.MAX_UNPOOL2D, x, idx, output_size=(1,) + size if nd == 1 else size))


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Put each value at its max-pool index in a zero (…, H, W) output (the inverse of max_pool2d)."""
    return _max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """1-d max unpooling."""
    return _max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding, output_size)
