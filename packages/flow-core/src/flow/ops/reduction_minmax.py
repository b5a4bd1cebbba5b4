"""Extremes: amax amin max min argmax argmin aminmax, and the select_along_dim op pair.

``select_along_dim`` gathers along one dim; ``select_along_dim_backward`` (its
gradient, a scatter into zeros) is what the gradients of every value-selecting
op (max/min with dim, sort, topk, kthvalue, median, mode) are written with,
so those gradients differentiate again.
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops.reduction import _DIM_ATTRS, _dims_attr, _reduce_meta, axes, check_tensor, ctx_dims, keep, return_type
from flow.registry.ops import ANY, FLOAT, INDEX64, NUMERIC, Attr


# -- select_along_dim: gather along one dim, and its gradient (a scatter) -------------------
def _select_meta(x, index, dim=0):
    if len(index.shape) != len(x.shape):
        raise OpError(
            "select_along_dim",
            f"'index' must have as many dims as 'input' ({len(x.shape)}), got shape {tuple(index.shape)}",
        )
    d = M.wrap_dim("select_along_dim", dim, len(x.shape))
    for i, (a, b) in enumerate(zip(x.shape, index.shape)):
        if i != d and a != b:
            raise OpError(
                "select_along_dim",
                f"'index' shape {tuple(index.shape)} must match 'input' shape {tuple(x.shape)} except at dim {d}",
            )
    return M.TensorMeta(tuple(index.shape), x.dtype, x.device)


def _select_bw_meta(grad, index, dim=0, size=0):
    if size < 0:
        raise OpError("select_along_dim_backward", f"'size' must be non-negative, got {size}")
    if tuple(index.shape) != tuple(grad.shape):
        raise OpError(
            "select_along_dim_backward",
            f"'index' shape {tuple(index.shape)} must equal 'grad' shape {tuple(grad.shape)}",
        )
    shape = list(grad.shape)
    if shape:
        shape[M.wrap_dim("select_along_dim_backward", dim, len(shape))] = size
    return M.TensorMeta(tuple(shape), grad.dtype, grad.device)


SELECT_ALONG_DIM = defop(
    "select_along_dim",
    ["input", "index"],
    [Attr("dim", int)],
    meta=_select_meta,
    save="inputs",
    dtypes={"input": ANY, "index": INDEX64},
    grad=lambda ctx, g: (
        select_along_dim_backward(g, ctx.inputs[1], ctx.attrs["dim"], _dim_size(ctx.input_shape(0), ctx.attrs["dim"])),
        None,
    ),
    doc="out[..., j, ...] = input[..., index[..., j, ...], ...] along ``dim`` (distinct indices per slice).",
)
SELECT_ALONG_DIM_BACKWARD = defop(
    "select_along_dim_backward",
    ["grad", "index"],
    [Attr("dim", int), Attr("size", int)],
    meta=_select_bw_meta,
    save="inputs",
    dtypes={"grad": FLOAT, "index": INDEX64},
    grad=lambda ctx, g: (select_along_dim(g, ctx.inputs[1], ctx.attrs["dim"]), None),
    doc="Zeros of ``size`` along ``dim`` with ``grad`` put at ``index`` (the gradient of select_along_dim).",
)


def _dim_size(shape, dim):
    return shape[dim % len(shape)] if shape else 1


@kernel(SELECT_ALONG_DIM)
def _select_kernel(xp):
    from flow.ops.indexing import check_range

    def run(x, index, dim=0):
        if x.ndim == 0:
            check_range("select_along_dim", index, 1, 0)
            return x.copy()
        check_range("select_along_dim", index, x.shape[dim], dim % x.ndim)
        return xp.take_along_axis(x, index, axis=dim)

    return run


@kernel(SELECT_ALONG_DIM_BACKWARD)
def _select_bw_kernel(xp):
    from flow.ops.indexing import check_range

    def run(g, index, dim=0, size=0):
        if g.ndim == 0:
            return g.copy()
        d = dim % g.ndim
        check_range("select_along_dim_backward", index, size, d)
        gm = xp.moveaxis(g, d, -1)
        lead = gm.shape[:-1]
        rows = 1
        for s in lead:
            rows *= s
        out = xp.zeros((rows, size), dtype=g.dtype)
        k = gm.shape[-1]
        if rows and k:
            out[xp.arange(rows)[:, None], xp.moveaxis(index, d, -1).reshape(rows, k)] = gm.reshape(rows, k)
        return xp.ascontiguousarray(xp.moveaxis(out.reshape(lead + (size,)), -1, d))

    return run


def select_along_dim(input, index, dim: int):
    """Gather along ``dim`` (``torch.take_along_dim`` for distinct indices); differentiable."""
    return call(SELECT_ALONG_DIM, input, index, dim=int(dim))


def select_along_dim_backward(grad, index, dim: int, size: int):
    return call(SELECT_ALONG_DIM_BACKWARD, grad, index, dim=int(dim), size=int(size))


def scatter_selected(ctx, g, index, op: str):
    """The gradient of a value-selecting op: ``g`` put back at ``index`` along the op's dim."""
    shape = tuple(ctx.input_shape(0))
    if not shape:
        return g.reshape(())
    d = M.wrap_dim(op, ctx.attrs.get("dim", -1), len(shape))
    index = index.detach()
    if len(g.shape) < len(shape):  # the op dropped the dim (keepdim=False)
        g, index = g.unsqueeze(d), index.unsqueeze(d)
    return select_along_dim_backward(g, index, d, shape[d])


