"""``flow.distributed``: torch.distributed's API over flow-dist's communication.

A script written for ``torch.distributed`` runs with ``import flow.distributed as dist``::

    import flow
    import flow.distributed as dist

    dist.init_process_group("gloo")                # the job's ranks: flow-launch -n 2 train.py
    t = flow.ones(4) * (dist.get_rank() + 1)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)       # in place on every rank
    work = dist.broadcast(t, src=0, async_op=True)
    work.wait()
    dist.destroy_process_group()

The processes are started by flow's MPI launcher (``flow-launch -n N script.py``, or ``mpiexec -n N
python -m mpi4py script.py``), not torchrun: ``init_process_group`` takes the rank and world size
from the launcher and sets torchrun's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` for scripts that
read them. ``"gloo"`` and ``"mpi"`` run over MPI on CPU; ``"nccl"`` needs flow-cuda. Collectives
(``all_reduce``, ``broadcast``, ``reduce``, ``all_gather``, ``all_gather_into_tensor``,
``reduce_scatter``, ``reduce_scatter_tensor``, ``gather``, ``scatter``, ``all_to_all``,
``all_to_all_single``, ``barrier``) and ``send`` / ``recv`` / ``isend`` / ``irecv`` work on local
tensors, over the world or a :func:`new_group`. ``flow.nn.parallel.DistributedDataParallel`` and
``flow.utils.data.DistributedSampler`` complete the classic data-parallel script.

Without flow-dist, :func:`is_available` is False and every call raises
:class:`flow.errors.FeatureNotInstalledError` naming the package; ``ReduceOp``, ``Backend`` and the
other names still import.
"""

from __future__ import annotations

from flow.distributed import checkpoint  # noqa: F401  (flow.distributed.checkpoint: sharded checkpoints)
from flow.distributed._collectives import (
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    all_to_all,
    all_to_all_single,
    barrier,
    broadcast,
    gather,
    irecv,
    isend,
    recv,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
    scatter,
    send,
)
from flow.distributed._objects import all_gather_object, broadcast_object_list
from flow.distributed._state import (
    destroy_process_group,
    get_backend,
    get_global_rank,
    get_group_rank,
    get_node_local_rank,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_gloo_available,
    is_initialized,
    is_mpi_available,
    is_nccl_available,
    is_torchelastic_launched,
    new_group,
)
from flow.distributed._types import (
    Backend,
    DistBackendError,
    DistError,
    GroupMember,
    ProcessGroup,
    ReduceOp,
    Work,
    group,
)

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
    "all_gather_object",
    "broadcast_object_list",
    "ReduceOp",
    "Backend",
    "ProcessGroup",
    "GroupMember",
    "group",
    "Work",
    "DistError",
    "DistBackendError",
]
