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

from flow_dist import env
from flow_dist.comm.base import REDUCE_OPS, Backend, Work
from flow_dist.comm.errors import CommError
from flow_dist.comm.local import LocalBackend
from flow_dist.comm.mpi import MPIBackend

__all__ = ["Backend", "Work", "get_backend", "register_backend", "REDUCE_OPS"]


_FACTORIES: dict[str, Callable] = {}
_CACHE: dict = {}


def register_backend(device_type: str, factory: Callable[[tuple], Backend]) -> None:
    """Make ``factory(ranks)`` the backend of ``device_type`` (a device plugin's NCCL, say)."""
    _FACTORIES[device_type] = factory
    for key in [k for k in _CACHE if k[0] == device_type]:
        del _CACHE[key]


def _mpi_factory(ranks: tuple) -> Backend:
    return MPIBackend(ranks)  # (mpi4py is imported when the first one is made)


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