# -- amax, amin, max, min ----------------------------------------------------------------
def _amax_grad(ctx, g):
    from flow.ops.clamp_where import where

    (x,), (out,) = ctx.inputs, ctx.outputs
    shape, dims, kd = ctx_dims(ctx, ctx.op.name)
    mask = x == keep(out.detach(), shape, dims, kd)
    count = mask.sum(dim=dims, keepdim=True)
    return (where(mask, keep(g, shape, dims, kd) / count, 0.0),)  # ties share the gradient evenly


AMAX = defop(
    "amax", ["input"], _DIM_ATTRS, meta=_reduce_meta("amax", nonempty=True), dtypes=ANY, grad=_amax_grad, save="both"
)
AMIN = defop(
    "amin", ["input"], _DIM_ATTRS, meta=_reduce_meta("amin", nonempty=True), dtypes=ANY, grad=_amax_grad, save="both"
)


def _amax_kernel(fname):
    def factory(xp):
        f = getattr(xp, fname)

        def run(x, dim=None, keepdim=False):
            return xp.asarray(f(x, axis=axes(x, dim), keepdims=keepdim))

        return run

    return factory


kernel(AMAX)(_amax_kernel("max"))
kernel(AMIN)(_amax_kernel("min"))


def _argmax_meta(op):
    def rule(x, dim=None, keepdim=False):
        shape = tuple(x.shape)
        if dim is None:
            _reduce_meta(op, nonempty=True)(x, None)
            return M.TensorMeta((1,) * len(shape) if keepdim else (), D.int64, x.device)
        m = _reduce_meta(op, nonempty=True)(x, (dim,), keepdim)
        return M.TensorMeta(m.shape, D.int64, x.device)

    return rule


def _index_dim_meta(op):
    """Meta of ops giving (values, int64 indices) reduced over one ``dim``."""

    def rule(x, dim=-1, keepdim=False, **attrs):
        m = _reduce_meta(op, nonempty=True)(x, (dim,), keepdim)
        return m, M.TensorMeta(m.shape, D.int64, x.device)

    return rule


def _max_dim_grad(ctx, gv, gi):
    return (scatter_selected(ctx, gv, ctx.outputs[1], ctx.op.name),)


