"""Gather/scatter family: gather, scatter(_add), index_select/add/fill/copy, masked_fill/select, nonzero, take.

``t[...]`` and ``t[...] = v`` (and ``index_put``) live in :mod:`flow.ops.subscript`.
Index tensors must hold integers; out-of-range indices raise
:class:`~flow.errors.OpIndexError` naming the dim, its size and the index.
"""

from __future__ import annotations

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import ANY_TENSOR, defop, kernel
from flow.registry.ops import ANY, INDEX, Attr


def check_range(op: str, idx, size: int, dim: int, allow_negative: bool = False) -> None:
    """Raise OpIndexError when an index array holds a value outside ``[0, size)`` (or ``[-size, size)``)."""
    if idx.size == 0 or not hasattr(idx, "min"):  # no values (a shape-only device): nothing to check
        return
    lo, hi = int(idx.min()), int(idx.max())
    low = -size if allow_negative else 0
    if lo < low or hi >= size:
        bad = hi if hi >= size else lo
        raise OpIndexError(op, f"index {bad} is out of range for dim {dim} with size {size}")


def add_at(xp, out, idx, vals) -> None:
    """``out[idx] += vals`` accumulating repeated indices (NumPy's ``add.at``)."""
    at = getattr(getattr(xp, "add", None), "at", None)
    if at is not None:
        at(out, idx, vals)
    else:  # CuPy before ufunc.at
        import importlib

        importlib.import_module(xp.__name__ + "x").scatter_add(out, idx, vals)


def check_index_tensor(op: str, index, arg: str = "index") -> None:
    if not M.is_tensor_like(index):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(index).__name__}")
    if index.dtype.category != 1:
        raise OpTypeError(op, f"'{arg}' must be an integer tensor, got {index.dtype}")


def _grid(xp, index, d):
    """Index arrays addressing ``out[..., index, ...]`` along dim ``d`` elementwise (scatter's pattern)."""
    nd = index.ndim
    return tuple(
        index if i == d else xp.arange(index.shape[i]).reshape([-1 if j == i else 1 for j in range(nd)])
        for i in range(nd)
    )


# -- gather / scatter ----------------------------------------------------------------------------
def _gather_meta(x, index, dim):
    dev = M.check_same_device("gather", x, index)
    nd = len(x.shape)
    if len(index.shape) != nd:
        raise OpError(
            "gather", f"'index' must have the same number of dims as 'input' ({nd}), got shape {tuple(index.shape)}"
        )
    d = M.wrap_dim("gather", dim, nd)
    for i, (a, b) in enumerate(zip(index.shape, x.shape)):
        if i != d and a > b:
            raise OpError(
                "gather",
                f"'index' size {a} exceeds the 'input' size {b} at dim {i} "
                f"(index shape {tuple(index.shape)}, input shape {tuple(x.shape)})",
            )
    return M.TensorMeta(tuple(index.shape), x.dtype, dev)


def _gather_grad(ctx, g):
    from flow._creation import zeros

    _, index = ctx.inputs
    z = zeros(ctx.input_shape(0), dtype=g.dtype, device=g.device)
    return call(SCATTER, z, index, g, dim=ctx.attrs["dim"], reduce="add"), None


GATHER = defop(
    "gather",
    ["input", "index"],
    [Attr("dim", int)],
    meta=_gather_meta,
    grad=_gather_grad,
    dtypes={"input": ANY, "index": INDEX},
    save="inputs",
)


@kernel(GATHER)
def _gather_kernel(xp):
    def run(x, index, dim):
        if x.ndim == 0:
            check_range("gather", index, 1, 0)
            return x.copy()
        d = dim % x.ndim
        check_range("gather", index, x.shape[d], d)
        sub = x[tuple(slice(None) if i == d else slice(0, index.shape[i]) for i in range(x.ndim))]
        return xp.take_along_axis(sub, index, axis=d)

    return run


