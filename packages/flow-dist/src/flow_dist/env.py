"""``flow.env``: which process of the job this is.

Read from the MPI launcher's environment (MPICH's ``PMI_RANK`` / ``PMI_SIZE``, Open MPI's
``OMPI_COMM_WORLD_*``), so asking costs no MPI initialisation; a process started without a
launcher is rank 0 of 1. ``get_node_size`` (the number of machines) asks MPI once, lazily.
"""

from __future__ import annotations

import functools
import os

__all__ = ["get_rank", "get_world_size", "get_local_rank", "get_local_size", "get_node_size", "is_multi_process"]

_RANK = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
_SIZE = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
_LOCAL_RANK = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK")
_LOCAL_SIZE = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def _read(names, default: int) -> int:
    for name in names:
        v = os.environ.get(name)
        if v is not None and v.strip().lstrip("-").isdigit():
            return int(v)
    return default


def get_rank() -> int:
    """This process's rank in the job (0 without a launcher)."""
    return _read(_RANK, 0)


def get_world_size() -> int:
    """The number of processes of the job (1 without a launcher)."""
    return _read(_SIZE, 1)


def get_local_rank() -> int:
    """This process's rank among the processes of its machine."""
    return _read(_LOCAL_RANK, get_rank() if get_node_size() == 1 else 0)


def get_local_size() -> int:
    """The number of processes of the job on this machine."""
    return _read(_LOCAL_SIZE, get_world_size() if get_node_size() == 1 else 1)


@functools.cache
def get_node_size() -> int:
    """The number of machines the job runs on (asks MPI for the host names once)."""
    if get_world_size() == 1:
        return 1
    import socket

    from mpi4py import MPI

    names = MPI.COMM_WORLD.allgather(socket.gethostname())
    return len(set(names))


def is_multi_process() -> bool:
    return get_world_size() > 1
