"""Pooling ops (NCHW): max/avg pooling with strided windows, adaptive max pooling, and their backwards.

* ``max_pool2d(input) -> (out, indices)``: a running max over the kernel taps (one strided slice per
  tap, no per-pixel loop); ``indices`` index the flattened input plane, as in PyTorch. Ties keep the
  first tap in scan order, NaN wins.
* ``max_pool2d_backward(grad_output, indices; input_size)``: scatter-add into the input plane;
  ``max_pool2d_gather(input, indices)`` is its adjoint (so max pooling is twice differentiable).
* ``avg_pool2d`` / ``avg_pool2d_backward``: window sums by strided slices (reshape-sum when the
  windows tile the input); each is the other's gradient.
* ``adaptive_max_pool2d(input; output_size) -> (out, indices)``.
* ``max_unpool2d(input, indices; output_size)``: values put at their indices (the last of repeated ones).

The 1-d variants and adaptive average pooling are compositions in :mod:`flow.nn.functional.pooling`.
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops.nn_conv import pad2d, unpad2d, window
from flow.registry.ops import ANY, FLOAT, INDEX64, NUMERIC, Attr, dtypes


# -- shape rules --------------------------------------------------------------------------------------
def pool_out_len(L: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output length (a ceil-mode window must start inside the input or left padding)."""
    num = L + 2 * p - d * (k - 1) - 1 + ((s - 1) if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= L + p:
        out -= 1
    return out


def check_pool_params(op: str, in_size, ks, st, pad, dil, ceil_mode: bool, names=("H", "W")) -> tuple:
    """Validate pooling parameters for the spatial ``in_size``; return the output spatial size."""
    n = len(in_size)
    for name, v, lo in (("kernel_size", ks, 1), ("stride", st, 1), ("dilation", dil, 1), ("padding", pad, 0)):
        if len(v) != n or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise OpTypeError(op, f"'{name}' must be {n} int(s), got {v!r}")
        if any(x < lo for x in v):
            raise OpError(op, f"'{name}' must be {'positive' if lo else 'non-negative'}, got {v}")
    for k, p in zip(ks, pad):
        if p > k // 2:
            raise OpError(
                op, f"'padding' should be at most half of the kernel size, got padding {pad} for kernel_size {ks}"
            )
    out = tuple(pool_out_len(L, k, s, p, d, ceil_mode) for L, k, s, p, d in zip(in_size, ks, st, pad, dil))
    if any(o < 1 for o in out):
        raise OpError(
            op,
            f"the output size {out} is too small (< 1) for input size {tuple(in_size)} with "
            f"kernel_size {ks}, stride {st}, padding {pad}, dilation {dil}",
        )
    return out


def _max_pool_meta(x, kernel_size=(1, 1), stride=(1, 1), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    M.check_ndim("max_pool2d", x, 4)
    ho, wo = check_pool_params("max_pool2d", tuple(x.shape[2:]), kernel_size, stride, padding, dilation, ceil_mode)
    shape = tuple(x.shape[:2]) + (ho, wo)
    return M.TensorMeta(shape, x.dtype, x.device), M.TensorMeta(shape, D.int64, x.device)


def _check_indices(op: str, t, idx):
    if len(idx.shape) != 4 or tuple(idx.shape[:2]) != tuple(t.shape[:2]):
        raise OpError(
            op, f"'indices' must be 4-d with batch and channels {tuple(t.shape[:2])}, got shape {tuple(idx.shape)}"
        )
    return M.check_same_device(op, t, idx)


def _max_bw_meta(g, idx, input_size=()):
    op = "max_pool2d_backward"
    M.check_ndim(op, g, 4, "grad_output")
    dev = _check_indices(op, g, idx)
    if tuple(idx.shape) != tuple(g.shape):
        raise OpError(op, f"'indices' shape {tuple(idx.shape)} must equal 'grad_output' shape {tuple(g.shape)}")
    if len(input_size) != 2 or any(not isinstance(s, int) or s < 1 for s in input_size):
        raise OpError(op, f"'input_size' must be 2 positive ints (H, W), got {input_size}")
    return M.TensorMeta(tuple(g.shape[:2]) + tuple(input_size), g.dtype, dev)


def _unpool_meta(x, idx, output_size=()):
    op = "max_unpool2d"
    M.check_ndim(op, x, 4)
    dev = _check_indices(op, x, idx)
    if tuple(idx.shape) != tuple(x.shape):
        raise OpError(op, f"'indices' shape {tuple(idx.shape)} must equal 'input' shape {tuple(x.shape)}")
    if len(output_size) != 2 or any(not isinstance(s, int) or s < 1 for s in output_size):
        raise OpError(op, f"'output_size' must be 2 positive ints (H, W), got {output_size}")
    return M.TensorMeta(tuple(x.shape[:2]) + tuple(output_size), x.dtype, dev)


def _gather_meta(x, idx):
    op = "max_pool2d_gather"
    M.check_ndim(op, x, 4)
    dev = _check_indices(op, x, idx)
    return M.TensorMeta(tuple(idx.shape), x.dtype, dev)


def _avg_meta(
    x, kernel_size=(1, 1), stride=(1, 1), padding=(0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None
):
    M.check_ndim("avg_pool2d", x, 4)
    if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override == 0):
        raise OpError("avg_pool2d", f"'divisor_override' must be a non-zero int, got {divisor_override!r}")
    ho, wo = check_pool_params("avg_pool2d", tuple(x.shape[2:]), kernel_size, stride, padding, (1, 1), ceil_mode)
    return M.TensorMeta(tuple(x.shape[:2]) + (ho, wo), x.dtype, x.device)


def _avg_bw_meta(
    g,
    input_size=(),
    kernel_size=(1, 1),
    stride=(1, 1),
    padding=(0, 0),
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    op = "avg_pool2d_backward"
    M.check_ndim(op, g, 4, "grad_output")
    if len(input_size) != 2 or any(not isinstance(s, int) or s < 1 for s in input_size):
        raise OpError(op, f"'input_size' must be 2 positive ints (H, W), got {input_size}")
    out = check_pool_params(op, tuple(input_size), kernel_size, stride, padding, (1, 1), ceil_mode)
    if out != tuple(g.shape[2:]):
        raise OpError(
            op,
            f"an input of size {tuple(input_size)} pools to {out}, but 'grad_output' has spatial "
            f"size {tuple(g.shape[2:])}",
        )
    return M.TensorMeta(tuple(g.shape[:2]) + tuple(input_size), g.dtype, g.device)


def _adaptive_max_meta(x, output_size=(1, 1)):
    op = "adaptive_max_pool2d"
    M.check_ndim(op, x, 4)
    if len(output_size) != 2 or any(not isinstance(s, int) or s < 1 for s in output_size):
        raise OpError(op, f"'output_size' must be 2 positive ints, got {output_size}")
    if any(s < 1 for s in x.shape[2:]):
        raise OpError(op, f"'input' must have non-empty spatial dims, got shape {tuple(x.shape)}")
    shape = tuple(x.shape[:2]) + tuple(output_size)
    return M.TensorMeta(shape, x.dtype, x.device), M.TensorMeta(shape, D.int64, x.device)


# -- gradients (flow ops only) ---------------------------------------------------------------------
def _max_grad(ctx, g, _g_idx=None):
    idx = ctx.outputs[1].detach()
    return (call(MAX_POOL2D_BACKWARD, g, idx, input_size=tuple(ctx.input_shape(0)[2:])),)


def _max_bw_grad(ctx, gg):
    idx = ctx.inputs[1]
    return call(MAX_POOL2D_GATHER, gg, idx), None


def _unpool_grad(ctx, g):
    return call(MAX_POOL2D_GATHER, g, ctx.inputs[1]), None  # as PyTorch: every index reads its gradient


def _gather_grad(ctx, g):
    x, idx = ctx.inputs
    return call(MAX_POOL2D_BACKWARD, g, idx, input_size=tuple(x.shape[2:])), None


_AVG_KEYS = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")


def _avg_grad(ctx, g):
    a = {k: ctx.attrs[k] for k in _AVG_KEYS}
    return (call(AVG_POOL2D_BACKWARD, g, input_size=tuple(ctx.input_shape(0)[2:]), **a),)


def _avg_bw_grad(ctx, gg):
    a = {k: ctx.attrs[k] for k in _AVG_KEYS}
    return (call(AVG_POOL2D, gg, **a),)


_WIN = [
    Attr("kernel_size", tuple, items=int),
    Attr("stride", tuple, items=int),
    Attr("padding", tuple, (0, 0), items=int),
]
_AVG_ATTRS = _WIN + [
    Attr("ceil_mode", bool, False),
    Attr("count_include_pad", bool, True),
    Attr("divisor_override", int, None),
]
_INDICES = {"indices": INDEX64}
# As PyTorch on the CPU: max pooling takes integers, average pooling int64 (truncating), adaptive pooling floats.
_AVG_DTYPES = dtypes(
    names=["float16", "bfloat16", "float32", "float64", "int64"], text="a floating-point or int64 tensor"
)

MAX_POOL2D = defop(
    "max_pool2d",
    ["input"],
    _WIN + [Attr("dilation", tuple, (1, 1), items=int), Attr("ceil_mode", bool, False)],
    outputs=("out", "indices"),
    meta=_max_pool_meta,
    dtypes=NUMERIC,
    grad=_max_grad,
    save="outputs",
)
MAX_POOL2D_BACKWARD = defop(
    "max_pool2d_backward",
    ["grad_output", "indices"],
    [Attr("input_size", tuple, items=int)],
    meta=_max_bw_meta,
    dtypes={"grad_output": FLOAT, **_INDICES},
    grad=_max_bw_grad,
    save="inputs",
)
MAX_POOL2D_GATHER = defop(
    "max_pool2d_gather",
    ["input", "indices"],
    meta=_gather_meta,
    dtypes={"input": ANY, **_INDICES},
    grad=_gather_grad,
    save="inputs",
)
MAX_UNPOOL2D = defop(
    "max_unpool2d",
    ["input", "indices"],
    [Attr("output_size", tuple, items=int)],
    meta=_unpool_meta,
    dtypes={"input": ANY, **_INDICES},
    grad=_unpool_grad,
    save="inputs",
)
AVG_POOL2D = defop("avg_pool2d", ["input"], _AVG_ATTRS, meta=_avg_meta, dtypes=_AVG_DTYPES, grad=_avg_grad, save="none")
AVG_POOL2D_BACKWARD = defop(
    "avg_pool2d_backward",
    ["grad_output"],
    [Attr("input_size", tuple, items=int)] + _AVG_ATTRS,
    meta=_avg_bw_meta,
    dtypes=FLOAT,
    grad=_avg_bw_grad,
    save="none",
)
ADAPTIVE_MAX_POOL2D = defop(
    "adaptive_max_pool2d",
    ["input"],
    [Attr("output_size", tuple, items=int)],
    outputs=("out", "indices"),
    meta=_adaptive_max_meta,
    dtypes=FLOAT,
    grad=_max_grad,
    save="outputs",
)


# -- kernels -------------------------------------------------------------------------------------------
def _lowest(x):
    return -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min


def _has_nan(xp, x) -> bool:
    return x.dtype.kind == "f" and bool(xp.isnan(x).any())


def _running_max(xp, taps, shape, has_nan, init_idx=None, lowest=None):
    """Max over ``taps`` (values, flat input index of each output pixel) in scan order, as PyTorch: the
    first maximum wins, a NaN wins; a window whose values are all ``lowest`` gives ``init_idx``."""
    vals = [v for v, _ in taps]
    if has_nan:
        best = xp.empty(shape, dtype=vals[0].dtype)
        best[...] = vals[0]
        idx = xp.empty(shape, dtype=np.int64)
        idx[...] = taps[0][1]
        for v, flat in taps[1:]:
            m = (v > best) | xp.isnan(v)
            xp.copyto(best, v, where=m)
            xp.copyto(idx, flat, where=m)
    else:  # no NaN: a running maximum and the tap number (a small int), indices looked up at the end
        best = xp.empty(shape, dtype=vals[0].dtype)
        best[...] = vals[0]
        tdt = np.int8 if len(taps) < 128 else np.int32
        tap = xp.zeros(shape, dtype=tdt)
        m = xp.empty(shape, dtype=bool)
        for t, v in enumerate(vals[1:], 1):
            # branch-free: the winning tap is the last one that raised the running maximum
            xp.greater(v, best, out=m)
            xp.maximum(best, v, out=best)
            xp.maximum(tap, m * tdt(t), out=tap)
        flats = xp.stack([xp.broadcast_to(xp.asarray(f), shape[-2:]) for _, f in taps])
        ho, wo = xp.arange(shape[-2])[:, None], xp.arange(shape[-1])[None, :]
        idx = flats[tap, ho, wo]
    if init_idx is not None:
        empty = best == lowest
        if bool(empty.any()):
            idx = xp.where(empty, xp.asarray(init_idx), idx)
    return best, idx


@kernel(MAX_POOL2D)
def _max_pool_kernel(xp):
    def run(x, kernel_size, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
        N, C, H, W = x.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
        Ho, Wo = (
            pool_out_len(L, k, s, p, d, ceil_mode)
            for L, k, s, p, d in zip((H, W), kernel_size, stride, padding, dilation)
        )
        need_h, need_w = (Ho - 1) * sh + dh * (kh - 1) + 1, (Wo - 1) * sw + dw * (kw - 1) + 1
        lowest = _lowest(x)
        xpad = pad2d(xp, x, (ph, need_h - H - ph, pw, need_w - W - pw), value=lowest)
        r0, c0 = np.arange(Ho) * sh - ph, np.arange(Wo) * sw - pw
        taps = [
            (window(xpad, i, j, stride, dilation, Ho, Wo), (r0 + i * dh)[:, None] * W + (c0 + j * dw))
            for i in range(kh)
            for j in range(kw)
        ]
        # PyTorch starts each window at its first in-bounds tap with the value -inf
        fr, fc = r0 + (-(np.minimum(r0, 0)) + dh - 1) // dh * dh, c0 + (-(np.minimum(c0, 0)) + dw - 1) // dw * dw
        return _running_max(xp, taps, (N, C, Ho, Wo), _has_nan(xp, x), fr[:, None] * W + fc[None, :], lowest)

    return run


@kernel(ADAPTIVE_MAX_POOL2D)
def _adaptive_max_kernel(xp):
    def run(x, output_size):
        N, C, H, W = x.shape
        Ho, Wo = output_size
        (hs, he), (ws, we) = adaptive_bounds(H, Ho), adaptive_bounds(W, Wo)

        def taps():
            for a in range(int((he - hs).max())):
                r = np.minimum(hs + a, he - 1)
                for b in range(int((we - ws).max())):
                    c = np.minimum(ws + b, we - 1)
                    yield x[:, :, xp.asarray(r)[:, None], xp.asarray(c)[None, :]], r[:, None] * W + c

        return _running_max(xp, list(taps()), (N, C, Ho, Wo), _has_nan(xp, x))

    return run


def adaptive_bounds(L: int, out: int):
    """PyTorch's adaptive windows: [floor(i L / out), ceil((i + 1) L / out))."""
    i = np.arange(out)
    return (i * L) // out, ((i + 1) * L + out - 1) // out


def _check_flat(op: str, idx, size) -> None:
    """``idx`` holds flat positions in an H x W plane: each must be in [0, H * W)."""
    if idx.size and hasattr(idx, "min"):
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= size[0] * size[1]:
            raise OpIndexError(
                op, f"index {lo if lo < 0 else hi} is out of range for a plane of size {size[0]}x{size[1]}"
            )


@kernel(MAX_POOL2D_BACKWARD)
def _max_bw_kernel(xp):
    def run(g, idx, input_size):
        N, C = g.shape[:2]
        _check_flat("max_pool2d_backward", idx, input_size)
        HW = input_size[0] * input_size[1]
        out = xp.zeros(N * C * HW, dtype=g.dtype)
        flat = idx.reshape(N * C, idx.shape[2] * idx.shape[3]) + (xp.arange(N * C, dtype=np.int64) * HW)[:, None]
        xp.add.at(out, flat.ravel(), g.ravel())
        return out.reshape((N, C) + tuple(input_size))

    return run


@kernel(MAX_UNPOOL2D)
def _unpool_kernel(xp):
    def run(x, idx, output_size):
        N, C = x.shape[:2]
        _check_flat("max_unpool2d", idx, output_size)
        HW = output_size[0] * output_size[1]
        out = xp.zeros(N * C * HW, dtype=x.dtype)
        flat = idx.reshape(N * C, idx.shape[2] * idx.shape[3]) + (xp.arange(N * C, dtype=np.int64) * HW)[:, None]
        out[flat.ravel()] = x.ravel()  # a repeated index keeps the last value, as PyTorch on the CPU
        return out.reshape((N, C) + tuple(output_size))

    return run


@kernel(MAX_POOL2D_GATHER)
def _gather_kernel(xp):
    def run(x, idx):
        N, C, H, W = x.shape
        _check_flat("max_pool2d_gather", idx, (H, W))
        flat = idx.reshape(N * C, idx.shape[2] * idx.shape[3]) + (xp.arange(N * C, dtype=np.int64) * (H * W))[:, None]
        return xp.ascontiguousarray(x).ravel()[flat.ravel()].reshape(idx.shape)

    return run


def _avg_geometry(H, W, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """Output size, (top, bottom, left, right) padding covering every window, divisor map or scalar, tiling."""
    Ho, Wo = (pool_out_len(L, k, s, p, 1, ceil_mode) for L, k, s, p in zip((H, W), kernel_size, stride, padding))
    sizes = []
    for L, n, k, s, p in zip((H, W), (Ho, Wo), kernel_size, stride, padding):
        start = np.arange(n) * s - p
        end = np.minimum(start + k, L + p)
        full = end - start
        cnt = np.minimum(end, L) - np.maximum(start, 0)
        sizes.append((full, np.maximum(cnt, 0)))
    if divisor_override is not None:
        div = float(divisor_override)
    else:
        pick = 0 if count_include_pad else 1
        div = (sizes[0][pick][:, None] * sizes[1][pick][None, :]).astype(np.float64)
        div[div == 0] = 1.0  # empty windows give 0 (the sum is 0), as in PyTorch
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    pads = (ph, (Ho - 1) * sh + kh - H - ph, pw, (Wo - 1) * sw + kw - W - pw)
    tiles = tuple(stride) == tuple(kernel_size) and pads == (0, 0, 0, 0)
    return Ho, Wo, pads, div, tiles


def _div_array(xp, div, dtype):
    return div if isinstance(div, float) else xp.asarray(div, dtype=dtype)


@kernel(AVG_POOL2D)
def _avg_kernel(xp):
    def run(x, kernel_size, stride, padding=(0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None):
        N, C, H, W = x.shape
        Ho, Wo, pads, div, tiles = _avg_geometry(
            H, W, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
        )
        kh, kw = kernel_size
        if tiles and kh * kw > 4:  # large tiling windows (global pooling): reduce contiguous axes
            s = x.reshape(N, C, Ho, kh, Wo, kw).sum(axis=5).sum(axis=3)
        else:
            xpad = pad2d(xp, x, pads)
            s = xp.empty((N, C, Ho, Wo), dtype=x.dtype)
            s[...] = window(xpad, 0, 0, stride, (1, 1), Ho, Wo)
            for t in range(1, kh * kw):
                s += window(xpad, t // kw, t % kw, stride, (1, 1), Ho, Wo)
        if x.dtype.kind in "iu":  # an integer mean truncates toward zero, as PyTorch's integer division
            return xp.trunc(s / _div_array(xp, div, np.float64)).astype(x.dtype)
        s /= _div_array(xp, div, x.dtype)
        return s.astype(x.dtype, copy=False)

    return run


@kernel(AVG_POOL2D_BACKWARD)
def _avg_bw_kernel(xp):
    def run(
        g,
        input_size,
        kernel_size,
        stride,
        padding=(0, 0),
        ceil_mode=False,
        count_include_pad=True,
        divisor_override=None,
    ):
        N, C = g.shape[:2]
        H, W = input_size
        Ho, Wo, pads, div, tiles = _avg_geometry(
            H, W, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
        )
        kh, kw = kernel_size
        gd = (g / _div_array(xp, div, g.dtype)).astype(g.dtype, copy=False)
        if tiles:
            return gd.repeat(kh, axis=2).repeat(kw, axis=3)
        dxp = xp.zeros((N, C, H + pads[0] + pads[1], W + pads[2] + pads[3]), dtype=g.dtype)
        for i in range(kh):
            for j in range(kw):
                window(dxp, i, j, stride, (1, 1), Ho, Wo)[...] += gd
        return unpad2d(xp, dxp, pads, H, W)

    return run


__all__: list[str] = []
