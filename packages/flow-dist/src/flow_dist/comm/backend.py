"""The communication backend interface, and which backend serves a device type.

A :class:`Backend` runs collectives among a group of ranks on arrays of its device's array
module (NumPy for ``cpu``, CuPy for ``cuda``): it is what boxing, DDP and ``flow.comm`` call.
Results are new arrays (never the inputs); with ``async_op=True`` a call returns a :class:`Work`
whose ``wait()`` gives the result. Group ranks are indices into ``ranks``.

``get_backend("cpu", ranks)`` is the MPI backend (:mod:`flow_dist.comm.mpi`) over those global
ranks (all of them by default), made once per group; only the group's members call it, in the
same order. A job of one process needs no MPI (:class:`flow_dist.comm.local.LocalBackend`).
``"cuda"`` will be NCCL's, which comes with flow-cuda; :func:`register_backend` lets a device
plugin provide its own.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from flow_dist import env
from flow_dist.comm.errors import CommError

__all__ = ["Backend", "Work", "get_backend", "register_backend", "REDUCE_OPS"]

REDUCE_OPS = ("sum", "avg", "prod", "max", "min")


class Work:
    """A collective in flight: ``wait()`` blocks until it is done and returns its result."""

    def __init__(self, wait: Callable[[], object], test: Callable[[], bool] | None = None) -> None:
        self._wait = wait
        self._test = test
        self._done = False
        self._result = None

    def wait(self):
        if not self._done:
            self._result = self._wait()
            self._done = True
        return self._result

    def is_completed(self) -> bool:
        if self._done:
            return True
        return self._test() if self._test is not None else False


class Backend:
    """Collectives over a group of ranks (see the module docs)."""

    rank: int  # this process's index in the group
    size: int
    ranks: tuple  # the group's global ranks

    def all_reduce(self, a: np.ndarray, op: str = "sum", async_op: bool = False, out: np.ndarray | None = None):
        """The reduction over the group (into ``out`` when given and it fits)."""
        raise NotImplementedError

    def all_gather(self, a: np.ndarray, async_op: bool = False):
        """One array per group rank, in order; pieces may differ in shape (not in dtype or ndim)."""
        raise NotImplementedError

    def reduce_scatter(self, pieces: Sequence[np.ndarray], op: str = "sum", async_op: bool = False):
        """``pieces[i]`` of every rank, reduced, to rank ``i``."""
        raise NotImplementedError

    def broadcast(self, a: np.ndarray, src: int = 0, async_op: bool = False):
        raise NotImplementedError

    def reduce(self, a: np.ndarray, dst: int = 0, op: str = "sum", async_op: bool = False):
        """The reduction on rank ``dst``; None on the others."""
        raise NotImplementedError

    def all_to_all(self, pieces: Sequence[np.ndarray], async_op: bool = False):
        """``pieces[j]`` to rank ``j``; returns what every rank sent this one, in rank order."""
        raise NotImplementedError

    def send(self, a: np.ndarray, dst: int, tag: int = 0, async_op: bool = False):
        raise NotImplementedError

    def recv(self, out: np.ndarray, src: int, tag: int = 0, async_op: bool = False):
        """Fill ``out`` (its shape and dtype say what to receive) from rank ``src``."""
        raise NotImplementedError

    def barrier(self, async_op: bool = False):
        raise NotImplementedError


_FACTORIES: dict[str, Callable] = {}
_CACHE: dict = {}


def register_backend(device_type: str, factory: Callable[[tuple], Backend]) -> None:
    """Make ``factory(ranks)`` the backend of ``device_type`` (a device plugin's NCCL, say)."""
    _FACTORIES[device_type] = factory
    for key in [k for k in _CACHE if k[0] == device_type]:
        del _CACHE[key]


def _mpi_factory(ranks: tuple) -> Backend:
    from flow_dist.comm.mpi import MPIBackend

    return MPIBackend(ranks)


def get_backend(device_type: str = "cpu", ranks: Sequence[int] | None = None) -> Backend:
    """The backend of ``device_type`` over the group ``ranks`` (global ranks; default: all)."""
    world = env.get_world_size()
    key_ranks = tuple(range(world)) if ranks is None else tuple(int(r) for r in ranks)
    key = (device_type, key_ranks)
    b = _CACHE.get(key)
    if b is not None:
        return b
    me = env.get_rank()
    bad = [r for r in key_ranks if not 0 <= r < world]
    if bad:
        raise CommError(f"communication group {list(key_ranks)}: rank {bad[0]} is not in the job of {world}")
    if me not in key_ranks:
        raise CommError(f"communication group {list(key_ranks)}: this process (rank {me}) is not a member")
    if len(key_ranks) == 1:
        from flow_dist.comm.local import LocalBackend

        b = LocalBackend(key_ranks)
    else:
        factory = _FACTORIES.get(device_type)
        if factory is None:
            if device_type == "cuda":
                raise CommError("no communication backend for 'cuda': the NCCL backend comes with flow-cuda")
            raise CommError(f"no communication backend for device type {device_type!r}")
        b = factory(key_ranks)
    _CACHE[key] = b
    return b


_FACTORIES["cpu"] = _mpi_factory
