"""``Tensor.to_global`` / ``to_local``, ``nn.Module.to_global`` and the factories' ``placement=``.

Both conversions are differentiable, as in OneFlow: the gradient of ``to_global`` (local -> global)
is the local piece of the gradient laid out the same way, and the gradient of a global -> global
conversion is converted back (a partial-sum input takes a broadcast gradient, since each partial
reaches the sum whole; a broadcast input keeps a partial gradient as it is, to be reduced only
where it is accumulated, see :meth:`GlobalArray.as_grad`).
"""

from __future__ import annotations

import numpy as np

from flow import array_kinds
from flow.autograd import Function
from flow_dist import boxing, env
from flow_dist.convert import Arg, convert
from flow_dist.errors import GlobalTensorError
from flow_dist.global_array import GlobalArray
from flow_dist.layout import check_sbp, contiguous, normalize_sbp
from flow_dist.placement import Placement
from flow_dist.sbp import PartialSum, Split, broadcast

__all__ = ["to_global", "to_local", "module_to_global", "global_factory", "global_constant", "local_to_global"]


def _check_placement(placement) -> Placement:
    if not isinstance(placement, Placement):
        raise GlobalTensorError(f"to_global: placement must be a flow.placement, got {placement!r}")
    placement.check_ranks(env.get_world_size())
    if not placement.has(env.get_rank()):
        raise GlobalTensorError(
            f"to_global: this process (rank {env.get_rank()}) is not in {placement!r}; placements that "
            "leave ranks out are not supported yet"
        )
    return placement


def _logical_shape(local: np.ndarray, placement: Placement, nd: tuple) -> tuple:
    """The logical shape of pieces given by every rank: split dims are the sum of the pieces along
    their axis (uneven pieces allowed), found with one small all-gather per split axis."""
    shape = list(local.shape)
    if not any(s.__class__ is Split for s in nd) or placement.size == 1:
        return tuple(shape)
    from flow_dist.comm.backend import get_backend

    for axis, s in enumerate(nd):
        if s.__class__ is not Split:
            continue
        group = placement.axis_group(env.get_rank(), axis) if placement.ndim > 1 else placement.rank_list
        lens = get_backend(placement.type, group).all_gather(np.array([local.shape[s.dim]], dtype=np.int64))
        shape[s.dim] = shape[s.dim] - local.shape[s.dim] + int(sum(int(a[0]) for a in lens))
    return tuple(shape)


class _LocalToGlobal(Function):
    @staticmethod
    def forward(ctx, x, placement, nd, shape):
        nd, shape = nd.value, shape.value
        ga = GlobalArray(contiguous(x._data), placement, nd, shape)
        expect = ga.expected_local_shape()
        if tuple(ga.local.shape) != expect:
            raise GlobalTensorError(
                f"to_global: this rank's local tensor has shape {tuple(ga.local.shape)}, but a tensor of logical "
                f"shape {shape} laid out as {nd} over {placement!r} needs a piece of {expect} here"
            )
        ctx.layout = nd
        return array_kinds.wrap(ga, x.device, dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        nd = tuple(broadcast if s.__class__ is PartialSum else s for s in ctx.layout)
        ga = boxing.box(g._data, nd)
        return array_kinds.wrap(ga.local, g.device, dtype=g.dtype), None, None, None


class _GlobalToLocal(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.layout = x._data.sbp
        ctx.placement = x._data.placement
        ctx.shape = tuple(x.shape)
        return array_kinds.wrap(x._data.local, x.device, dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        nd = tuple(broadcast if s.__class__ is PartialSum else s for s in ctx.layout)
        ga = GlobalArray(contiguous(g._data), ctx.placement, nd, ctx.shape)
        return array_kinds.wrap(ga, g.device, dtype=g.dtype)


def local_to_global(t, placement, sbp, shape=None):
    """``t`` (local) as this rank's piece of a global tensor."""
    placement = _check_placement(placement)
    nd = check_sbp(normalize_sbp(sbp, placement), t.ndim)
    shape = _logical_shape(t._data, placement, nd) if shape is None else tuple(shape)
    return _LocalToGlobal.apply(t, placement, Arg(nd), Arg(shape))


def to_global(t, placement=None, sbp=None, **kwargs):
    """``Tensor.to_global(placement, sbp)``: a local tensor becomes the local piece of a global
    one (its logical shape found from every rank's piece); a global one is converted by boxing.
    Omitting ``placement`` or ``sbp`` of a global tensor keeps its own."""
    unknown = set(kwargs) - {"shape", "grad_sbp", "check_meta"}
    if unknown:
        raise TypeError(f"to_global() got unexpected keyword arguments {sorted(unknown)}")
    d = t._data
    if d.__class__ is not GlobalArray:
        if placement is None or sbp is None:
            raise GlobalTensorError("to_global: a local tensor needs both placement= and sbp=")
        return local_to_global(t, placement, sbp, kwargs.get("shape"))
    placement = d.placement if placement is None else _check_placement(placement)
    nd = d.sbp if sbp is None else check_sbp(normalize_sbp(sbp, placement), d.ndim)
    if nd == d.sbp and placement == d.placement:
        return t
    return convert(t, nd, placement)


def to_local(t, **kwargs):
    """``Tensor.to_local()``: this rank's piece (sharing its memory)."""
    if t._data.__class__ is not GlobalArray:
        return t
    return _GlobalToLocal.apply(t)


def global_factory(t, placement, sbp):
    """A factory's whole logical tensor ``t`` (the same on every rank) as a global tensor."""
    placement = _check_placement(placement)
    nd = check_sbp(normalize_sbp(sbp, placement), t.ndim)
    whole = np.asarray(t._data)
    ga = GlobalArray(whole, placement, tuple(broadcast for _ in nd), tuple(whole.shape))
    piece = ga.piece_of(whole, nd)
    return array_kinds.wrap(ga.with_local(piece, nd), t.device, dtype=t.dtype)


def global_constant(t, like):
    """A composite's constant ``t`` (the same in every process) as a broadcast tensor on ``like``'s placement."""
    p = like._data.placement
    whole = np.asarray(t._data)
    return array_kinds.wrap(GlobalArray(whole, p, (broadcast,) * p.ndim, tuple(whole.shape)), t.device, dtype=t.dtype)


def module_to_global(module, placement, sbp):
    """``nn.Module.to_global(placement, sbp)``: every parameter and buffer becomes global in place
    (the module's own tensors, so optimizers built afterwards see them). ``sbp`` may be one layout
    for all, or a function ``(name, tensor) -> sbp``."""
    from flow import no_grad

    with no_grad():
        for name, p in list(module.named_parameters()) + list(module.named_buffers()):
            s = sbp(name, p) if callable(sbp) else sbp
            if p._data.__class__ is GlobalArray:
                g = to_global(p.detach(), placement, s)
            else:
                pl = _check_placement(placement)
                nd = check_sbp(normalize_sbp(s, pl), p.ndim)
                g = global_factory(p.detach(), pl, nd)
            p._data = g._data
            p._version[0] += 1
    return module