def _scatter_meta(x, index, src, dim, reduce=None):
    dev = M.check_same_device("scatter", x, index, src)
    if src.dtype != x.dtype:
        raise OpTypeError("scatter", f"'src' must have the dtype of 'input' ({x.dtype}), got {src.dtype}")
    if reduce not in (None, "add", "multiply"):
        raise OpError("scatter", f"reduce must be None, 'add' or 'multiply', got {reduce!r}")
    nd = len(x.shape)
    if len(index.shape) != nd or len(src.shape) != nd:
        raise OpError(
            "scatter",
            f"'input', 'index' and 'src' must have the same number of dims, got shapes "
            f"{tuple(x.shape)}, {tuple(index.shape)} and {tuple(src.shape)}",
        )
    d = M.wrap_dim("scatter", dim, nd)
    for i in range(nd):
        if index.shape[i] > src.shape[i] or (i != d and index.shape[i] > x.shape[i]):
            raise OpError(
                "scatter",
                f"'index' shape {tuple(index.shape)} exceeds the 'src' shape "
                f"{tuple(src.shape)} or the 'input' shape {tuple(x.shape)} at dim {i}",
            )
    return M.TensorMeta(tuple(x.shape), x.dtype, dev)


def _scatter_grad(ctx, g):
    from flow._creation import zeros

    _, index, src = ctx.inputs
    dim, reduce = ctx.attrs["dim"], ctx.attrs.get("reduce")
    if reduce == "multiply":
        raise OpError("scatter", "the gradient of scatter with reduce='multiply' is not implemented")
    gx = gs = None
    if ctx.next[0][0] is not None:
        gx = (
            g
            if reduce == "add"
            else call(
                SCATTER, g, index, zeros(tuple(index.shape), dtype=g.dtype, device=g.device), dim=dim, reduce=None
            )
        )
    if ctx.next[2][0] is not None:
        gs = call(GATHER, g, index, dim=dim)
        sshape = tuple(ctx.input_shape(2))
        if tuple(gs.shape) != sshape:
            from flow.ops.views import BASIC_INDEX_PUT

            spec = tuple((0, n, 1) for n in gs.shape)
            gs = call(BASIC_INDEX_PUT, zeros(sshape, dtype=g.dtype, device=g.device), gs, index=spec)
    return gx, None, gs


SCATTER = defop(
    "scatter",
    ["input", "index", "src"],
    [Attr("dim", int), Attr("reduce", (str, type(None)), None, (None, "add", "multiply"))],
    meta=_scatter_meta,
    grad=_scatter_grad,
    dtypes={"input": ANY, "index": INDEX, "src": ANY},
    save="inputs",
)


@kernel(SCATTER)
def _scatter_kernel(xp):
    def run(x, index, src, dim, reduce=None):
        out = x.copy()
        if index.size == 0:
            return out
        if x.ndim == 0:
            check_range("scatter", index, 1, 0)
            out[...] = src if reduce is None else (out + src if reduce == "add" else out * src)
            return out
        d = dim % x.ndim
        check_range("scatter", index, x.shape[d], d)
        idx = _grid(xp, index, d)
        vals = src[tuple(slice(0, n) for n in index.shape)]
        if reduce is None:
            out[idx] = vals
        elif reduce == "add":
            add_at(xp, out, idx, vals)
        else:
            xp.multiply.at(out, idx, vals)
        return out

    return run


def _src_tensor(op, input, index, src, value):
    from flow._creation import full
    from flow._tensor import Tensor

    if src is None and value is None:
        raise OpTypeError(op, "expected 'src' (a Tensor) or 'value' (a number)")
    if isinstance(src, Tensor):
        return src if src.dtype is input.dtype else src.to(input.dtype)
    v = value if src is None else src
    if isinstance(v, Tensor):
        v = v.item()
    if not isinstance(v, (int, float, bool)):
        raise OpTypeError(op, f"'src' must be a Tensor or a number, got {type(v).__name__}")
    return full(tuple(index.shape), v, dtype=input.dtype, device=input.device)


def gather(input, dim: int, index, *, sparse_grad: bool = False):
    """``out[i][j] = input[index[i][j]][j]`` (for dim 0), as ``torch.gather``."""
    check_index_tensor("gather", index)
    return call(GATHER, input, index, dim=int(dim))


def scatter(input, dim: int, index, src=None, *, value=None, reduce: str | None = None):
    """A copy of ``input`` with ``src`` (a tensor, or a number as ``value``) written at ``index`` along ``dim``.

    ``reduce='add'`` or ``'multiply'`` combines instead of overwriting.
    """
    check_index_tensor("scatter", index)
    if reduce not in (None, "add", "multiply"):
        raise OpError("scatter", f"reduce must be None, 'add' or 'multiply', got {reduce!r}")
    src = _src_tensor("scatter", input, index, src, value)
    return call(SCATTER, input, index, src, dim=int(dim), reduce=reduce)