ARGMAX = defop(
    "argmax",
    ["input"],
    [Attr("dim", (int, type(None)), None), Attr("keepdim", bool, False)],
    meta=_argmax_meta("argmax"),
    dtypes=NUMERIC,
    save="none",
)
ARGMIN = defop(
    "argmin",
    ["input"],
    [Attr("dim", (int, type(None)), None), Attr("keepdim", bool, False)],
    meta=_argmax_meta("argmin"),
    dtypes=NUMERIC,
    save="none",
)
MAX_DIM = defop(
    "max_dim",
    ["input"],
    [Attr("dim", int), Attr("keepdim", bool, False)],
    ("values", "indices"),
    meta=_index_dim_meta("max"),
    dtypes=ANY,
    grad=_max_dim_grad,
    save="outputs",
)
MIN_DIM = defop(
    "min_dim",
    ["input"],
    [Attr("dim", int), Attr("keepdim", bool, False)],
    ("values", "indices"),
    meta=_index_dim_meta("min"),
    dtypes=ANY,
    grad=_max_dim_grad,
    save="outputs",
)


def _argmax_kernel(fname):
    def factory(xp):
        f = getattr(xp, fname)  # first occurrence on ties; NaN counts as the extreme (as PyTorch)

        def run(x, dim=None, keepdim=False):
            if dim is None or x.ndim == 0:
                i = f(x.reshape(-1))
                return xp.asarray(i, dtype=xp.int64).reshape((1,) * x.ndim if keepdim else ())
            i = f(x, axis=dim)
            if keepdim:
                i = xp.expand_dims(i, dim)
            return xp.asarray(i, dtype=xp.int64)

        return run

    return factory


def _max_dim_kernel(fname):
    def factory(xp):
        f = getattr(xp, fname)

        def run(x, dim=-1, keepdim=False):
            if x.ndim == 0:
                return x.copy(), xp.zeros((), dtype=xp.int64)
            i = xp.expand_dims(f(x, axis=dim), dim).astype(xp.int64)
            v = xp.take_along_axis(x, i, axis=dim)
            if not keepdim:
                v, i = xp.squeeze(v, dim), xp.squeeze(i, dim)
            return v, i

        return run

    return factory


kernel(ARGMAX)(_argmax_kernel("argmax"))
kernel(ARGMIN)(_argmax_kernel("argmin"))
kernel(MAX_DIM)(_max_dim_kernel("argmax"))
kernel(MIN_DIM)(_max_dim_kernel("argmin"))

MaxResult = return_type("max", "MaxResult", __name__)
MinResult = return_type("min", "MinResult", __name__)
AminmaxResult = return_type("aminmax", "AminmaxResult", __name__, ("min", "max"))


def amax(input, dim=(), keepdim: bool = False):
    """Maximum over ``dim`` (all dims by default); ties share the gradient evenly."""
    check_tensor("amax", input)
    return call(AMAX, input, dim=_dims_attr(dim, "amax"), keepdim=bool(keepdim))


def amin(input, dim=(), keepdim: bool = False):
    """Minimum over ``dim`` (all dims by default); ties share the gradient evenly."""
    check_tensor("amin", input)
    return call(AMIN, input, dim=_dims_attr(dim, "amin"), keepdim=bool(keepdim))


def _minmax(name, full, dim_op, binary, input, dim, keepdim, other):
    from flow._tensor import Tensor

    check_tensor(name, input)
    if isinstance(dim, Tensor):  # torch.max(input, other): the elementwise form
        other, dim = dim, None
    if other is not None:
        return binary(input, other)
    if dim is None:
        if keepdim:
            raise OpError(name, "'keepdim' needs 'dim'")
        if input.numel() == 0:
            raise OpError(
                name, "the input is empty, so there is no value to return; give 'dim' to reduce over a non-empty dim"
            )
        return call(full, input, dim=None, keepdim=False)
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise OpTypeError(name, f"'dim' must be an int, got {type(dim).__name__} {dim!r}")
    v, i = call(dim_op, input, dim=int(dim), keepdim=bool(keepdim))
    return (MaxResult if name == "max" else MinResult)(v, i)


