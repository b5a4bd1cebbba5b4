"""scatter_reduce, the slice/select/diagonal scatters, cummax/cummin and as_strided.

``scatter_reduce``, ``cummax``/``cummin`` and ``as_strided`` are ops; the three ``*_scatter``
functions are composites of the view ops' functional inverses (:mod:`flow.ops.views`), so they
differentiate through them.
"""

from __future__ import annotations

import math

import numpy as np

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel, set_samples
from flow.ops.indexing import GATHER, SCATTER, _grid, add_at, check_index_tensor, check_range
from flow.ops.movement import as_view
from flow.ops.reduction import return_type
from flow.ops.views import BASIC_INDEX_PUT, DIAGONAL, DIAGONAL_BACKWARD, FULL, index_shape
from flow.registry.ops import ANY, INDEX, NUMERIC, Attr

__all__ = ["scatter_reduce", "slice_scatter", "select_scatter", "diagonal_scatter", "cummax", "cummin", "as_strided"]

_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


# -- scatter_reduce ---------------------------------------------------------------------------------
def _scatter_reduce_meta(x, index, src, dim, reduce, include_self=True):
    op = "scatter_reduce"
    dev = M.check_same_device(op, x, index, src)
    if src.dtype != x.dtype:
        raise OpTypeError(op, f"'src' must have the dtype of 'input' ({x.dtype}), got {src.dtype}")
    if reduce not in _REDUCTIONS:
        raise OpError(op, f"reduce must be one of {', '.join(map(repr, _REDUCTIONS))}, got {reduce!r}")
    nd = len(x.shape)
    if len(index.shape) != nd or len(src.shape) != nd:
        raise OpError(
            op,
            f"'input', 'index' and 'src' must have the same number of dims, got shapes "
            f"{tuple(x.shape)}, {tuple(index.shape)} and {tuple(src.shape)}",
        )
    d = M.wrap_dim(op, dim, max(nd, 1))
    for i in range(nd):
        if index.shape[i] > src.shape[i] or (i != d and index.shape[i] > x.shape[i]):
            raise OpError(
                op,
                f"'index' shape {tuple(index.shape)} exceeds the 'src' shape "
                f"{tuple(src.shape)} or the 'input' shape {tuple(x.shape)} at dim {i}",
            )
    return M.TensorMeta(tuple(x.shape), x.dtype, dev)


def _identity(xp, dtype, reduce: str):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind == "f":
        return -math.inf if reduce == "amax" else math.inf
    if dtype.kind == "b":
        return reduce == "amin"
    info = xp.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


SCATTER_REDUCE = defop(
    "scatter_reduce",
    ["input", "index", "src"],
    [Attr("dim", int), Attr("reduce", str, "sum", _REDUCTIONS), Attr("include_self", bool, True)],
    meta=_scatter_reduce_meta,
    dtypes={"input": NUMERIC, "index": INDEX, "src": NUMERIC},
    grad=lambda ctx, g: _scatter_reduce_grad(ctx, g),  # defined below: it calls the op itself
    save="both",
)


@kernel(SCATTER_REDUCE)
def _scatter_reduce_kernel(xp):
    ufuncs = {"sum": None, "mean": None, "prod": xp.multiply, "amax": xp.maximum, "amin": xp.minimum}

    def run(x, index, src, dim, reduce="sum", include_self=True):
        x0 = x
        if x.ndim == 0:
            x, index, src = x.reshape(1), index.reshape(-1), src.reshape(-1)
        out = x.copy()
        if index.size == 0:
            return out.reshape(x0.shape)
        d = dim % x.ndim
        check_range("scatter_reduce", index, x.shape[d], d)
        idx = _grid(xp, index, d)
        vals = src[tuple(slice(0, n) for n in index.shape)]
        if not include_self:
            out[idx] = _identity(xp, x.dtype, reduce)
        if reduce in ("sum", "mean"):
            add_at(xp, out, idx, vals)
        else:
            ufuncs[reduce].at(out, idx, vals)
        if reduce == "mean":
            count = xp.full(x.shape, 1 if include_self else 0, dtype=xp.int64)
            add_at(xp, count, idx, 1)
            count = xp.maximum(count, 1)  # untouched elements keep their own value
            out = (out / count).astype(x.dtype) if x.dtype.kind == "f" else out // count
        return out.reshape(x0.shape)

    return run


def _scattered_mask(x, index, dim):
    """True where some index writes (the elements include_self=False replaces)."""
    from flow._creation import ones, zeros

    z = zeros(tuple(x.shape), dtype=D.float64, device=x.device)
    return call(SCATTER, z, index, ones(tuple(index.shape), dtype=D.float64, device=x.device), dim=dim) > 0