def scatter_add(input, dim: int, index, src):
    """A copy of ``input`` with ``src`` added at ``index`` along ``dim`` (repeated indices accumulate)."""
    check_index_tensor("scatter_add", index)
    src = _src_tensor("scatter_add", input, index, src, None)
    return call(SCATTER, input, index, src, dim=int(dim), reduce="add")


# -- index_select / index_add -----------------------------------------------------------------------
def _index_vec_meta(op, x, index, dim):
    if len(index.shape) > 1:
        raise OpError(op, f"'index' must be 0-d or 1-d, got shape {tuple(index.shape)}")
    if len(x.shape) == 0:
        raise OpError(op, "'input' must have at least 1 dim")
    d = M.wrap_dim(op, dim, len(x.shape))
    n = 1 if not index.shape else index.shape[0]
    s = tuple(x.shape)
    return d, s[:d] + (n,) + s[d + 1 :]


def _index_select_meta(x, index, dim):
    dev = M.check_same_device("index_select", x, index)
    return M.TensorMeta(_index_vec_meta("index_select", x, index, dim)[1], x.dtype, dev)


def _index_select_grad(ctx, g):
    from flow._creation import zeros

    index = ctx.inputs[1]
    z = zeros(ctx.input_shape(0), dtype=g.dtype, device=g.device)
    return call(INDEX_ADD, z, index, g, dim=ctx.attrs["dim"], alpha=1), None


INDEX_SELECT = defop(
    "index_select",
    ["input", "index"],
    [Attr("dim", int)],
    meta=_index_select_meta,
    grad=_index_select_grad,
    dtypes={"input": ANY, "index": INDEX},
    save="inputs",
)


@kernel(INDEX_SELECT)
def _index_select_kernel(xp):
    def run(x, index, dim):
        d = dim % x.ndim
        check_range("index_select", index, x.shape[d], d)
        return xp.take(x, index.reshape(-1), axis=d)

    return run


def _index_add_meta(x, index, source, dim, alpha=1):
    dev = M.check_same_device("index_add", x, index, source)
    if source.dtype != x.dtype:
        raise OpTypeError("index_add", f"'source' must have the dtype of 'input' ({x.dtype}), got {source.dtype}")
    d, want = _index_vec_meta("index_add", x, index, dim)
    if tuple(source.shape) != want:
        raise OpError(
            "index_add",
            f"'source' must have shape {want} (the input's with dim {d} of the index's "
            f"length), got {tuple(source.shape)}",
        )
    return M.TensorMeta(tuple(x.shape), x.dtype, dev)


def _index_add_grad(ctx, g):
    _, index, _ = ctx.inputs
    alpha = ctx.attrs.get("alpha", 1)
    gs = None
    if ctx.next[2][0] is not None:
        gs = call(INDEX_SELECT, g, index, dim=ctx.attrs["dim"])
        if alpha != 1:
            gs = gs * alpha
    return (g if ctx.next[0][0] is not None else None), None, gs


INDEX_ADD = defop(
    "index_add",
    ["input", "index", "source"],
    [Attr("dim", int), Attr("alpha", (float, int), 1)],
    meta=_index_add_meta,
    grad=_index_add_grad,
    dtypes={"input": ANY, "index": INDEX, "source": ANY},
    save="inputs",
)


@kernel(INDEX_ADD)
def _index_add_kernel(xp):
    def run(x, index, source, dim, alpha=1):
        out = x.copy()
        d = dim % x.ndim
        check_range("index_add", index, x.shape[d], d)
        vals = source if alpha == 1 else (source * alpha).astype(x.dtype)
        add_at(xp, out, (slice(None),) * d + (index.reshape(-1),), vals)
        return out

    return run


def index_select(input, dim: int, index):
    """The entries of ``input`` at ``index`` (1-d) along ``dim``; a copy."""
    check_index_tensor("index_select", index)
    return call(INDEX_SELECT, input, index, dim=int(dim))


