"""torch.distributed's collectives and point-to-point calls on local tensors.

Every rank of the group calls them in the same order; results are written into the tensors
given, in place, as torch does. ``async_op=True`` returns a :class:`Work` whose ``wait()``
finishes the call; otherwise they return None (``recv`` returns the sender's rank). ``src`` /
``dst`` are global ranks (``group_src`` / ``group_dst``: ranks within ``group``). A process outside
``group`` returns None without communicating, as torch's does (with a warning).
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

from flow.distributed._state import impl, resolve_group
from flow.distributed._types import DistError, ProcessGroup, ReduceOp, Work, backend_op

__all__ = [
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "send",
    "recv",
    "isend",
    "irecv",
    "barrier",
]


def _member(g: ProcessGroup | None, what: str) -> ProcessGroup | None:
    pg = resolve_group(g, what)
    if not pg.is_member():
        warnings.warn(
            f"Running {what} on global rank {pg._global_rank} which does not belong to the given group.",
            stacklevel=3,
        )
        return None
    return pg


def _peer(pg: ProcessGroup, rank: int | None, group_rank: int | None, name: str, what: str, default=None) -> int:
    """The group index of the peer given as a global ``rank`` or as ``group_<name>``."""
    if rank is not None and group_rank is not None:
        raise ValueError(f"{what}: give {name} (a global rank) or group_{name}, not both")
    if rank is None and group_rank is None:
        if default is None:
            raise ValueError(f"{what}: give {name} (a global rank) or group_{name}")
        rank = default
    if group_rank is not None:
        if isinstance(group_rank, bool) or not isinstance(group_rank, int) or not 0 <= group_rank < pg.size():
            raise ValueError(f"{what}: group_{name}={group_rank!r} is not a rank of the group of {pg.size()}")
        return group_rank
    if isinstance(rank, bool) or not isinstance(rank, int) or rank not in pg.ranks:
        raise ValueError(f"{what}: {name}={rank!r} is not a global rank of the group {list(pg.ranks)}")
    return pg.ranks.index(rank)


def _work(inner: Any, async_op: bool) -> Work | None:
    if not async_op:
        return None
    return Work(inner.wait, inner.is_completed)


def all_reduce(
    tensor, op: ReduceOp.RedOpType = ReduceOp.SUM, group: ProcessGroup | None = None, async_op: bool = False
):
    """Reduce ``tensor`` over the group, in place on every rank.

    >>> t = flow.ones(3) * (dist.get_rank() + 1)
    >>> dist.all_reduce(t, op=dist.ReduceOp.SUM)    # 2 ranks: tensor([3., 3., 3.])
    """
    pg = _member(group, "all_reduce")
    if pg is None:
        return None
    name = backend_op(op, "all_reduce")
    return _work(impl("all_reduce").all_reduce(tensor, name, pg.ranks, async_op), async_op)


def broadcast(
    tensor,
    src: int | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
    group_src: int | None = None,
):
    """``tensor`` of rank ``src`` into ``tensor`` of every rank of the group."""
    pg = _member(group, "broadcast")
    if pg is None:
        return None
    i = _peer(pg, src, group_src, "src", "broadcast")
    return _work(impl("broadcast").broadcast(tensor, i, pg.ranks, async_op), async_op)


def reduce(
    tensor,
    dst: int | None = None,
    op: ReduceOp.RedOpType = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
    group_dst: int | None = None,
):
    """The reduction of ``tensor`` over the group, into ``tensor`` of rank ``dst`` (the others'
    tensors are left as they were)."""
    pg = _member(group, "reduce")
    if pg is None:
        return None
    i = _peer(pg, dst, group_dst, "dst", "reduce")
    name = backend_op(op, "reduce")
    return _work(impl("reduce").reduce(tensor, i, name, pg.ranks, async_op), async_op)


def all_gather(tensor_list: list, tensor, group: ProcessGroup | None = None, async_op: bool = False):
    """Every rank's ``tensor`` into ``tensor_list`` (one tensor per rank of the group, in rank order)."""
    pg = _member(group, "all_gather")
    if pg is None:
        return None
    if not isinstance(tensor_list, (list, tuple)):
        raise TypeError(f"all_gather: tensor_list must be a list of tensors, got {type(tensor_list).__name__}")
    return _work(impl("all_gather").all_gather(tensor_list, tensor, pg.ranks, async_op), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group: ProcessGroup | None = None, async_op: bool = False):
    """Every rank's ``input_tensor`` into one tensor: ``output_tensor`` is their concatenation along
    dim 0 (``(world * n, ...)``) or their stack (``(world, n, ...)``)."""
    pg = _member(group, "all_gather_into_tensor")
    if pg is None:
        return None
    mod = impl("all_gather_into_tensor")
    return _work(mod.all_gather_into_tensor(output_tensor, input_tensor, pg.ranks, async_op), async_op)


def reduce_scatter(
    output,
    input_list: list,
    op: ReduceOp.RedOpType = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
):
    """``input_list[i]`` of every rank, reduced, into ``output`` of the group's rank ``i``."""
    pg = _member(group, "reduce_scatter")
    if pg is None:
        return None
    if not isinstance(input_list, (list, tuple)):
        raise TypeError(f"reduce_scatter: input_list must be a list of tensors, got {type(input_list).__name__}")
    name = backend_op(op, "reduce_scatter")
    return _work(impl("reduce_scatter").reduce_scatter(output, input_list, name, pg.ranks, async_op), async_op)


