"""Boxing: converting a global array from one SBP (or placement) to another, each as its collective.

One placement axis, over the group of ranks along it (``n`` ranks, this one at index ``i``):

==========  ==================================================  ============================
from -> to  how                                                 bytes sent per rank (N: size)
==========  ==================================================  ============================
P -> B      all-reduce (sum)                                    2 N (n-1)/n
P -> S(d)   reduce-scatter of the pieces along ``d``            N (n-1)/n
S(d) -> B   all-gather, concatenated along ``d``                N (n-1)/n
S(i)->S(j)  all-to-all: piece ``k`` along ``j`` goes to rank k  N (n-1)/n^2
B -> S(d)   the local piece (a copy; no communication)          0
B -> P      rank 0 of the group keeps the value, others zeros   0
S(d) -> P   the piece in place in zeros of the whole            0
==========  ==================================================  ============================

An N-d conversion changes one axis at a time, in the order (and through broadcast where two axes
split the same dim) that sends the fewest bytes: :mod:`flow_dist.boxing_plan`. A change of
placement goes through broadcast: the source's first rank broadcasts the whole to the job.
:func:`cost` gives the bytes a conversion sends per rank along that plan; the handler's signature
choice and the graph passes use it.
"""

from __future__ import annotations

import numpy as np

from flow_dist import env
from flow_dist.boxing_plan import plan, plan_cost
from flow_dist.comm.backend import get_backend
from flow_dist.errors import GlobalTensorError
from flow_dist.layout import contiguous, local_slice, piece_bounds
from flow_dist.placement import Placement
from flow_dist.sbp import Broadcast, PartialSum, Split, broadcast

__all__ = ["OP_NAME", "box", "convert_axis", "cost", "cost_1d"]

OP_NAME = "sbp_boxing"  # the op a compiled graph holds a one-axis conversion as (flow_dist.boxing_op)


def box(x, nd_sbp: tuple, placement: Placement | None = None):
    """``x`` (a :class:`~flow_dist.global_array.GlobalArray`) laid out as ``nd_sbp`` (over
    ``placement``, default ``x``'s); ``x`` itself when nothing changes."""
    if placement is not None and placement != x.placement:
        return _change_placement(x, nd_sbp, placement)
    if nd_sbp == x.sbp:
        return x
    y = x
    for k, to in plan(x.shape, np.dtype(x.dtype).itemsize, x.placement.hierarchy, x.sbp, nd_sbp):
        y = _axis(y, k, to)
    return y


def _group(x, axis: int):
    p = x.placement
    if p.ndim == 1:
        return get_backend(p.type, p.rank_list)
    return get_backend(p.type, p.axis_group(p.rank_list[_flat_index(x)], axis))


def _flat_index(x) -> int:
    return int(np.ravel_multi_index(x.coord, x.placement.hierarchy))


def _sub_len(x, axis: int, dim: int) -> int:
    """The length of ``dim`` of the part of the logical tensor the group along ``axis`` shares."""
    sl = local_slice(x.shape, x.placement, x.sbp[:axis], x.coord[:axis])
    return sl[dim].stop - sl[dim].start


def _pieces(a: np.ndarray, dim: int, n: int) -> list:
    length = a.shape[dim]
    out = []
    for i in range(n):
        s, e = piece_bounds(length, n, i)
        idx = [slice(None)] * a.ndim
        idx[dim] = slice(s, e)
        out.append(contiguous(a[tuple(idx)]))
    return out


def _axis(x, axis: int, to):
    """Convert one placement axis of ``x`` to ``to`` (no nested split on a later axis); while a
    graph is traced (a symbolic piece) as the op :mod:`flow_dist.boxing_op`, which the graph keeps."""
    if x.sbp[axis] == to:
        return x
    if x.local.__class__ is not np.ndarray:
        return _as_op(x, axis, to)
    return convert_axis(x, axis, to)


