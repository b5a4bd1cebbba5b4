"""Joining and rearranging: cat/stack, repeat/tile, flip/roll, tril/triu, broadcasting, meshgrid, one_hot.

Padding is in :mod:`flow.ops.padding`, diag/diag_embed in :mod:`flow.ops.views`. Every result here owns its memory,
except ``broadcast_to``/``broadcast_tensors``/``meshgrid`` which return
expanded views, as in PyTorch.
"""

from __future__ import annotations

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops.movement import _expand_meta, _shape_args, expand, reshape
from flow.registry.ops import ANY, INDEX64, Attr


def _tensor_list(op: str, tensors) -> list:
    from flow._tensor import Tensor

    if isinstance(tensors, Tensor):
        raise OpTypeError(op, "expected a sequence of tensors, got a single Tensor")
    try:
        ts = list(tensors)
    except TypeError:
        raise OpTypeError(op, f"expected a sequence of tensors, got {type(tensors).__name__}") from None
    if not ts:
        raise OpError(op, "expected a non-empty sequence of tensors")
    for i, t in enumerate(ts):
        if not isinstance(t, Tensor):
            raise OpTypeError(op, f"expected a sequence of tensors, element {i} is {type(t).__name__}")
    return ts


def _common_dtype(ts: list):
    dt = ts[0].dtype
    for t in ts[1:]:
        dt = D.promote_types(dt, t.dtype)
    return dt


def _promote_all(ts: list) -> list:
    dt = _common_dtype(ts)
    return [t if t.dtype is dt else t.to(dt) for t in ts]


# -- cat / stack ------------------------------------------------------------------------------
def _cat_meta(tensors, dim=0):
    if not tensors:
        raise OpError("cat", "expected a non-empty list of tensors")
    first = tensors[0]
    dev = M.check_same_device("cat", *tensors)
    s0 = tuple(first.shape)
    if not s0:
        raise OpError("cat", "zero-dimensional tensor 0 cannot be concatenated")
    d = M.wrap_dim("cat", dim, len(s0))
    total = 0
    for i, t in enumerate(tensors):
        s = tuple(t.shape)
        if t.dtype != first.dtype:
            raise OpTypeError(
                "cat",
                f"tensors must have the same dtype after promotion, got {first.dtype} "
                f"(tensor 0) and {t.dtype} (tensor {i})",
            )
        if len(s) != len(s0):
            raise OpError(
                "cat", f"tensors must have the same number of dims: tensor 0 has shape {s0}, tensor {i} has shape {s}"
            )
        for k, (a, b) in enumerate(zip(s0, s)):
            if k != d and a != b:
                raise OpError(
                    "cat",
                    f"sizes of tensors must match except in dim {d}: tensor 0 has shape {s0}, "
                    f"tensor {i} has shape {s} (dim {k}: {a} vs {b})",
                )
        total += s[d]
    return M.TensorMeta(s0[:d] + (total,) + s0[d + 1 :], first.dtype, dev)


def _cat_grad(ctx, g):
    from flow.ops.views import split

    d = ctx.attrs["dim"]
    n = len(ctx.next)
    sizes = [ctx.input_shape(i)[d] for i in range(n)]
    return (list(split(g, sizes, d)),)


CAT = defop("cat", ["*tensors"], [Attr("dim", int, 0)], meta=_cat_meta, dtypes=ANY, grad=_cat_grad, save="none")


@kernel(CAT)
def _cat_kernel(xp):
    def run(tensors, dim=0):
        return xp.concatenate(tensors, axis=dim)

    return run


def cat(tensors, dim: int = 0, *, axis: int | None = None):
    """Concatenate along an existing dim; dtypes are promoted (PyTorch's legacy empty 1-d inputs are skipped)."""
    ts = _tensor_list("cat", tensors)
    if axis is not None:
        dim = axis
    keep = [t for t in ts if not (t.ndim == 1 and t.shape[0] == 0)] or ts[:1]
    dt = _common_dtype(ts)
    keep = [t if t.dtype is dt else t.to(dt) for t in keep]
    return call(CAT, keep, dim=int(dim))


concat = cat
concatenate = cat


def _stack_meta(tensors, dim=0):
    if not tensors:
        raise OpError("stack", "expected a non-empty list of tensors")
    dev = M.check_same_device("stack", *tensors)
    s0 = tuple(tensors[0].shape)
    for i, t in enumerate(tensors):
        if tuple(t.shape) != s0:
            raise OpError(
                "stack",
                f"expects each tensor to have the same shape, got {s0} (tensor 0) and {tuple(t.shape)} (tensor {i})",
            )
        if t.dtype != tensors[0].dtype:
            raise OpTypeError(
                "stack", f"tensors must have the same dtype after promotion, got {tensors[0].dtype} and {t.dtype}"
            )
    d = M.wrap_dim("stack", dim, len(s0) + 1)
    return M.TensorMeta(s0[:d] + (len(tensors),) + s0[d:], tensors[0].dtype, dev)