def max(input, dim=None, keepdim: bool = False, *, other=None):  # noqa: A001
    """The largest element; with ``dim``, ``(values, indices)`` of the maxima along it.

    ``flow.max(a, b)`` with a tensor ``b`` is :func:`flow.maximum`.
    """
    from flow.ops.arith import maximum

    return _minmax("max", AMAX, MAX_DIM, maximum, input, dim, keepdim, other)


def min(input, dim=None, keepdim: bool = False, *, other=None):  # noqa: A001
    """The smallest element; with ``dim``, ``(values, indices)`` of the minima along it."""
    from flow.ops.arith import minimum

    return _minmax("min", AMIN, MIN_DIM, minimum, input, dim, keepdim, other)


def _argm(op, name, input, dim, keepdim):
    check_tensor(name, input)
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, (int, np.integer))):
        raise OpTypeError(name, f"'dim' must be an int or None, got {type(dim).__name__} {dim!r}")
    return call(op, input, dim=None if dim is None else int(dim), keepdim=bool(keepdim))


def argmax(input, dim=None, keepdim: bool = False):
    """Index of the (first) maximum, over the flattened input when ``dim`` is None."""
    return _argm(ARGMAX, "argmax", input, dim, keepdim)


def argmin(input, dim=None, keepdim: bool = False):
    """Index of the (first) minimum, over the flattened input when ``dim`` is None."""
    return _argm(ARGMIN, "argmin", input, dim, keepdim)


def aminmax(input, *, dim=None, keepdim: bool = False):
    """``(min, max)`` over ``dim`` (all dims when None)."""
    return AminmaxResult(amin(input, dim, keepdim), amax(input, dim, keepdim))


# -- opcheck samples ---------------------------------------------------------------------
from flow.errors import OpIndexError  # noqa: E402
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _amax_samples():
    x = S.uniform((2, 3, 4), seed=1)  # distinct values
    yield SampleInput((x,), {"dim": None, "keepdim": False})
    yield SampleInput((x,), {"dim": (1,), "keepdim": False})
    yield SampleInput((x,), {"dim": (0, 2), "keepdim": True})
    # two-way ties: the even split equals the central finite difference
    tie = S.t(np.array([[1.0, -0.5, 1.0, 0.25], [-2.0, 0.5, 0.75, -2.0]]))
    yield SampleInput((tie,), {"dim": (1,), "keepdim": False})
    yield SampleInput((S.ints((3, 4), -5, 5, seed=3),), {"dim": (0,), "keepdim": False})
    yield SampleInput((S.bools((3, 4), seed=4),), {"dim": (1,), "keepdim": True})
    yield SampleInput((S.uniform((2, 0), seed=5),), {"dim": (0,), "keepdim": False})
    yield from S.dim_errors(x, {"keepdim": False})
    yield ErrorInput((S.uniform((2, 0), seed=5),), {"dim": None, "keepdim": False}, OpError, "empty tensor")
    yield ErrorInput((S.uniform((2, 0), seed=5),), {"dim": (1,), "keepdim": False}, OpIndexError, "size 0")


def _argmax_samples():
    x = S.uniform((3, 4, 5), seed=4)
    yield SampleInput((x,), {"dim": None, "keepdim": False})
    yield SampleInput((x,), {"dim": None, "keepdim": True})
    yield SampleInput((x,), {"dim": 1, "keepdim": False})
    yield SampleInput((x,), {"dim": -1, "keepdim": True})
    yield SampleInput((S.ints((4, 6), 0, 3, seed=5),), {"dim": 1, "keepdim": False})  # ties: first index
    yield from S.dim_errors(x, {"keepdim": False}, tuple_dims=False)
    yield ErrorInput((S.uniform((0, 3)),), {"dim": None, "keepdim": False}, OpError, "empty tensor")
    yield ErrorInput((S.uniform((0, 3)),), {"dim": 0, "keepdim": False}, OpIndexError, "size 0")


