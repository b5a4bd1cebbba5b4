"""Reductions over dims: sum mean prod nansum nanmean all any count_nonzero, and helpers the family shares.

Extremes (amax, max, argmax, ...) live in :mod:`flow.ops.reduction_minmax`,
statistics (var, std, logsumexp, norm) and scans (cumsum, cumprod) in
:mod:`flow.ops.reduction_stats`.
"""

from __future__ import annotations

import builtins
import collections

import numpy as np

from flow import _dispatch
from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import ANY, FLOAT, Attr


# -- helpers shared with reduction_stats and sorting ---------------------------------
def check_tensor(op: str, x, arg: str = "input") -> None:
    # the dispatcher's reference to Tensor (set when flow is imported): an import statement here
    # cost more than the rest of a small sum's Python code
    if not isinstance(x, _dispatch.Tensor):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")


def _dims_attr(dim, op: str = "reduction"):
    """Normalise ``dim`` to a tuple of ints or None (an empty tuple means every dim, as in PyTorch)."""
    if dim is None:
        return None
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
        return (int(dim),)
    if isinstance(dim, (tuple, list)):
        dims = tuple(dim)
        if not dims:
            return None
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
                raise OpTypeError(op, f"'dim' must be an int or a tuple of ints, got {dim!r}")
        return tuple(int(d) for d in dims)
    raise OpTypeError(op, f"'dim' must be an int or a tuple of ints, got {type(dim).__name__} {dim!r}")


def axes(x, dim):
    """The NumPy ``axis`` for a kernel: None for every dim (and for 0-d arrays)."""
    if dim is None or x.ndim == 0:
        return None
    return tuple(d % x.ndim for d in dim)


def keep_shape(shape, dims) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


def expand_back(g, shape, dims, keepdim: bool):
    """Broadcast a reduced gradient (or output) back to the input's ``shape``."""
    # when the reduced dims are the leading ones (a sum of everything, say) expand adds them back: no reshape
    if not keepdim and tuple(dims) != tuple(range(len(dims))):
        g = g.reshape(keep_shape(shape, dims))
    return g.expand(shape)


def keep(g, shape, dims, keepdim: bool):
    """A reduced tensor reshaped with its reduced dims kept (size 1)."""
    return g if keepdim else g.reshape(keep_shape(shape, dims))


def ctx_dims(ctx, op: str):
    shape = tuple(ctx.input_shape(0))
    dims = M.wrap_dims(op, ctx.attrs.get("dim"), len(shape)) if shape else ()
    return shape, dims, bool(ctx.attrs.get("keepdim", False))


def return_type(name: str, qualname: str, module: str, fields=("values", "indices")):
    """A named tuple like ``torch.return_types.<name>``: ``.values``/``.indices``, unpackable.

    ``module.qualname`` is where the class is bound, so results pickle.
    """
    base = collections.namedtuple(name, fields)

    def __repr__(self):
        body = ",\n".join(f"{f}={v!r}" for f, v in zip(self._fields, self))
        return f"flow.return_types.{name}(\n{body})"

    cls = type(name, (base,), {"__slots__": (), "__repr__": __repr__})
    cls.__module__, cls.__qualname__ = module, qualname
    return cls


def _int64_if_int(dt):
    return D.int64 if dt.category < 2 else dt


def _reduce_meta(op: str, out_dtype=None, nonempty: bool = False):
    def rule(x, dim=None, keepdim=False, **attrs):
        shape = tuple(x.shape)
        dims = M.wrap_dims(op, dim, len(shape))
        if nonempty:
            if dim is None and 0 in shape:
                raise OpError(
                    op, "cannot reduce an empty tensor over all dims (the operation has no identity); give 'dim'"
                )
            for d in dims:
                if shape and shape[d] == 0:
                    raise OpIndexError(op, f"cannot reduce over dim {d} of size 0 (input shape {shape})")
        out = keep_shape(shape, dims) if keepdim else tuple(s for i, s in enumerate(shape) if i not in dims)
        dt = out_dtype(x.dtype) if callable(out_dtype) else (out_dtype or x.dtype)
        return M.TensorMeta(out, dt, x.device)

    return rule


# -- sum, mean, prod, nansum ---------------------------------------------------------------
def _sum_grad(ctx, g):
    shape, dims, kd = ctx_dims(ctx, "sum")
    return (expand_back(g, shape, dims, kd),)


def _mean_grad(ctx, g):
    shape, dims, kd = ctx_dims(ctx, "mean")
    n = 1
    for d in dims:
        n *= shape[d]
    return (expand_back(g, shape, dims, kd) / float(builtins.max(n, 1)),)