def _stack_grad(ctx, g):
    from flow.ops.views import unbind

    return (list(unbind(g, ctx.attrs["dim"])),)


STACK = defop("stack", ["*tensors"], [Attr("dim", int, 0)], meta=_stack_meta, dtypes=ANY, grad=_stack_grad, save="none")


@kernel(STACK)
def _stack_kernel(xp):
    def run(tensors, dim=0):
        return xp.stack(tensors, axis=dim)

    return run


def stack(tensors, dim: int = 0):
    """Join same-shaped tensors along a new dim ``dim``; dtypes are promoted."""
    ts = _promote_all(_tensor_list("stack", tensors))
    return call(STACK, ts, dim=int(dim))


def _atleast(tensors, fn):
    seq = len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
    out = tuple(fn(t) for t in (tensors[0] if seq else tensors))
    return out[0] if len(out) == 1 and not seq else out


def atleast_1d(*tensors):
    return _atleast(tensors, lambda t: t.reshape(1) if t.ndim == 0 else t)


def atleast_2d(*tensors):
    return _atleast(tensors, lambda t: t.reshape(1, -1) if t.ndim < 2 else t)


def atleast_3d(*tensors):
    return _atleast(tensors, lambda t: t.reshape(1, -1, 1) if t.ndim < 2 else t.unsqueeze(-1) if t.ndim == 2 else t)


def hstack(tensors):
    ts = [atleast_1d(t) for t in _tensor_list("hstack", tensors)]
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    return cat([atleast_2d(t) for t in _tensor_list("vstack", tensors)], 0)


def dstack(tensors):
    return cat([atleast_3d(t) for t in _tensor_list("dstack", tensors)], 2)


row_stack = vstack


def column_stack(tensors):
    ts = [t.reshape(-1, 1) if t.ndim <= 1 else t for t in _tensor_list("column_stack", tensors)]
    return cat(ts, 1)


# -- repeat / tile (composites: expand + reshape) --------------------------------------------------
def _owned(out, input):
    """Make sure a composite's result does not alias ``input``'s memory (repeat/tile copy)."""
    if out is input or getattr(out._data, "base", None) is not None:
        from flow.ops.conversion import clone

        return clone(out)
    return out


def repeat(input, *sizes):
    """Repeat along each dim ``sizes[i]`` times (``len(sizes) >= input.ndim``); a copy."""
    sizes = _shape_args(sizes)
    nd = input.ndim
    if len(sizes) < nd:
        raise OpError(
            "repeat", f"the number of repeat dims {len(sizes)} can not be smaller than the tensor's number of dims {nd}"
        )
    if any(s < 0 for s in sizes):
        raise OpError("repeat", f"repeats must be non-negative, got {sizes}")
    shape = (1,) * (len(sizes) - nd) + tuple(input.shape)
    inter = []
    for s in shape:
        inter += [1, s]
    x = reshape(input, tuple(inter))
    big = []
    for r, s in zip(sizes, shape):
        big += [r, s]
    x = expand(x, *big)
    return _owned(reshape(x, tuple(r * s for r, s in zip(sizes, shape))), input)


def tile(input, dims):
    """Like :func:`repeat`, with ``dims`` padded with leading 1s when shorter than ``input.ndim``."""
    dims = _shape_args((dims,)) if isinstance(dims, (tuple, list)) else _shape_args((dims,))
    dims = (1,) * (input.ndim - len(dims)) + tuple(dims)
    return repeat(input, *dims)


def repeat_interleave(input, repeats=None, dim: int | None = None, *, output_size: int | None = None):
    """Repeat each element ``repeats`` times (an int or a tensor of counts) along ``dim`` (flattened if None)."""
    import numpy as np

    from flow._creation import tensor
    from flow._tensor import Tensor
    from flow.ops.indexing import index_select

    if repeats is None:  # repeat_interleave(repeats_tensor): indices repeated by their counts
        counts = input.numpy_host()
        return tensor(np.repeat(np.arange(counts.shape[0]), counts), device=input.device)
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else M.wrap_dim("repeat_interleave", dim, max(x.ndim, 1))
    if x.ndim == 0:
        x = x.reshape(1)
    n = x.shape[d]
    reps = repeats.numpy_host().reshape(-1) if isinstance(repeats, Tensor) else np.asarray([int(repeats)])
    if reps.size not in (1, n):
        raise OpError("repeat_interleave", f"repeats must have 1 or {n} elements, got {reps.size}")
    if (reps < 0).any():
        raise OpError("repeat_interleave", "repeats must be non-negative")
    idx = np.repeat(np.arange(n), np.broadcast_to(reps, (n,)))
    return index_select(x, d, tensor(idx, device=x.device))