def reduce_scatter_tensor(
    output,
    input,
    op: ReduceOp.RedOpType = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
):
    """``input`` is the group's pieces, concatenated along dim 0 (or stacked); piece ``i``, reduced
    over the ranks, goes into ``output`` of rank ``i``."""
    pg = _member(group, "reduce_scatter_tensor")
    if pg is None:
        return None
    name = backend_op(op, "reduce_scatter_tensor")
    mod = impl("reduce_scatter_tensor")
    return _work(mod.reduce_scatter_tensor(output, input, name, pg.ranks, async_op), async_op)


def gather(
    tensor,
    gather_list: list | None = None,
    dst: int | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
    group_dst: int | None = None,
):
    """Every rank's ``tensor`` into ``gather_list`` of rank ``dst`` (default 0); the other ranks
    pass no list."""
    pg = _member(group, "gather")
    if pg is None:
        return None
    i = _peer(pg, dst, group_dst, "dst", "gather", default=0)  # torch: global rank 0
    me = pg.rank()
    if me == i and gather_list is None:
        raise ValueError("gather: gather_list must be specified on the destination rank")
    if me != i and gather_list:
        raise ValueError("gather: gather_list must NOT be specified on non-destination ranks")
    return _work(impl("gather").gather(tensor, gather_list, i, me, pg.ranks, async_op), async_op)


def scatter(
    tensor,
    scatter_list: list | None = None,
    src: int | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
    group_src: int | None = None,
):
    """``scatter_list[i]`` of rank ``src`` (default 0) into ``tensor`` of the group's rank ``i``;
    the other ranks pass no list."""
    pg = _member(group, "scatter")
    if pg is None:
        return None
    i = _peer(pg, src, group_src, "src", "scatter", default=0)
    me = pg.rank()
    if me == i and scatter_list is None:
        raise ValueError("scatter: scatter_list must be specified on the source rank")
    if me != i and scatter_list:
        raise ValueError("scatter: scatter_list must NOT be specified on non-source ranks")
    return _work(impl("scatter").scatter(tensor, scatter_list, i, me, pg.ranks, async_op), async_op)


def all_to_all(
    output_tensor_list: list, input_tensor_list: list, group: ProcessGroup | None = None, async_op: bool = False
):
    """``input_tensor_list[j]`` to rank ``j``; ``output_tensor_list[i]`` receives rank ``i``'s."""
    pg = _member(group, "all_to_all")
    if pg is None:
        return None
    mod = impl("all_to_all")
    return _work(mod.all_to_all(output_tensor_list, input_tensor_list, pg.ranks, async_op), async_op)


def all_to_all_single(
    output,
    input,
    output_split_sizes: Sequence[int] | None = None,
    input_split_sizes: Sequence[int] | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
):
    """``input``'s rows, split by ``input_split_sizes`` (default: evenly), one piece to each rank;
    ``output`` gets the pieces every rank sent this one, concatenated in rank order."""
    pg = _member(group, "all_to_all_single")
    if pg is None:
        return None
    mod = impl("all_to_all_single")
    inner = mod.all_to_all_single(output, input, output_split_sizes, input_split_sizes, pg.ranks, async_op)
    return _work(inner, async_op)


def _p2p(tensor, peer, group_peer, name: str, tag: int, group, what: str, async_op: bool):
    pg = _member(group, what)
    if pg is None:
        return None, None
    if peer is None and group_peer is None and name == "src":
        raise DistError(f"{what}: receiving from any source (src=None) is not supported; give src")
    i = _peer(pg, peer, group_peer, name, what)
    if isinstance(tag, bool) or not isinstance(tag, int) or tag < 0:
        raise ValueError(f"{what}: tag must be a non-negative integer, got {tag!r}")
    mod = impl(what)
    fn = mod.send if name == "dst" else mod.recv
    return fn(tensor, i, tag, pg.ranks, async_op), pg.ranks[i]


def send(tensor, dst: int | None = None, group: ProcessGroup | None = None, tag: int = 0, group_dst: int | None = None):
    """Send ``tensor`` to rank ``dst``; returns once it may be reused."""
    _p2p(tensor, dst, group_dst, "dst", tag, group, "send", False)


def recv(
    tensor, src: int | None = None, group: ProcessGroup | None = None, tag: int = 0, group_src: int | None = None
) -> int:
    """Receive from rank ``src`` into ``tensor`` (its shape and dtype must be what was sent);
    returns ``src``, or -1 on a process outside ``group``."""
    _, sender = _p2p(tensor, src, group_src, "src", tag, group, "recv", False)
    return -1 if sender is None else sender


def isend(
    tensor, dst: int | None = None, group: ProcessGroup | None = None, tag: int = 0, group_dst: int | None = None
):
    """:func:`send` without waiting: returns a Work (``wait()`` before reusing ``tensor``)."""
    inner, _ = _p2p(tensor, dst, group_dst, "dst", tag, group, "isend", True)
    return _work(inner, True) if inner is not None else None


def irecv(
    tensor, src: int | None = None, group: ProcessGroup | None = None, tag: int = 0, group_src: int | None = None
):
    """:func:`recv` without waiting: returns a Work whose ``wait()`` fills ``tensor``."""
    inner, _ = _p2p(tensor, src, group_src, "src", tag, group, "irecv", True)
    return _work(inner, True) if inner is not None else None


def barrier(group: ProcessGroup | None = None, async_op: bool = False, device_ids: Any = None):
    """Wait until every rank of the group has reached the barrier."""
    pg = _member(group, "barrier")
    if pg is None:
        return None
    return _work(impl("barrier").barrier(pg.ranks, async_op), async_op)