def index_add(input, dim: int, index, source, *, alpha=1):
    """A copy of ``input`` with ``alpha * source`` added at ``index`` along ``dim`` (duplicates accumulate)."""
    check_index_tensor("index_add", index)
    if source.dtype is not input.dtype:
        source = source.to(input.dtype)
    return call(INDEX_ADD, input, index, source, dim=int(dim), alpha=alpha)


def _value_tensor(op, input, value, arg="value"):
    from flow._creation import full
    from flow._tensor import Tensor

    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise OpError(op, f"'{arg}' must be a number or a 0-d tensor, got a tensor of shape {tuple(value.shape)}")
        if value.device is not input.device:
            value = value.to(input.device)
        return value if value.dtype is input.dtype else value.to(input.dtype)
    if not isinstance(value, (int, float, bool)) and not hasattr(value, "__float__"):
        raise OpTypeError(op, f"'{arg}' must be a number or a 0-d tensor, got {type(value).__name__}")
    return full((), value, dtype=input.dtype, device=input.device)


def index_fill(input, dim: int, index, value):
    """A copy of ``input`` with the entries at ``index`` along ``dim`` set to ``value``."""
    from flow.ops.subscript import index_put

    check_index_tensor("index_fill", index)
    d = M.wrap_dim("index_fill", dim, input.ndim)
    return index_put(input, (None,) * d + (index.reshape(-1),), _value_tensor("index_fill", input, value))


def index_copy(input, dim: int, index, source):
    """A copy of ``input`` with ``source``'s slices written at ``index`` along ``dim``."""
    from flow.ops.subscript import index_put

    check_index_tensor("index_copy", index)
    d, want = _index_vec_meta("index_copy", input, index, dim)
    if tuple(source.shape) != want:
        raise OpError("index_copy", f"'source' must have shape {want}, got {tuple(source.shape)}")
    return index_put(input, (None,) * d + (index.reshape(-1),), source)


# -- masks -------------------------------------------------------------------------------------------
def _check_mask(op, mask):
    from flow._tensor import Tensor

    if not isinstance(mask, Tensor):
        raise OpTypeError(op, f"'mask' must be a bool Tensor, got {type(mask).__name__}")
    if mask.dtype is not D.bool:
        raise OpTypeError(op, f"'mask' must be a bool tensor, got {mask.dtype}")


def masked_fill(input, mask, value):
    """``input`` with ``value`` (a number or 0-d tensor) where ``mask`` (broadcast) is True."""
    from flow.ops.clamp_where import where

    _check_mask("masked_fill", mask)
    M.broadcast_shapes("masked_fill", tuple(input.shape), tuple(mask.shape))
    return where(mask, _value_tensor("masked_fill", input, value), input)


def masked_select(input, mask):
    """The 1-d tensor of ``input``'s elements where ``mask`` (broadcast) is True."""
    from flow.ops.subscript import getitem

    _check_mask("masked_select", mask)
    shape = M.broadcast_shapes("masked_select", tuple(input.shape), tuple(mask.shape))
    x = input if tuple(input.shape) == shape else input.expand(*shape)
    m = mask if tuple(mask.shape) == shape else mask.expand(*shape)
    if not shape:
        x, m = x.reshape(1), m.reshape(1)
    return getitem(x, m)


# -- nonzero ---------------------------------------------------------------------------------------
def _nonzero_meta(x):
    data = getattr(x, "_data", None)
    if data is not None and hasattr(data, "nonzero"):
        return M.TensorMeta((int((data != 0).sum()), len(x.shape)), D.int64, x.device)
    from flow.registry import get_device_type

    if get_device_type(x.device.type).extra.get("shape_only"):
        # a shape-only device has no values: it reports the largest possible result
        return M.TensorMeta((M.TensorMeta(tuple(x.shape), x.dtype, x.device).numel(), len(x.shape)), D.int64, x.device)
    raise OpError("nonzero", "the output shape depends on the input's values; it is not known without data")


NONZERO = defop(
    "nonzero",
    ["input"],
    meta=_nonzero_meta,
    dtypes=ANY,
    save="none",
    eager_meta=False,
    no_error_samples=ANY_TENSOR,
    dynamic_shape=True,  # the meta rule reads the data when it has it; without data it cannot answer
)


