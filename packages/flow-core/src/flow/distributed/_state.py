"""The default process group and the questions about it: ``init_process_group``,
``destroy_process_group``, ``new_group``, ``get_rank``, ``get_world_size``, ``get_backend``, ...

The communication itself belongs to flow-dist, which provides ``"distributed.impl"``
(:mod:`flow_dist.torch_api`) through :mod:`flow.provided`; this module only keeps the state
torch.distributed keeps, so flow-core never imports flow-dist.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Sequence

from flow import provided
from flow.distributed._types import Backend, DistBackendError, DistError, GroupMember, ProcessGroup, group
from flow.errors import FeatureNotInstalledError

__all__ = [
    "is_available",
    "is_initialized",
    "init_process_group",
    "destroy_process_group",
    "new_group",
    "get_rank",
    "get_world_size",
    "get_backend",
    "get_process_group_ranks",
    "get_global_rank",
    "get_group_rank",
    "get_node_local_rank",
    "is_mpi_available",
    "is_gloo_available",
    "is_nccl_available",
    "is_torchelastic_launched",
]

_NOT_INITIALIZED = "Default process group has not been initialized, please make sure to call init_process_group."
_INIT_METHODS = ("env://", "tcp://", "file://")


class _State:
    world: ProcessGroup | None = None
    old_timeout: str | None = None


def impl(what: str) -> Any:
    """flow-dist's implementation (:mod:`flow_dist.torch_api`); FeatureNotInstalledError naming
    flow-dist when it is missing."""
    mod = provided.get("distributed.impl")
    if mod is None:
        provided.require("comm", f"flow.distributed.{what}")  # raises, naming flow-dist and why it is missing
        raise FeatureNotInstalledError(
            f"flow.distributed.{what} needs a flow-dist that provides flow.distributed; upgrade flow-dist"
        )
    return mod


def default_group(what: str) -> ProcessGroup:
    if _State.world is None:
        raise ValueError(_NOT_INITIALIZED if what == "" else f"{what}: {_NOT_INITIALIZED}")
    return _State.world


def resolve_group(g: ProcessGroup | None, what: str) -> ProcessGroup:
    """The group a call runs over: ``None`` / ``group.WORLD`` is the default group."""
    world = default_group(what)
    if g is None:
        return world
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"{what}: group must be a ProcessGroup from new_group (or None), got {type(g).__name__}")
    return g


def is_available() -> bool:
    """True when flow-dist (which does the communication) is installed and loaded."""
    return provided.get("distributed.impl") is not None


def is_initialized() -> bool:
    """Whether :func:`init_process_group` has been called (and not destroyed since)."""
    return _State.world is not None


def _backend_names(backend: str | None) -> list[str]:
    if backend is None:
        return ["mpi"]
    if not isinstance(backend, str):
        raise TypeError(f"init_process_group: backend must be a string or None, got {type(backend).__name__}")
    # torch's per-device form, "cpu:gloo,cuda:nccl"
    return [Backend(part.split(":")[-1].strip()) for part in backend.split(",")]


def _check_backend(names: list[str], mod: Any, what: str) -> None:
    for name in names:
        if name == Backend.NCCL and not mod.has_device_backend("cuda"):
            raise DistBackendError(
                f"{what}: backend 'nccl' needs flow-dist's cuda communication backend, which comes with "
                "flow-cuda (not loaded); on CPU use backend='gloo' or 'mpi'"
            )
    # 'gloo' and 'mpi' both run over MPI on CPU: a job of one process needs no MPI at all
    if mod.world()[1] > 1 and not mod.mpi_available():
        raise DistBackendError(f"{what}: this is a job of several processes, but mpi4py is not installed")


def _timeout_seconds(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(f"init_process_group: timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    if seconds <= 0:
        raise ValueError(f"init_process_group: timeout must be positive, got {timeout}")
    return seconds


def _check_launch(rank: int, world_size: int, mod: Any) -> tuple[int, int]:
    """This process's rank and the world size, from the MPI launcher; torchrun's variables and the
    arguments must agree with them."""
    me, size = mod.world()
    env_size, env_rank = os.environ.get("WORLD_SIZE"), os.environ.get("RANK")
    if size == 1 and env_size is not None and env_size.strip().isdigit() and int(env_size) > 1:
        raise DistError(
            f"init_process_group: WORLD_SIZE={env_size} is set (torchrun?), but no MPI launcher started this "
            "process: flow's ranks meet over MPI, so start the script with `flow-launch -n N script.py` "
            "(or `mpiexec -n N python -m mpi4py script.py`)"
        )
    for name, value, mine in (("WORLD_SIZE", env_size, size), ("RANK", env_rank, me)):
        if value is not None and value.strip().isdigit() and int(value) != mine and size > 1:
            raise DistError(f"init_process_group: {name}={value} in the environment, but the MPI launcher says {mine}")
    if world_size not in (-1, None) and int(world_size) != size:
        raise ValueError(f"init_process_group: world_size={world_size}, but the job has {size} processes")
    if rank not in (-1, None) and int(rank) != me:
        raise ValueError(f"init_process_group: rank={rank}, but this process is rank {me} of the job")
    return me, size


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: datetime.timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    store: Any = None,
    group_name: str = "",
    pg_options: Any = None,
    device_id: Any = None,
) -> None:
    """Join the job's default process group, as ``torch.distributed.init_process_group``.

    The processes are the job's MPI ranks (``flow-launch -n N script.py``): their rank and count
    come from the launcher, and ``rank`` / ``world_size`` (or torchrun's ``RANK`` /
    ``WORLD_SIZE``), when given, must agree. ``backend``: ``None`` or ``"mpi"``; ``"gloo"`` runs over
    MPI on CPU; ``"nccl"`` needs flow-cuda. ``init_method`` (``env://``, ``tcp://``, ``file://``) is
    accepted and not needed: the launcher connects the ranks. ``timeout`` is how long a collective
    may wait (``FLOW_COMM_TIMEOUT``). Sets torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` where unset, for scripts that read them.

        >>> import flow.distributed as dist
        >>> dist.init_process_group("gloo")
        >>> dist.get_rank(), dist.get_world_size()
        (0, 1)
    """
    if _State.world is not None:
        raise ValueError("trying to initialize the default process group twice!")
    mod = impl("init_process_group")
    names = _backend_names(backend)
    _check_backend(names, mod, "init_process_group")
    if init_method is not None and (not isinstance(init_method, str) or not init_method.startswith(_INIT_METHODS)):
        raise ValueError(
            f"init_process_group: init_method must start with env://, tcp:// or file://, got {init_method!r}"
        )
    if store is not None:
        raise DistError("init_process_group: store= is not supported: flow's ranks meet through the MPI launcher")
    seconds = _timeout_seconds(timeout)
    me, size = _check_launch(rank, world_size, mod)
    _State.old_timeout = mod.set_timeout(seconds)
    mod.export_torchrun_env()
    pg = ProcessGroup(range(size), me, backend if backend is not None else Backend.MPI)
    _State.world = pg
    _set_world(pg)


def destroy_process_group(group: ProcessGroup | None = None) -> None:
    """Leave the default group (``group=None``; collectives then need ``init_process_group`` again),
    or forget a group made by :func:`new_group`."""
    world = default_group("destroy_process_group")
    if group is not None and group is not world:
        resolve_group(group, "destroy_process_group")
        return
    impl("destroy_process_group").restore_timeout(_State.old_timeout)
    _State.world = None
    _set_world(None)


def _set_world(pg: ProcessGroup | None) -> None:
    group.WORLD = GroupMember.WORLD = pg


def new_group(
    ranks: Sequence[int] | None = None,
    timeout: datetime.timedelta | None = None,
    backend: str | None = None,
    pg_options: Any = None,
    use_local_synchronization: bool = False,
    group_desc: str | None = None,
    device_id: Any = None,
) -> ProcessGroup:
    """A group of some of the job's ranks (every rank calls it, as in torch); collectives on it run
    among its members only, and a process outside it gets None from them.

        >>> evens = dist.new_group([0, 2])
    """
    world = default_group("new_group")
    size = world.size()
    if ranks is None:
        members = list(range(size))
    else:
        members = []
        for r in ranks:
            if isinstance(r, bool) or not isinstance(r, int):
                raise TypeError(f"new_group: ranks must be integers, got {r!r}")
            if not 0 <= r < size:
                raise ValueError(f"new_group: rank {r} is not in the job of {size} processes")
            members.append(int(r))
        if len(set(members)) != len(members):
            raise ValueError(f"new_group: ranks {list(ranks)} repeat a rank")
        if not members:
            raise ValueError("new_group: ranks is empty")
        members.sort()
    if backend is not None:
        _check_backend(_backend_names(backend), impl("new_group"), "new_group")
    _timeout_seconds(timeout)
    return ProcessGroup(members, world._global_rank, backend if backend is not None else world.name())


def get_rank(group: ProcessGroup | None = None) -> int:
    """This process's rank in ``group`` (default: the world); -1 when it is not a member."""
    return resolve_group(group, "get_rank").rank()


def get_world_size(group: ProcessGroup | None = None) -> int:
    """The number of ranks of ``group`` (default: the world); -1 on a process outside it."""
    g = resolve_group(group, "get_world_size")
    return g.size() if g.is_member() else -1


def get_backend(group: ProcessGroup | None = None) -> str:
    """The backend name ``group`` was made with (``"mpi"`` by default; ``"gloo"`` when asked for)."""
    return resolve_group(group, "get_backend").name()


def get_process_group_ranks(group: ProcessGroup | None) -> list[int]:
    """The global ranks of ``group``, in group-rank order."""
    return list(resolve_group(group, "get_process_group_ranks").ranks)


def get_global_rank(group: ProcessGroup | None, group_rank: int) -> int:
    """The global rank of rank ``group_rank`` of ``group``."""
    g = resolve_group(group, "get_global_rank")
    if not 0 <= group_rank < g.size():
        raise ValueError(f"get_global_rank: group rank {group_rank} is not part of {g}")
    return g.ranks[group_rank]


def get_group_rank(group: ProcessGroup | None, global_rank: int) -> int:
    """The rank within ``group`` of global rank ``global_rank``."""
    g = resolve_group(group, "get_group_rank")
    if global_rank not in g.ranks:
        raise ValueError(f"get_group_rank: global rank {global_rank} is not part of {g}")
    return g.ranks.index(global_rank)


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    """``LOCAL_RANK`` (torchrun's, or set by :func:`init_process_group` from the MPI launcher), else
    ``fallback_rank``; RuntimeError when neither is there."""
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError(
        "LOCAL_RANK is not in the environment. Consider passing fallback_rank to allow `get_node_local_rank` to "
        "work, or call init_process_group first (it sets LOCAL_RANK from the MPI launcher)."
    )


def is_mpi_available() -> bool:
    """Whether collectives between processes can run (flow-dist with mpi4py)."""
    mod = provided.get("distributed.impl")
    return mod is not None and mod.mpi_available()


def is_gloo_available() -> bool:
    """Whether ``backend="gloo"`` works: it runs over MPI."""
    return is_mpi_available()


def is_nccl_available() -> bool:
    """Whether ``backend="nccl"`` works: flow-dist has a cuda backend (NCCL, from flow-cuda)."""
    mod = provided.get("distributed.impl")
    return mod is not None and mod.has_device_backend("cuda")


def is_torchelastic_launched() -> bool:
    """Whether torchrun started this process (never flow's launcher)."""
    return os.getenv("TORCHELASTIC_RUN_ID") is not None