def _prod_grad(ctx, g):
    from flow.ops.clamp_where import where

    (x,) = ctx.inputs
    shape, dims, kd = ctx_dims(ctx, "prod")
    gk = keep(g, shape, dims, kd)
    zero = x == 0
    nzeros = zero.sum(dim=dims, keepdim=True)
    x1 = where(zero, 1.0, x)
    rest = call(PROD, x1, dim=dims, keepdim=True)  # the product of the nonzero elements
    # no zero: out / x; one zero: the product of the others at the zero, 0 elsewhere; more: 0
    local = where(nzeros == 0, rest / x1, where(zero & (nzeros == 1), rest, 0.0))
    return (gk * local,)


def _half_acc(xp, x):
    return x.astype(xp.float32) if x.dtype.kind == "f" and x.dtype.itemsize < 4 else x


_DIM_ATTRS = [Attr("dim", (tuple, type(None)), None, items=int), Attr("keepdim", bool, False)]

SUM = defop(
    "sum",
    ["input"],
    _DIM_ATTRS,
    meta=_reduce_meta("sum", out_dtype=_int64_if_int),
    dtypes=ANY,
    grad=_sum_grad,
    save="none",
)
MEAN = defop("mean", ["input"], _DIM_ATTRS, meta=_reduce_meta("mean"), dtypes=FLOAT, grad=_mean_grad, save="none")
PROD = defop(
    "prod",
    ["input"],
    _DIM_ATTRS,
    meta=_reduce_meta("prod", out_dtype=_int64_if_int),
    dtypes=ANY,
    grad=_prod_grad,
    save="inputs",
)


@kernel(SUM)
def _sum_kernel(xp):
    # NumPy's ufunc itself: np.sum's Python wrapper costs about twice the reduction of a small array
    reduce = xp.add.reduce if xp is np else None

    def run(x, dim=None, keepdim=False):
        ax = axes(x, dim)
        kind = x.dtype.kind
        if kind in "biu":
            return xp.asarray(xp.sum(x, axis=ax, keepdims=keepdim, dtype=xp.int64))
        if reduce is not None and kind == "f" and x.dtype.itemsize >= 4:
            return xp.asarray(reduce(x, axis=ax, keepdims=keepdim))  # keeps its dtype
        # accumulate half precision in float32, as PyTorch does
        return xp.asarray(xp.sum(_half_acc(xp, x), axis=ax, keepdims=keepdim)).astype(x.dtype, copy=False)

    return run


@kernel(MEAN)
def _mean_kernel(xp):
    def run(x, dim=None, keepdim=False):
        ax = axes(x, dim)
        s = xp.sum(_half_acc(xp, x), axis=ax, keepdims=keepdim)
        n = _reduced_count(x.shape, ax)
        with np.errstate(invalid="ignore", divide="ignore"):
            return xp.asarray(s / n).astype(x.dtype, copy=False)

    return run


def _reduced_count(shape, ax) -> int:
    n = 1
    for i, s in enumerate(shape):
        if ax is None or i in ax:
            n *= s
    return n


@kernel(PROD)
def _prod_kernel(xp):
    def run(x, dim=None, keepdim=False):
        ax = axes(x, dim)
        if x.dtype.kind in "biu":
            return xp.asarray(xp.prod(x, axis=ax, keepdims=keepdim, dtype=xp.int64))
        return xp.asarray(xp.prod(_half_acc(xp, x), axis=ax, keepdims=keepdim)).astype(x.dtype, copy=False)

    return run