# -- flip / roll --------------------------------------------------------------------------------
def _flip_meta(x, dims):
    M.wrap_dims("flip", dims, len(x.shape))
    return M.TensorMeta(tuple(x.shape), x.dtype, x.device)


FLIP = defop(
    "flip",
    ["input"],
    [Attr("dims", tuple, items=int)],
    meta=_flip_meta,
    dtypes=ANY,
    save="none",
    grad=lambda ctx, g: (call(FLIP, g, dims=ctx.attrs["dims"]),),
)


@kernel(FLIP)
def _flip_kernel(xp):
    def run(x, dims):
        if x.ndim == 0:
            return x.copy()
        return xp.ascontiguousarray(xp.flip(x, axis=tuple(d % x.ndim for d in dims)))

    return run


def flip(input, dims):
    """Reverse the order of elements along ``dims`` (a copy, as in PyTorch)."""
    dims = (dims,) if isinstance(dims, int) else tuple(int(d) for d in dims)
    return call(FLIP, input, dims=M.wrap_dims("flip", dims, input.ndim) if input.ndim else ())


def fliplr(input):
    if input.ndim < 2:
        raise OpError("fliplr", f"input must be at least 2-d, got shape {tuple(input.shape)}")
    return flip(input, (1,))


def flipud(input):
    if input.ndim < 1:
        raise OpError("flipud", "input must be at least 1-d")
    return flip(input, (0,))