def _as_op(x, axis: int, to):
    from flow import array_kinds, interceptors

    t = array_kinds.wrap(x.local, x.placement.type)
    attrs = dict(placement=x.placement, sbp=x.sbp, axis=axis, to=to, shape=x.shape, coord=tuple(x.coord))
    out = interceptors.run_op(OP_NAME, (t,), attrs)
    y = x.with_local(out._data, x.sbp[:axis] + (to,) + x.sbp[axis + 1 :])
    out._data.value.attrs.update(y.layout())  # the traced value shows its layout
    return y


def convert_axis(x, axis: int, to):
    """:func:`_axis` on a piece that is a device array: the collective (or local copy) itself."""
    frm = x.sbp[axis]
    nd = x.sbp[:axis] + (to,) + x.sbp[axis + 1 :]
    if frm == to:
        return x
    a = contiguous(x.local)
    n = x.placement.hierarchy[axis]
    i = x.coord[axis]
    fc, tc = frm.__class__, to.__class__
    if fc is PartialSum and tc is Broadcast:
        out = _group(x, axis).all_reduce(a, op="sum")
    elif fc is PartialSum and tc is Split:
        out = _group(x, axis).reduce_scatter(_pieces(a, to.dim, n), op="sum")
    elif fc is Split and tc is Broadcast:
        out = np.concatenate(_group(x, axis).all_gather(a), axis=frm.dim)
    elif fc is Split and tc is Split:
        out = np.concatenate(_group(x, axis).all_to_all(_pieces(a, to.dim, n)), axis=frm.dim)
    elif fc is Broadcast and tc is Split:
        out = _pieces(a, to.dim, n)[i]
    elif fc is Broadcast and tc is PartialSum:
        out = a.copy() if i == 0 else np.zeros_like(a)
    elif fc is Split and tc is PartialSum:
        d = frm.dim
        full = list(a.shape)
        full[d] = _sub_len(x, axis, d)
        out = np.zeros(full, dtype=a.dtype)
        s, e = piece_bounds(full[d], n, i)
        idx = [slice(None)] * a.ndim
        idx[d] = slice(s, e)
        out[tuple(idx)] = a
    else:  # pragma: no cover - every pair of kinds is listed above
        raise AssertionError((frm, to))
    return x.with_local(out, nd)


def _change_placement(x, nd_sbp: tuple, placement: Placement):
    if x.local.__class__ is not np.ndarray:
        raise GlobalTensorError(
            f"a compiled graph cannot move a global tensor to another placement ({x.placement!r} -> "
            f"{placement!r}); convert it before calling the graph"
        )
    whole = box(x, tuple(broadcast for _ in x.sbp))
    world = get_backend(placement.type, None)
    src = x.placement.rank_list[0]
    me = env.get_rank()
    buf = whole.local if x.placement.has(me) else np.empty(x.shape, dtype=x.dtype)
    buf = world.broadcast(contiguous(buf), src=src) if world.size > 1 else buf
    if not placement.has(me):
        raise GlobalTensorError(f"to_global: rank {me} is not in {placement!r}; every rank must be in the placement")
    y = type(x)(buf, placement, tuple(broadcast for _ in nd_sbp), x.shape)
    return box(y, nd_sbp)


# -- cost model ---------------------------------------------------------------------------------


def cost_1d(frm, to, nbytes: float, n: int) -> float:
    """Bytes one rank sends to convert a tensor of ``nbytes`` (its part along the axis) from ``frm`` to ``to``."""
    if frm == to or n == 1:
        return 0.0
    fc, tc = frm.__class__, to.__class__
    if fc is PartialSum:
        return nbytes * (n - 1) / n * (2.0 if tc is Broadcast else 1.0)
    if fc is Split:
        if tc is Broadcast:
            return nbytes * (n - 1) / n
        if tc is Split:
            return nbytes * (n - 1) / (n * n)
    return 0.0  # B -> S, B -> P, S -> P: local


def cost(shape: tuple, itemsize: int, placement: Placement, frm: tuple, to: tuple) -> float:
    """Bytes one rank sends to convert a tensor of logical ``shape`` from ``frm`` to ``to`` (along the
    cheapest order of its axes, :mod:`flow_dist.boxing_plan`)."""
    return plan_cost(tuple(shape), int(itemsize), placement.hierarchy, tuple(frm), tuple(to))
