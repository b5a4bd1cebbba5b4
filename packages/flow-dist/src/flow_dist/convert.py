"""Differentiable conversion of a global tensor to another SBP or placement (boxing as an
autograd function): the gradient is converted back, a partial-sum input taking a broadcast
gradient (each partial reaches the sum whole) and a broadcast input keeping a partial gradient as
it is, to be reduced only where it is accumulated (:meth:`GlobalArray.grad_for`)."""

from __future__ import annotations

from flow import array_kinds
from flow.autograd import Function
from flow_dist import boxing
from flow_dist.sbp import Broadcast, PartialSum, broadcast, partial_sum

__all__ = ["convert", "Arg"]


class Arg:
    """A non-tensor argument of a Function (autograd takes tuples for tensor lists)."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value


def _grad_layout(x_sbp: tuple, g_sbp: tuple) -> tuple:
    """The layout a gradient is converted to on its way back to an input laid out as ``x_sbp``."""
    out = []
    for xs, gs in zip(x_sbp, g_sbp):
        if xs.__class__ is PartialSum:
            out.append(broadcast)
        elif xs.__class__ is Broadcast and gs.__class__ is PartialSum:
            out.append(partial_sum)
        else:
            out.append(xs)
    return tuple(out)


class _Boxing(Function):
    @staticmethod
    def forward(ctx, x, nd, placement):
        nd = nd.value
        ctx.layout = x._data.sbp
        ctx.placement = x._data.placement
        out = boxing.box(x._data, nd, placement)
        if out is x._data:
            out = out.with_local(out.local.copy())  # a new tensor: not the input's storage
        return array_kinds.wrap(out, x.device, dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        back = _grad_layout(ctx.layout, g._data.sbp)
        ga = boxing.box(g._data, back, ctx.placement)
        return array_kinds.wrap(ga, g.device, dtype=g.dtype), None, None


def convert(t, nd_sbp: tuple, placement):
    """``t`` (global) laid out as ``nd_sbp`` over ``placement``, differentiably."""
    return _Boxing.apply(t, Arg(nd_sbp), placement)