def rot90(input, k: int = 1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``dims``."""
    if len(dims) != 2:
        raise OpError("rot90", f"dims must have length 2, got {dims}")
    d0, d1 = M.wrap_dims("rot90", dims, input.ndim)
    k %= 4
    if k == 1:
        return flip(input, (d1,)).transpose(d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return flip(input, (d0,)).transpose(d0, d1)
    from flow.ops.conversion import clone

    return clone(input)


def _roll_meta(x, shifts, dims=None):
    if dims is None:
        if len(shifts) != 1:
            raise OpError("roll", f"without dims, shifts must be a single int, got {shifts}")
    else:
        if len(shifts) != len(dims):
            raise OpError("roll", f"shifts {shifts} and dims {dims} must have the same length")
        for d in dims:
            M.wrap_dim("roll", d, len(x.shape))
    return M.TensorMeta(tuple(x.shape), x.dtype, x.device)


ROLL = defop(
    "roll",
    ["input"],
    [Attr("shifts", tuple, items=int), Attr("dims", (tuple, type(None)), None, items=int)],
    meta=_roll_meta,
    dtypes=ANY,
    save="none",
    grad=lambda ctx, g: (call(ROLL, g, shifts=tuple(-s for s in ctx.attrs["shifts"]), dims=ctx.attrs["dims"]),),
)


@kernel(ROLL)
def _roll_kernel(xp):
    def run(x, shifts, dims=None):
        if dims is None:
            return xp.roll(x, shifts[0])
        return xp.roll(x, shifts, axis=dims)

    return run


def roll(input, shifts, dims=None):
    """Shift elements cyclically along ``dims`` (the flattened tensor when None)."""
    shifts = (shifts,) if isinstance(shifts, int) else tuple(int(s) for s in shifts)
    if dims is not None:
        dims = (dims,) if isinstance(dims, int) else tuple(int(d) for d in dims)
    return call(ROLL, input, shifts=shifts, dims=dims)


# -- tril / triu ----------------------------------------------------------------------------------
def _tri_meta(name):
    def rule(x, diagonal=0):
        if len(x.shape) < 2:
            raise OpError(name, f"input must be at least 2-d, got shape {tuple(x.shape)}")
        return M.TensorMeta(tuple(x.shape), x.dtype, x.device)

    return rule


TRIL = defop(
    "tril",
    ["input"],
    [Attr("diagonal", int, 0)],
    meta=_tri_meta("tril"),
    dtypes=ANY,
    save="none",
    grad=lambda ctx, g: (call(TRIL, g, diagonal=ctx.attrs["diagonal"]),),
)
TRIU = defop(
    "triu",
    ["input"],
    [Attr("diagonal", int, 0)],
    meta=_tri_meta("triu"),
    dtypes=ANY,
    save="none",
    grad=lambda ctx, g: (call(TRIU, g, diagonal=ctx.attrs["diagonal"]),),
)


@kernel(TRIL)
def _tril_kernel(xp):
    return lambda x, diagonal=0: xp.tril(x, diagonal)


@kernel(TRIU)
def _triu_kernel(xp):
    return lambda x, diagonal=0: xp.triu(x, diagonal)


def tril(input, diagonal: int = 0):
    """The lower triangle of the last two dims (elements above ``diagonal`` zeroed)."""
    return call(TRIL, input, diagonal=int(diagonal))


def triu(input, diagonal: int = 0):
    """The upper triangle of the last two dims (elements below ``diagonal`` zeroed)."""
    return call(TRIU, input, diagonal=int(diagonal))


# -- broadcasting / meshgrid ---------------------------------------------------------------------------
def broadcast_shapes(*shapes):
    """The shape the given shapes broadcast to (``torch.broadcast_shapes``)."""
    from flow._tensor import Size

    shapes = [(s,) if isinstance(s, int) else tuple(s) for s in shapes]
    return Size(M.broadcast_shapes("broadcast_shapes", *shapes))


def broadcast_to(input, size):
    """``input`` expanded to ``size`` (a view; -1 keeps a dim)."""
    size = _shape_args((size,)) if isinstance(size, (tuple, list)) else _shape_args((size,))
    try:
        _expand_meta(input, size)
    except OpError as e:
        raise OpError(
            "broadcast_to", f"cannot broadcast shape {tuple(input.shape)} to {size}: {str(e).split(': ', 1)[-1]}"
        ) from None
    return expand(input, *size)


def broadcast_tensors(*tensors):
    """Expand all tensors to their common broadcast shape (views)."""
    ts = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    ts = _tensor_list("broadcast_tensors", ts)
    shape = M.broadcast_shapes("broadcast_tensors", *[tuple(t.shape) for t in ts])
    return tuple(expand(t, *shape) for t in ts)


def meshgrid(*tensors, indexing: str = "ij"):
    """Coordinate grids from 1-d tensors; ``indexing='xy'`` swaps the first two dims (expanded views)."""
    ts = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    ts = _tensor_list("meshgrid", ts)
    if indexing not in ("ij", "xy"):
        raise OpError("meshgrid", f"indexing must be 'ij' or 'xy', got {indexing!r}")
    for i, t in enumerate(ts):
        if t.ndim > 1:
            raise OpError("meshgrid", f"expects 0-d or 1-d tensors, tensor {i} has shape {tuple(t.shape)}")
    sizes = [t.numel() for t in ts]
    pos = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2:
        pos[0], pos[1] = 1, 0
    shape = [0] * len(ts)
    for i, p in enumerate(pos):
        shape[p] = sizes[i]
    out = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[pos[i]] = sizes[i]
        out.append(expand(reshape(t, tuple(view)), *shape))
    return tuple(out)


# -- one_hot ---------------------------------------------------------------------------------------------
def _one_hot_meta(x, num_classes):
    if num_classes < 0:
        raise OpError("one_hot", f"num_classes must be non-negative, got {num_classes}")
    return M.TensorMeta(tuple(x.shape) + (num_classes,), D.int64, x.device)


ONE_HOT = defop("one_hot", ["input"], [Attr("num_classes", int)], meta=_one_hot_meta, dtypes=INDEX64, save="none")


@kernel(ONE_HOT)
def _one_hot_kernel(xp):
    def run(x, num_classes):
        if x.size:
            lo, hi = int(x.min()), int(x.max())
            if lo < 0 or hi >= num_classes:
                bad = lo if lo < 0 else hi
                raise OpIndexError(
                    "one_hot",
                    f"class value {bad} is out of range for num_classes={num_classes} "
                    f"(expected 0 <= value < {num_classes})",
                )
        return (x[..., None] == xp.arange(num_classes)).astype(xp.int64)

    return run


def one_hot(tensor, num_classes: int = -1):
    """One-hot int64 encoding in a new last dim; ``num_classes=-1`` uses ``max + 1``."""
    M.check_same_device("one_hot", tensor)
    if not INDEX64.accepts(tensor.dtype):  # as PyTorch: class indices are int64 (LongTensor)
        raise OpTypeError("one_hot", f"'tensor' must be {INDEX64.text}, got {tensor.dtype}")
    if num_classes == -1:
        if tensor.numel() == 0:
            raise OpError("one_hot", "cannot infer the number of classes from an empty tensor; pass num_classes")
        num_classes = int(tensor.numpy_host().max()) + 1
    return call(ONE_HOT, tensor, num_classes=int(num_classes))


__all__ = [
    "cat",
    "concat",
    "concatenate",
    "stack",
    "hstack",
    "vstack",
    "dstack",
    "row_stack",
    "column_stack",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "repeat",
    "tile",
    "repeat_interleave",
    "flip",
    "fliplr",
    "flipud",
    "rot90",
    "roll",
    "tril",
    "triu",
    "broadcast_shapes",
    "broadcast_to",
    "broadcast_tensors",
    "meshgrid",
    "one_hot",
]