def _src_grad(g_at_index, src_shape, dtype, device):
    # the gradient of the part of src that index does not cover is zero (scatter's convention)
    if tuple(g_at_index.shape) == tuple(src_shape):
        return g_at_index
    from flow._creation import zeros

    spec = tuple((0, n, 1) for n in g_at_index.shape)
    return call(BASIC_INDEX_PUT, zeros(tuple(src_shape), dtype=dtype, device=device), g_at_index, index=spec)


def _scatter_reduce_grad(ctx, g):
    """As ``torch``'s scatter_reduce backward, reduction by reduction (ties share amax/amin gradients)."""
    from flow._creation import ones_like, zeros_like
    from flow.ops.clamp_where import where

    x, index, src = ctx.inputs
    (result,) = ctx.outputs
    dim, reduce, include_self = ctx.attrs["dim"], ctx.attrs["reduce"], ctx.attrs["include_self"]
    x, src, result = x.detach(), src.detach(), result.detach()
    index = index.detach()
    srcv = src[tuple(slice(0, n) for n in index.shape)] if tuple(src.shape) != tuple(index.shape) else src

    def gather(t):
        return call(GATHER, t, index, dim=dim)

    def scatter_red(base, vals, red):
        return call(SCATTER_REDUCE, base, index, vals, dim=dim, reduce=red, include_self=include_self)

    if reduce == "sum":
        gx, gs = g, gather(g)
    elif reduce == "mean":
        n = scatter_red(ones_like(x) if include_self else zeros_like(x), ones_like(srcv), "sum")
        n = where(n == 0, 1.0, n)
        gx = g / n
        gs = gather(gx)
    elif reduce in ("amax", "amin"):
        value = gather(result)
        self_is = (x == result).to(g.dtype)
        src_is = (srcv == value).to(g.dtype)
        count = call(SCATTER, self_is, index, src_is, dim=dim, reduce="add")
        share = g / count
        gx = self_is * share
        gs = src_is * gather(share)
    else:  # prod: zeros are handled apart so that no 0/0 appears
        masked_self = where(x == 0, 1.0, x)
        gx = g * scatter_red(masked_self, srcv, "prod") / masked_self
        src_zero = srcv == 0
        n_zero = gather(call(SCATTER, zeros_like(x), index, src_zero.to(x.dtype), dim=dim, reduce="add"))
        single = src_zero & (n_zero == 1)
        masked_src_result = scatter_red(x, where(single, 1.0, srcv), "prod")
        gs = where(single, gather(g * masked_src_result), gather(g * result) / where(src_zero, 1.0, srcv))
    if not include_self:
        gx = where(_scattered_mask(x, index, dim), 0.0, gx)
    return gx, None, _src_grad(gs, ctx.input_shape(2), g.dtype, g.device)


