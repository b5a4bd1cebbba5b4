"""The objects of ``flow.distributed``'s API: reduction ops, backend names, process groups, work
handles and errors. They need no communication package, so scripts can name them anywhere."""

from __future__ import annotations

import enum
from typing import Callable, Sequence

from flow.errors import FlowError

__all__ = ["ReduceOp", "Backend", "ProcessGroup", "GroupMember", "group", "Work", "DistError", "DistBackendError"]


class DistError(FlowError):
    """A ``flow.distributed`` call that cannot run as made (``torch.distributed.DistError``)."""


class DistBackendError(DistError):
    """The communication backend cannot do what was asked (``torch.distributed.DistBackendError``)."""


class ReduceOp:
    """The reductions of ``all_reduce`` / ``reduce`` / ``reduce_scatter``, as torch's:
    ``ReduceOp.SUM``, ``AVG``, ``PRODUCT``, ``MIN``, ``MAX`` (members of ``ReduceOp.RedOpType``,
    with torch's integer values). ``BAND`` / ``BOR`` / ``BXOR`` exist so that code naming them
    imports, but flow's backends do not reduce bitwise and refuse them when a collective runs.

        >>> flow.distributed.ReduceOp.MAX
        <RedOpType.MAX: 4>
    """

    class RedOpType(enum.IntEnum):
        SUM = 0
        AVG = 1
        PRODUCT = 2
        MIN = 3
        MAX = 4
        BAND = 5
        BOR = 6
        BXOR = 7

        def __repr__(self) -> str:
            return f"<RedOpType.{self.name}: {self.value}>"

        def __str__(self) -> str:
            return f"RedOpType.{self.name}"

    SUM = RedOpType.SUM
    AVG = RedOpType.AVG
    PRODUCT = RedOpType.PRODUCT
    MIN = RedOpType.MIN
    MAX = RedOpType.MAX
    BAND = RedOpType.BAND
    BOR = RedOpType.BOR
    BXOR = RedOpType.BXOR


# flow-dist's names of the reductions it runs (flow_dist.comm.base.REDUCE_OPS); flow.comm.ReduceOp's
# strings are accepted too, so tensors reduced through either API agree
_BACKEND_OP = {
    ReduceOp.SUM: "sum",
    ReduceOp.AVG: "avg",
    ReduceOp.PRODUCT: "prod",
    ReduceOp.MIN: "min",
    ReduceOp.MAX: "max",
}


def backend_op(op: object, what: str) -> str:
    """The backend's name of the reduction ``op`` (a ReduceOp or one of flow.comm's strings)."""
    if isinstance(op, str) and op in _BACKEND_OP.values():
        return op
    if isinstance(op, ReduceOp.RedOpType) or (isinstance(op, int) and not isinstance(op, bool)):
        try:
            member = ReduceOp.RedOpType(int(op))
        except ValueError:
            member = None
        if member in _BACKEND_OP:
            return _BACKEND_OP[member]
        if member is not None:
            raise DistBackendError(
                f"{what}: ReduceOp.{member.name} is not supported by flow's backends "
                "(they reduce with SUM, AVG, PRODUCT, MIN and MAX)"
            )
    raise ValueError(f"{what}: op must be a flow.distributed.ReduceOp (SUM, AVG, PRODUCT, MIN, MAX), got {op!r}")


class Backend(str):
    """A backend's name, lower case, as torch's ``dist.Backend``: ``Backend("GLOO") == "gloo"``.

    ``Backend.MPI`` is flow's backend between processes; ``GLOO`` runs over it on CPU, and ``NCCL``
    is available where flow-dist has a ``cuda`` backend (it comes with flow-cuda).
    """

    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    MPI = "mpi"
    backend_list = ["undefined", "gloo", "nccl", "mpi"]

    def __new__(cls, name: str) -> "Backend":
        if not isinstance(name, str):
            raise TypeError(f"Backend name must be a string, got {type(name).__name__}")
        value = name.lower()
        if value not in cls.backend_list or value == cls.UNDEFINED:
            raise ValueError(f"Invalid backend: {name!r}; flow.distributed knows 'mpi', 'gloo' and 'nccl'")
        return str.__new__(cls, value)


class ProcessGroup:
    """A group of ranks collectives run over (``new_group`` makes one; ``group.WORLD`` is every
    rank). ``rank()`` is this process's index in the group, ``size()`` the group's size;
    collectives take global ranks for ``src`` / ``dst``, as torch's do."""

    def __init__(self, ranks: Sequence[int], global_rank: int, backend: str) -> None:
        self.ranks = tuple(int(r) for r in ranks)
        self._global_rank = global_rank
        self._backend = backend

    def rank(self) -> int:
        """This process's rank in the group; -1 when it is not a member (as torch's group ranks)."""
        return self.ranks.index(self._global_rank) if self._global_rank in self.ranks else -1

    def size(self) -> int:
        return len(self.ranks)

    def name(self) -> str:
        return self._backend

    def is_member(self) -> bool:
        return self._global_rank in self.ranks

    def __repr__(self) -> str:
        return f"ProcessGroup(ranks={list(self.ranks)}, backend={self._backend!r})"


class GroupMember:
    """torch's holder of the default group: ``WORLD`` is None until ``init_process_group``;
    ``NON_GROUP_MEMBER`` is what a process outside a group gets."""

    WORLD: ProcessGroup | None = None
    NON_GROUP_MEMBER = object()


class group:  # noqa: N801 - torch's name: `dist.group.WORLD`
    """``flow.distributed.group.WORLD``: the default group of every rank (None before
    ``init_process_group``)."""

    WORLD: ProcessGroup | None = None


class Work:
    """An asynchronous collective (``async_op=True``): ``wait()`` finishes it and writes its result
    into the tensors given (and returns True, as torch's); ``is_completed()`` asks without waiting."""

    def __init__(self, wait: Callable[[], object], test: Callable[[], bool] | None = None) -> None:
        self._wait_fn = wait
        self._test = test
        self._done = False

    def wait(self, timeout: object = None) -> bool:
        if not self._done:
            self._wait_fn()
            self._done = True
        return True

    def is_completed(self) -> bool:
        if self._done:
            return True
        return bool(self._test()) if self._test is not None else False