def sum(input, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A001
    """Sum over ``dim`` (all dims when None); integers and bools sum to int64."""
    check_tensor("sum", input)
    if dtype is not None:
        input = input.to(dtype)
    return call(SUM, input, dim=_dims_attr(dim, "sum"), keepdim=bool(keepdim))


def mean(input, dim=None, keepdim: bool = False, *, dtype=None):
    """Mean over ``dim``; needs a floating-point input (or ``dtype=``)."""
    check_tensor("mean", input)
    if dtype is not None:
        input = input.to(dtype)
    return call(MEAN, input, dim=_dims_attr(dim, "mean"), keepdim=bool(keepdim))


def prod(input, dim=None, keepdim: bool = False, *, dtype=None):
    """Product over ``dim`` (all dims when None); integers and bools multiply in int64."""
    check_tensor("prod", input)
    if dtype is not None:
        input = input.to(dtype)
    return call(PROD, input, dim=_dims_attr(dim, "prod"), keepdim=bool(keepdim))


def nansum(input, dim=None, keepdim: bool = False, *, dtype=None):
    """Sum treating NaN as zero."""
    check_tensor("nansum", input)
    if input.dtype.is_floating_point:
        from flow.ops.clamp_where import where
        from flow.ops.compare import isnan

        input = where(isnan(input), 0.0, input)
    return sum(input, dim, keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None):
    """Mean of the non-NaN elements."""
    check_tensor("nanmean", input)
    if dtype is not None:
        input = input.to(dtype)
    if not input.dtype.is_floating_point:
        raise OpTypeError("nanmean", f"expected a floating-point input, got {input.dtype}")
    from flow.ops.compare import isnan

    ok = isnan(input).logical_not()
    return nansum(input, dim, keepdim) / sum(ok, dim, keepdim)


# -- all, any, count_nonzero -------------------------------------------------------------------
def _bool_out(dt):
    return D.uint8 if dt is D.uint8 else D.bool


ALL = defop("all", ["input"], _DIM_ATTRS, meta=_reduce_meta("all", out_dtype=_bool_out), dtypes=ANY, save="none")
ANY_OP = defop("any", ["input"], _DIM_ATTRS, meta=_reduce_meta("any", out_dtype=_bool_out), dtypes=ANY, save="none")


def _logical_kernel(fname):
    def factory(xp):
        f = getattr(xp, fname)

        def run(x, dim=None, keepdim=False):
            r = xp.asarray(f(x, axis=axes(x, dim), keepdims=keepdim))
            return r.astype(xp.uint8) if x.dtype == xp.uint8 else r

        return run

    return factory


kernel(ALL)(_logical_kernel("all"))
kernel(ANY_OP)(_logical_kernel("any"))


def all(input, dim=None, keepdim: bool = False):  # noqa: A001
    """True where every element over ``dim`` is nonzero (uint8 inputs give uint8, as PyTorch)."""
    check_tensor("all", input)
    return call(ALL, input, dim=_dims_attr(dim, "all"), keepdim=bool(keepdim))


def any(input, dim=None, keepdim: bool = False):  # noqa: A001
    """True where some element over ``dim`` is nonzero."""
    check_tensor("any", input)
    return call(ANY_OP, input, dim=_dims_attr(dim, "any"), keepdim=bool(keepdim))


def count_nonzero(input, dim=None):
    """The number of nonzero elements over ``dim`` (int64)."""
    check_tensor("count_nonzero", input)
    return sum(input != 0, dim)


# -- opcheck samples ---------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import SampleInput  # noqa: E402


def _red_samples():
    x = S.uniform((2, 3, 4), seed=1)
    yield SampleInput((x,), {"dim": None, "keepdim": False})
    yield SampleInput((x,), {"dim": (1,), "keepdim": False})
    yield SampleInput((x,), {"dim": (0, 2), "keepdim": True})
    yield SampleInput((x,), {"dim": (-1,), "keepdim": False})
    yield SampleInput((S.uniform((), seed=2),), {"dim": (0,), "keepdim": False})
    yield SampleInput((S.uniform((3, 0), seed=2),), {"dim": (1,), "keepdim": True})
    yield from S.dim_errors(x, {"keepdim": False})
    yield from S.dim_errors(S.uniform((), seed=2), {"keepdim": False})


def _prod_samples():
    yield from _red_samples()
    one_zero = S.t(np.array([[0.5, 0.0, -1.5, 2.0], [1.2, -0.7, 0.9, 1.1], [0.0, 0.0, 1.3, -2.0]]))
    yield SampleInput((one_zero,), {"dim": (1,), "keepdim": False})
    yield SampleInput((one_zero,), {"dim": None, "keepdim": False})
    yield SampleInput((one_zero,), {"dim": (0,), "keepdim": True})


def _logical_samples():
    b = S.bools((3, 4), seed=1)
    yield SampleInput((b,), {"dim": None, "keepdim": False})
    yield SampleInput((b,), {"dim": (1,), "keepdim": True})
    yield SampleInput((S.ints((3, 4), 0, 2, seed=2),), {"dim": (0,), "keepdim": False})
    yield SampleInput((S.ints((2, 0), 0, 2, seed=2),), {"dim": (1,), "keepdim": False})
    yield SampleInput((S.ints((3, 4), 0, 2, seed=3, dtype=D.uint8),), {"dim": (1,), "keepdim": False})
    yield from S.dim_errors(b, {"keepdim": False})


set_samples(SUM, _red_samples)
set_samples(MEAN, _red_samples)
set_samples(PROD, _prod_samples)
set_samples(ALL, _logical_samples)
set_samples(ANY_OP, _logical_samples)

__all__ = ["sum", "mean", "prod", "nansum", "nanmean", "all", "any", "count_nonzero"]