def scatter_reduce(input, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """A copy of ``input`` with ``src`` reduced into it at ``index`` along ``dim``, as ``torch.scatter_reduce``.

    ``reduce`` is ``'sum'``, ``'prod'``, ``'mean'``, ``'amax'`` or ``'amin'``; with
    ``include_self=False`` the elements of ``input`` that some index writes do not take part.

    >>> flow.scatter_reduce(flow.zeros(3), 0, flow.tensor([0, 0, 2]), flow.tensor([1.0, 2.0, 5.0]), "amax")
    tensor([2., 0., 5.])
    """
    check_index_tensor("scatter_reduce", index)
    if not M.is_tensor_like(src):
        raise OpTypeError("scatter_reduce", f"'src' must be a Tensor, got {type(src).__name__}")
    if not isinstance(reduce, str):
        raise OpTypeError("scatter_reduce", f"'reduce' must be a str, got {type(reduce).__name__}")
    return call(SCATTER_REDUCE, input, index, src, dim=int(dim), reduce=reduce, include_self=bool(include_self))


# -- slice_scatter, select_scatter, diagonal_scatter ------------------------------------------------
def _embed(op: str, input, src, spec: tuple):
    region = index_shape(op, tuple(input.shape), spec)
    if not M.is_tensor_like(src):
        raise OpTypeError(op, f"'src' must be a Tensor, got {type(src).__name__}")
    if tuple(src.shape) != region:
        raise OpError(op, f"'src' must have the shape of the embedded region {region}, got {tuple(src.shape)}")
    if src.dtype is not input.dtype:
        raise OpTypeError(op, f"'src' must have the dtype of 'input' ({input.dtype}), got {src.dtype}")
    return call(BASIC_INDEX_PUT, input, src, index=spec)


def _dim_of(op: str, input, dim) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise OpTypeError(op, f"'dim' must be an int, got {type(dim).__name__}")
    return M.wrap_dim(op, dim, input.ndim)


def slice_scatter(input, src, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1):
    """A copy of ``input`` with ``src`` written into ``input[..., start:end:step, ...]`` (in ``dim``).

    >>> flow.slice_scatter(flow.zeros(4), flow.ones(2), start=1, end=3)
    tensor([0., 1., 1., 0.])
    """
    d = _dim_of("slice_scatter", input, dim)
    if step is None:
        step = 1
    if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
        raise OpError("slice_scatter", f"'step' must be a positive int, got {step!r}")
    spec = (FULL,) * d + ((start, end, step),)
    return _embed("slice_scatter", input, src, spec)


def select_scatter(input, src, dim: int, index: int):
    """A copy of ``input`` with ``src`` written into ``input.select(dim, index)``.

    >>> flow.select_scatter(flow.zeros(2, 2), flow.ones(2), 0, 0)
    tensor([[1., 1.],
            [0., 0.]])
    """
    d = _dim_of("select_scatter", input, dim)
    if isinstance(index, bool) or not isinstance(index, int):
        raise OpTypeError("select_scatter", f"'index' must be an int, got {type(index).__name__}")
    n = input.shape[d]
    if not -n <= index < n:
        raise OpIndexError("select_scatter", f"index {index} is out of range for dim {d} with size {n}")
    return _embed("select_scatter", input, src, (FULL,) * d + (index % n,))


def diagonal_scatter(input, src, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """A copy of ``input`` with ``src`` written into ``input.diagonal(offset, dim1, dim2)``.

    >>> flow.diagonal_scatter(flow.zeros(2, 2), flow.ones(2))
    tensor([[1., 0.],
            [0., 1.]])
    """
    from flow._creation import ones
    from flow.ops.clamp_where import where

    attrs = dict(offset=int(offset), dim1=int(dim1), dim2=int(dim2))
    region = call(DIAGONAL, input.detach(), **attrs).shape  # validates the dims
    if not M.is_tensor_like(src):
        raise OpTypeError("diagonal_scatter", f"'src' must be a Tensor, got {type(src).__name__}")
    if tuple(src.shape) != tuple(region):
        raise OpError(
            "diagonal_scatter", f"'src' must have the diagonal's shape {tuple(region)}, got {tuple(src.shape)}"
        )
    if src.dtype is not input.dtype:
        raise OpTypeError("diagonal_scatter", f"'src' must have the dtype of 'input' ({input.dtype}), got {src.dtype}")
    shape = tuple(input.shape)
    on_diag = call(DIAGONAL_BACKWARD, ones(tuple(region), device=input.device), shape=shape, **attrs) > 0
    # a select, not an add: inf and NaN off (or on) the diagonal stay exactly as they are
    return where(on_diag, call(DIAGONAL_BACKWARD, src, shape=shape, **attrs), input)


# -- cummax, cummin ---------------------------------------------------------------------------------
def _cum_meta(x, dim):
    M.wrap_dim("cummax", dim, max(len(x.shape), 1))
    return M.TensorMeta(tuple(x.shape), x.dtype, x.device), M.TensorMeta(tuple(x.shape), D.int64, x.device)


def _cum_grad(ctx, gv, gi):
    from flow._creation import zeros

    shape = tuple(ctx.input_shape(0))
    if not shape:
        return (gv,)
    # every output position took its value from one input position: add the gradients back there
    z = zeros(shape, dtype=gv.dtype, device=gv.device)
    return (call(SCATTER, z, ctx.outputs[1].detach(), gv, dim=ctx.attrs["dim"], reduce="add"),)


def _cum_kernel(largest: bool):
    def factory(xp):
        def run(x, dim):
            if x.ndim == 0:
                return x.copy(), xp.zeros((), dtype=xp.int64)
            a = xp.moveaxis(x, dim, -1)
            vals = xp.empty_like(a)
            idx = xp.empty(a.shape, dtype=xp.int64)
            if a.shape[-1]:
                cur, at = a[..., 0].copy(), xp.zeros(a.shape[:-1], dtype=xp.int64)
                isnan = (lambda v: xp.isnan(v)) if a.dtype.kind == "f" else (lambda v: xp.zeros(v.shape, dtype=bool))
                for i in range(a.shape[-1]):
                    v = a[..., i]
                    # as PyTorch: ties move the index forward; a NaN sticks, later NaN move the index on
                    better = (v >= cur) if largest else (v <= cur)
                    take = isnan(v) | (~isnan(cur) & better)
                    cur = xp.where(take, v, cur)
                    at = xp.where(take, i, at)
                    vals[..., i], idx[..., i] = cur, at
            return xp.moveaxis(vals, -1, dim), xp.moveaxis(idx, -1, dim)

        return run

    return factory


CUMMAX = defop(
    "cummax",
    ["input"],
    [Attr("dim", int)],
    ("values", "indices"),
    meta=_cum_meta,
    dtypes=ANY,
    grad=_cum_grad,
    save="outputs",
)
CUMMIN = defop(
    "cummin",
    ["input"],
    [Attr("dim", int)],
    ("values", "indices"),
    meta=_cum_meta,
    dtypes=ANY,
    grad=_cum_grad,
    save="outputs",
)
kernel(CUMMAX)(_cum_kernel(True))
kernel(CUMMIN)(_cum_kernel(False))


CummaxResult = return_type("cummax", "CummaxResult", __name__)
CumminResult = return_type("cummin", "CumminResult", __name__)


def _cum(op, name: str, input, dim):
    if not M.is_tensor_like(input):
        raise OpTypeError(name, f"'input' must be a Tensor, got {type(input).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise OpTypeError(name, f"'dim' must be an int, got {type(dim).__name__}")
    v, i = call(op, input, dim=M.wrap_dim(name, dim, max(input.ndim, 1)))
    return (CummaxResult if name == "cummax" else CumminResult)(v, i)


def cummax(input, dim: int):
    """Running maximum along ``dim`` and where it was found, as ``torch.cummax`` (``.values``, ``.indices``).

    >>> flow.cummax(flow.tensor([1.0, 3.0, 2.0]), 0).values
    tensor([1., 3., 3.])
    """
    return _cum(CUMMAX, "cummax", input, dim)


def cummin(input, dim: int):
    """Running minimum along ``dim`` and where it was found, as ``torch.cummin``."""
    return _cum(CUMMIN, "cummin", input, dim)


# -- as_strided -------------------------------------------------------------------------------------
def _as_strided_meta(x, size, stride, storage_offset=0):
    op = "as_strided"
    if len(size) != len(stride):
        raise OpError(op, f"'size' and 'stride' must have the same length, got {tuple(size)} and {tuple(stride)}")
    if any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise OpError(op, f"'size' and 'stride' must be non-negative, got {tuple(size)} and {tuple(stride)}")
    if storage_offset < 0:
        raise OpError(op, f"'storage_offset' must be non-negative, got {storage_offset}")
    n = 1
    for s in x.shape:
        n *= s
    if all(s > 0 for s in size):
        last = storage_offset + sum((a - 1) * b for a, b in zip(size, stride))
        if last >= n:
            raise OpIndexError(
                op,
                f"size {tuple(size)}, stride {tuple(stride)} and offset {storage_offset} reach element {last} "
                f"of a storage of {n} elements",
            )
    return M.TensorMeta(tuple(size), x.dtype, x.device)


def _flat_positions(size, stride, offset):
    pos = np.full((), offset, dtype=np.int64)
    for a, b in zip(size, stride):
        pos = pos[..., None] + np.arange(a, dtype=np.int64) * b
    return pos.reshape(-1)


def _as_strided_grad(ctx, g):
    from flow._creation import tensor, zeros
    from flow.ops.indexing import index_add

    a = ctx.attrs
    shape = tuple(ctx.input_shape(0))
    n = int(np.prod(shape, dtype=np.int64))
    pos = tensor(_flat_positions(a["size"], a["stride"], a["storage_offset"]), device=g.device)
    # elements that several output positions share collect all their gradients
    flat = index_add(zeros((n,), dtype=g.dtype, device=g.device), 0, pos, g.reshape(-1))
    return (flat.reshape(shape),)


AS_STRIDED = defop(
    "as_strided",
    ["input"],
    [Attr("size", tuple, items=int), Attr("stride", tuple, items=int), Attr("storage_offset", int, 0)],
    meta=_as_strided_meta,
    dtypes=ANY,
    grad=_as_strided_grad,
    save="none",
)


@kernel(AS_STRIDED)
def _as_strided_kernel(xp):
    def run(x, size, stride, storage_offset=0):
        flat = x.reshape(-1)  # a view when x is contiguous (the storage); otherwise the result is a copy's view
        item = x.dtype.itemsize
        start = flat[storage_offset:] if storage_offset < flat.size else flat[:0]
        return xp.lib.stride_tricks.as_strided(start, tuple(size), tuple(s * item for s in stride))

    return run


def as_strided(input, size, stride, storage_offset: int | None = None):
    """A view of ``input``'s storage with the given ``size``, ``stride`` and ``storage_offset`` (in elements),
    as ``torch.as_strided``. Without ``storage_offset`` the view starts where ``input`` does.

    >>> flow.as_strided(flow.arange(6.0), (2, 2), (1, 2))
    tensor([[0., 2.],
            [1., 3.]])
    """
    if not M.is_tensor_like(input):
        raise OpTypeError("as_strided", f"'input' must be a Tensor, got {type(input).__name__}")
    for arg, v in (("size", size), ("stride", stride)):
        if not isinstance(v, (tuple, list)) or any(isinstance(s, bool) or not isinstance(s, int) for s in v):
            raise OpTypeError("as_strided", f"'{arg}' must be a tuple of ints, got {v!r}")
    base = input if input._base is None else input._base
    offset = input.storage_offset() if storage_offset is None else storage_offset
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise OpTypeError("as_strided", f"'storage_offset' must be an int, got {type(offset).__name__}")
    out = call(
        AS_STRIDED, base, size=tuple(int(s) for s in size), stride=tuple(int(s) for s in stride), storage_offset=offset
    )
    return as_view(out, base)


# -- opcheck samples --------------------------------------------------------------------------------
def _scatter_reduce_samples():
    from flow.ops import _samples as S
    from flow.testing import ErrorInput, SampleInput

    x = S.uniform((3, 4), seed=50)
    src = S.uniform((4, 4), seed=51)  # distinct values: amax/amin have no ties
    idx = S.ints((4, 4), 0, 3, seed=52)
    for reduce in _REDUCTIONS:
        for include_self in (True, False):
            yield SampleInput((x, idx, src), {"dim": 0, "reduce": reduce, "include_self": include_self})
    yield SampleInput((x, S.ints((3, 2), 0, 4, seed=53), src), {"dim": 1, "reduce": "mean", "include_self": True})
    yield SampleInput((S.ints((3, 4), 0, 9, seed=54), idx, S.ints((4, 4), 0, 9, seed=55)), {"dim": 0, "reduce": "mean"})
    bad = {"dim": 0, "reduce": "max"}
    yield ErrorInput((x, idx, src), bad, OpError, "must be one of")
    yield ErrorInput((x, idx[:, :2].reshape(-1), src), {"dim": 0, "reduce": "sum"}, OpError, "same number of dims")
    yield ErrorInput(
        (x, S.ints((4, 4), 3, 5, seed=56), src), {"dim": 0, "reduce": "sum"}, OpIndexError, "out of range", True
    )


def _cum_samples():
    from flow.ops import _samples as S
    from flow.testing import SampleInput

    yield SampleInput((S.uniform((3, 5), seed=57),), {"dim": 1})
    yield SampleInput((S.uniform((4, 2, 3), seed=58),), {"dim": 0})
    yield SampleInput((S.uniform((), seed=59),), {"dim": 0})
    yield SampleInput((S.ints((3, 6), 0, 3, seed=60),), {"dim": -1})
    yield SampleInput((S.uniform((2, 0), seed=61),), {"dim": 1})
    yield from S.dim_errors(S.uniform((3, 5), seed=57), tuple_dims=False)


def _as_strided_samples():
    from flow.ops import _samples as S
    from flow.testing import ErrorInput, SampleInput

    x = S.uniform((3, 4), seed=62)
    yield SampleInput((x,), {"size": (2, 2), "stride": (1, 2), "storage_offset": 1})
    yield SampleInput((x,), {"size": (3, 3), "stride": (1, 1), "storage_offset": 0})  # overlapping windows
    yield SampleInput((x,), {"size": (4, 3), "stride": (1, 4), "storage_offset": 0})
    yield SampleInput((x,), {"size": (), "stride": (), "storage_offset": 5})
    yield ErrorInput((x,), {"size": (2, 2), "stride": (1,), "storage_offset": 0}, OpError, "same length")
    yield ErrorInput((x,), {"size": (4, 4), "stride": (4, 1), "storage_offset": 0}, OpIndexError, "reach element 15")
    yield ErrorInput((x,), {"size": (2,), "stride": (-1,), "storage_offset": 0}, OpError, "non-negative")


set_samples(SCATTER_REDUCE, _scatter_reduce_samples)
set_samples(CUMMAX, _cum_samples)
set_samples(CUMMIN, _cum_samples)
set_samples(AS_STRIDED, _as_strided_samples)