@kernel(NONZERO)
def _nonzero_kernel(xp):
    def run(x):
        if x.ndim == 0:
            return xp.zeros((int(x != 0), 0), dtype=xp.int64)
        return xp.stack(xp.nonzero(x), axis=1).astype(xp.int64, copy=False)

    return run


def nonzero(input, *, as_tuple: bool = False):
    """Indices of the non-zero elements: an ``(n, ndim)`` int64 tensor, or one 1-d tensor per dim."""
    from flow._tensor import Tensor

    if not isinstance(input, Tensor):
        raise OpTypeError("nonzero", f"'input' must be a Tensor, got {type(input).__name__}")
    if as_tuple:
        if input.ndim == 0:
            input = input.reshape(1)
        out = call(NONZERO, input)
        return tuple(out[:, i] for i in range(input.ndim))
    return call(NONZERO, input)


def argwhere(input):
    return nonzero(input)


# -- take ----------------------------------------------------------------------------------------------
def take(input, index):
    """Elements of the flattened ``input`` at ``index`` (negative indices count from the end)."""
    from flow.ops.subscript import getitem

    check_index_tensor("take", index)
    return getitem(input.reshape(-1), index)


def take_along_dim(input, indices, dim: int | None = None):
    """``gather`` with ``input`` and ``indices`` broadcast against each other outside ``dim``."""
    check_index_tensor("take_along_dim", indices)
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1))
    if input.ndim != indices.ndim:
        raise OpError(
            "take_along_dim",
            f"'input' and 'indices' must have the same number of dims, got shapes "
            f"{tuple(input.shape)} and {tuple(indices.shape)}",
        )
    d = M.wrap_dim("take_along_dim", dim, input.ndim)
    a, b = list(input.shape), list(indices.shape)
    a[d] = b[d] = 1
    shape = list(M.broadcast_shapes("take_along_dim", tuple(a), tuple(b)))
    xs, js = list(shape), list(shape)
    xs[d], js[d] = input.shape[d], indices.shape[d]
    x = input if list(input.shape) == xs else input.expand(*xs)
    j = indices if list(indices.shape) == js else indices.expand(*js)
    return gather(x, d, j)


# -- opcheck samples ------------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _perm_index(shape, dim, n, seed):
    """An index of ``shape`` whose entries along ``dim`` are distinct (so scatter gradients are well defined)."""
    import numpy as np

    r = np.random.default_rng(seed)
    a = np.empty(shape, dtype=np.int64)
    moved = np.moveaxis(a, dim, -1)
    for pos in np.ndindex(moved.shape[:-1]):
        moved[pos] = r.permutation(n)[: moved.shape[-1]]
    return S.t(a)


def _gather_samples():
    yield SampleInput((S.uniform((3, 4), seed=1), S.ints((2, 4), 0, 3, seed=2)), {"dim": 0})
    yield SampleInput((S.uniform((3, 4), seed=3), S.ints((3, 6), 0, 4, seed=4)), {"dim": 1})
    yield SampleInput((S.uniform((2, 3, 4), seed=5), S.ints((2, 2, 3), 0, 3, seed=6)), {"dim": -2})
    yield SampleInput((S.uniform((3, 4), seed=1), S.ints((2, 4), 0, 3, seed=2, dtype=D.int32)), {"dim": 0})
    x = S.uniform((3, 4), seed=1)
    yield ErrorInput((x, S.ints((2,), 0, 3)), {"dim": 0}, OpError, "same number of dims")
    yield ErrorInput((x, S.ints((2, 5), 0, 3)), {"dim": 0}, OpError, "exceeds the 'input' size 4 at dim 1")
    yield ErrorInput((x, S.ints((2, 4), 0, 3)), {"dim": 2}, OpIndexError, "out of range")
    yield ErrorInput((x, S.ints((2, 4), 3, 5)), {"dim": 0}, OpIndexError, "index 4 is out of range", values=True)
    yield ErrorInput((x, S.ints((2, 4), -2, 0)), {"dim": 0}, OpIndexError, "is out of range", values=True)


