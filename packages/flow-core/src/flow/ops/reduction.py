"""Reductions over dims: sum, mean (more in this module as they are added)."""

from __future__ import annotations

from flow import _dtype as D
from flow._dispatch import call
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import Attr


def _dims_attr(dim):
    if dim is None:
        return None
    if isinstance(dim, int):
        return (dim,)
    return tuple(int(d) for d in dim)


def _sum_dtype(dt):
    return D.int64 if dt.category < 2 else dt


def _expand_back(g, ctx):
    """Broadcast a reduced gradient back to the input's shape."""
    shape = ctx.input_shape(0)
    dims = M.wrap_dims("sum", ctx.attrs["dim"], len(shape))
    if not ctx.attrs["keepdim"]:
        keep = tuple(1 if i in dims else s for i, s in enumerate(shape))
        g = g.reshape(keep)
    return g.expand(shape)


def _sum_grad(ctx, g):
    return (_expand_back(g, ctx),)


def _mean_grad(ctx, g):
    shape = ctx.input_shape(0)
    dims = M.wrap_dims("mean", ctx.attrs["dim"], len(shape))
    n = 1
    for d in dims:
        n *= shape[d]
    return (_expand_back(g, ctx) / float(max(n, 1)),)


_DIM_ATTRS = [Attr("dim", (tuple, type(None)), None), Attr("keepdim", bool, False)]

SUM = defop("sum", ["input"], _DIM_ATTRS, meta=M.reduction("sum", out_dtype=_sum_dtype), grad=_sum_grad,
            save="none")
MEAN = defop("mean", ["input"], _DIM_ATTRS, meta=M.reduction("mean", allow_int=False), grad=_mean_grad,
             save="none")


@kernel(SUM)
def _sum_kernel(xp):
    def run(x, dim=None, keepdim=False):
        dt = x.dtype
        if dt.kind in "biu":
            return xp.sum(x, axis=dim, keepdims=keepdim, dtype=xp.int64)
        if dt.itemsize < 4:  # accumulate half precision in float32, as PyTorch does
            return xp.sum(x, axis=dim, keepdims=keepdim, dtype=xp.float32).astype(dt)
        return xp.asarray(xp.sum(x, axis=dim, keepdims=keepdim))

    return run


@kernel(MEAN)
def _mean_kernel(xp):
    def run(x, dim=None, keepdim=False):
        dt = x.dtype
        if dt.itemsize < 4:
            return xp.mean(x, axis=dim, keepdims=keepdim, dtype=xp.float32).astype(dt)
        return xp.asarray(xp.mean(x, axis=dim, keepdims=keepdim))

    return run


def sum(input, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A001
    """Sum over ``dim`` (all dims when None); integers and bools sum to int64."""
    if dtype is not None:
        input = input.to(dtype)
    return call(SUM, input, dim=_dims_attr(dim), keepdim=bool(keepdim))


def mean(input, dim=None, keepdim: bool = False, *, dtype=None):
    """Mean over ``dim``; needs a floating-point input (or ``dtype=``)."""
    if dtype is not None:
        input = input.to(dtype)
    return call(MEAN, input, dim=_dims_attr(dim), keepdim=bool(keepdim))



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


set_samples(SUM, _red_samples)
set_samples(MEAN, _red_samples)

__all__ = ["sum", "mean"]