def _max_dim_samples():
    x = S.uniform((3, 4, 5), seed=6)
    yield SampleInput((x,), {"dim": 1, "keepdim": False})
    yield SampleInput((x,), {"dim": -1, "keepdim": True})
    yield SampleInput((x,), {"dim": 0, "keepdim": False})
    yield SampleInput((S.uniform((), seed=7),), {"dim": 0, "keepdim": False})
    yield SampleInput((S.ints((4, 6), 0, 3, seed=8),), {"dim": 1, "keepdim": False})
    yield SampleInput((S.bools((4, 6), seed=9),), {"dim": 0, "keepdim": True})
    yield from S.dim_errors(x, {"keepdim": False}, tuple_dims=False)
    yield ErrorInput((S.uniform((0, 3)),), {"dim": 0, "keepdim": False}, OpIndexError, "size 0")


def _unique_index(shape, dim, k, seed):
    """int64 indices, distinct along ``dim``, ``k`` of them from a dim of size ``shape[dim]``."""
    a = np.argsort(S.rng(seed).random(shape), axis=dim)
    return S.t(np.take(a, np.arange(k), axis=dim), dtype=D.int64)


def _select_samples():
    x = S.uniform((3, 5, 4), seed=9)
    yield SampleInput((x, _unique_index((3, 5, 4), 1, 2, 10)), {"dim": 1})
    yield SampleInput((x, _unique_index((3, 5, 4), -1, 4, 11)), {"dim": -1})
    yield SampleInput((S.uniform((), seed=12), S.t(np.array(0), dtype=D.int64)), {"dim": 0})
    idx = _unique_index((3, 5, 4), 1, 2, 10)
    yield ErrorInput((x, idx[0]), {"dim": 1}, OpError, "as many dims")
    yield ErrorInput((x, _unique_index((3, 5, 3), 1, 2, 10)), {"dim": 1}, OpError, "must match")
    yield from (ErrorInput((x, idx), e.kwargs, e.error, e.match) for e in S.dim_errors(x, tuple_dims=False))
    yield ErrorInput((x, idx + 5), {"dim": 1}, OpIndexError, "out of range", values=True)


def _select_bw_samples():
    yield SampleInput((S.uniform((3, 2, 4), seed=13), _unique_index((3, 5, 4), 1, 2, 14)), {"dim": 1, "size": 5})
    yield SampleInput((S.uniform((3, 5), seed=15), _unique_index((3, 5), 1, 5, 16)), {"dim": -1, "size": 5})
    g, idx = S.uniform((3, 2, 4), seed=13), _unique_index((3, 5, 4), 1, 2, 14)
    yield ErrorInput((g, idx[:, :1]), {"dim": 1, "size": 5}, OpError, "must equal 'grad' shape")
    yield ErrorInput((g, idx), {"dim": 3, "size": 5}, OpIndexError, "out of range")
    yield ErrorInput((g, idx), {"dim": 1, "size": -1}, OpError, "'size' must be non-negative")
    yield ErrorInput((g, idx), {"dim": 1, "size": 1}, OpIndexError, "out of range", values=True)


set_samples(AMAX, _amax_samples)
set_samples(AMIN, _amax_samples)
set_samples(ARGMAX, _argmax_samples)
set_samples(ARGMIN, _argmax_samples)
set_samples(MAX_DIM, _max_dim_samples)
set_samples(MIN_DIM, _max_dim_samples)
set_samples(SELECT_ALONG_DIM, _select_samples)
set_samples(SELECT_ALONG_DIM_BACKWARD, _select_bw_samples)

__all__ = ["amax", "amin", "max", "min", "argmax", "argmin", "aminmax"]