def _scatter_samples():
    yield SampleInput(
        (S.uniform((4, 3), seed=1), _perm_index((2, 3), 0, 4, 2), S.uniform((3, 3), seed=3)), {"dim": 0, "reduce": None}
    )
    yield SampleInput(
        (S.uniform((3, 5), seed=4), S.ints((3, 4), 0, 5, seed=5), S.uniform((3, 4), seed=6)),
        {"dim": 1, "reduce": "add"},
    )
    yield SampleInput(
        (S.uniform((3, 5), seed=7), S.ints((2, 4), 0, 5, seed=8), S.uniform((2, 4), seed=9)),
        {"dim": 1, "reduce": "multiply"},
        grad=False,
    )
    x, i, src = S.uniform((3, 5), seed=4), S.ints((3, 4), 0, 5, seed=5), S.uniform((3, 4), seed=6)
    yield ErrorInput((x, i, S.ints((3, 4))), {"dim": 1, "reduce": None}, OpTypeError, "'src' must have the dtype")
    yield ErrorInput((x, i[0], src), {"dim": 1, "reduce": None}, OpError, "same number of dims")
    yield ErrorInput((x, i, src[:, :2]), {"dim": 1, "reduce": None}, OpError, "exceeds the 'src' shape")
    yield ErrorInput((x, i, src), {"dim": -3, "reduce": None}, OpIndexError, "out of range")
    yield ErrorInput((x, i + 5, src), {"dim": 1, "reduce": "add"}, OpIndexError, "out of range", values=True)


def _index_select_samples():
    yield SampleInput((S.uniform((4, 3), seed=1), S.ints((5,), 0, 4, seed=2)), {"dim": 0})
    yield SampleInput((S.uniform((2, 3, 4), seed=3), S.ints((2,), 0, 4, seed=4)), {"dim": -1})
    yield SampleInput((S.uniform((2, 3, 4), seed=3), S.ints((), 0, 4, seed=4, dtype=D.int32)), {"dim": 2})
    x = S.uniform((4, 3), seed=1)
    yield ErrorInput((x, S.ints((2, 2), 0, 3)), {"dim": 0}, OpError, "'index' must be 0-d or 1-d")
    yield ErrorInput((S.uniform(()), S.ints((2,), 0, 1)), {"dim": 0}, OpError, "at least 1 dim")
    yield ErrorInput((x, S.ints((2,), 0, 3)), {"dim": 2}, OpIndexError, "out of range")
    yield ErrorInput((x, S.ints((2,), 4, 6)), {"dim": 0}, OpIndexError, "out of range", values=True)


def _index_add_samples():
    yield SampleInput(
        (S.uniform((4, 3), seed=1), S.ints((5,), 0, 4, seed=2), S.uniform((5, 3), seed=3)), {"dim": 0, "alpha": 1}
    )
    yield SampleInput(
        (S.uniform((2, 4), seed=4), S.ints((3,), 0, 4, seed=5), S.uniform((2, 3), seed=6)), {"dim": 1, "alpha": 2.5}
    )
    x, i, src = S.uniform((4, 3), seed=1), S.ints((5,), 0, 4, seed=2), S.uniform((5, 3), seed=3)
    yield ErrorInput((x, i, src[:4]), {"dim": 0, "alpha": 1}, OpError, "'source' must have shape (5, 3)")
    yield ErrorInput((x, i, S.ints((5, 3))), {"dim": 0, "alpha": 1}, OpTypeError, "'source' must have the dtype")
    yield ErrorInput((x, i, src), {"dim": 2, "alpha": 1}, OpIndexError, "out of range")
    yield ErrorInput((x, i + 4, src), {"dim": 0, "alpha": 1}, OpIndexError, "out of range", values=True)


set_samples(GATHER, _gather_samples)
set_samples(SCATTER, _scatter_samples)
set_samples(INDEX_SELECT, _index_select_samples)
set_samples(INDEX_ADD, _index_add_samples)
set_samples(
    NONZERO,
    lambda: [
        SampleInput((S.bools((3, 4), seed=1),)),
        SampleInput((S.ints((5,), 0, 2, seed=2),)),
        SampleInput((S.away_from((2, 3), (0.0,), seed=3) * S.bools((2, 3), seed=4),)),
    ],
)

__all__ = [
    "gather",
    "scatter",
    "scatter_add",
    "index_select",
    "index_add",
    "index_fill",
    "index_copy",
    "masked_fill",
    "masked_select",
    "nonzero",
    "argwhere",
    "take",
    "take_along_dim",
]
