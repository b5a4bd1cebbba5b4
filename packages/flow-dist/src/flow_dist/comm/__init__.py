"""``flow.comm``: collectives on local tensors, with torch.distributed's signatures.

Every rank of the job calls them in the same order. Results are written into the tensors given
(in place, as torch.distributed does); ``async_op=True`` returns a work handle whose ``wait()``
finishes the call and writes the result. They move data, not gradients: a tensor that requires
grad is used through its values. The backend (MPI between processes, see
:mod:`flow_dist.comm.backend`) checks that all ranks call the same collective on the same shape
and dtype, and raises :class:`CommTimeoutError` after ``FLOW_COMM_TIMEOUT`` seconds.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from flow_dist import env
from flow_dist.comm.backend import get_backend, register_backend
from flow_dist.comm.base import Backend, Work
from flow_dist.comm.errors import CommError, CommTimeoutError

__all__ = [
    "ReduceOp",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send",
    "recv",
    "barrier",
    "get_rank",
    "get_world_size",
    "Backend",
    "Work",
    "get_backend",
    "register_backend",
    "CommError",
    "CommTimeoutError",
]


class ReduceOp:
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "prod"
    MAX = "max"
    MIN = "min"


get_rank = env.get_rank
get_world_size = env.get_world_size


def _array(t, what: str) -> np.ndarray:
    import flow

    if not isinstance(t, flow.Tensor):
        raise CommError(f"{what}: expected a flow.Tensor, got {type(t).__name__}")
    d = t._data
    if d.__class__ is not np.ndarray:
        raise CommError(
            f"{what}: expected a local tensor; this one holds {type(d).__name__} (a global tensor converts "
            "with to_global, or use to_local() first)"
        )
    return d


def _backend(t) -> Backend:
    return get_backend(t.device.type, None)


def _into(out: np.ndarray, value: np.ndarray, what: str) -> None:
    if value.shape != out.shape:
        raise CommError(f"{what}: the result has shape {value.shape}, the output tensor {out.shape}")
    out[...] = value


def _finish(work, write, async_op: bool):
    if not async_op:
        write(work)
        return None
    return Work(lambda: write(work.wait()), work.is_completed)


def all_reduce(tensor, op: str = ReduceOp.SUM, async_op: bool = False):
    """Reduce ``tensor`` over all ranks, in place."""
    a = _array(tensor, "all_reduce")
    w = _backend(tensor).all_reduce(a, op=op, async_op=async_op)
    return _finish(w, lambda r: _into(a, r, "all_reduce"), async_op)


def all_gather(tensor_list: Sequence, tensor, async_op: bool = False):
    """Every rank's ``tensor`` into ``tensor_list`` (one tensor per rank, of each one's shape)."""
    a = _array(tensor, "all_gather")
    outs = [_array(t, "all_gather") for t in tensor_list]
    if len(outs) != get_world_size():
        raise CommError(f"all_gather: tensor_list has {len(outs)} tensors for {get_world_size()} ranks")
    w = _backend(tensor).all_gather(a, async_op=async_op)

    def write(pieces):
        for o, p in zip(outs, pieces):
            _into(o, p, "all_gather")

    return _finish(w, write, async_op)


def reduce_scatter(output, input_list: Sequence, op: str = ReduceOp.SUM, async_op: bool = False):
    """``input_list[i]`` of every rank, reduced, into ``output`` of rank ``i``."""
    out = _array(output, "reduce_scatter")
    pieces = [_array(t, "reduce_scatter") for t in input_list]
    w = _backend(output).reduce_scatter(pieces, op=op, async_op=async_op)
    return _finish(w, lambda r: _into(out, r, "reduce_scatter"), async_op)


def broadcast(tensor, src: int, async_op: bool = False):
    """``tensor`` of rank ``src`` into ``tensor`` of every rank."""
    a = _array(tensor, "broadcast")
    w = _backend(tensor).broadcast(a, src=src, async_op=async_op)
    return _finish(w, lambda r: _into(a, r, "broadcast"), async_op)


def reduce(tensor, dst: int, op: str = ReduceOp.SUM, async_op: bool = False):
    """The reduction of ``tensor`` over all ranks into ``tensor`` of rank ``dst``."""
    a = _array(tensor, "reduce")
    w = _backend(tensor).reduce(a, dst=dst, op=op, async_op=async_op)
    return _finish(w, lambda r: None if r is None else _into(a, r, "reduce"), async_op)


def all_to_all(output_tensor_list: Sequence, input_tensor_list: Sequence, async_op: bool = False):
    """``input_tensor_list[j]`` to rank ``j``; ``output_tensor_list[i]`` receives rank ``i``'s."""
    ins = [_array(t, "all_to_all") for t in input_tensor_list]
    outs = [_array(t, "all_to_all") for t in output_tensor_list]
    if len(ins) != get_world_size() or len(outs) != get_world_size():
        raise CommError(
            f"all_to_all: expected {get_world_size()} input and output tensors, got {len(ins)}, {len(outs)}"
        )
    w = _backend(input_tensor_list[0]).all_to_all(ins, async_op=async_op)

    def write(pieces):
        for o, p in zip(outs, pieces):
            _into(o, p, "all_to_all")

    return _finish(w, write, async_op)


def send(tensor, dst: int, tag: int = 0):
    """Send ``tensor`` to rank ``dst`` (blocks until it can be reused)."""
    _backend(tensor).send(_array(tensor, "send"), dst, tag)


def recv(tensor, src: int, tag: int = 0):
    """Receive from rank ``src`` into ``tensor`` (its shape and dtype must be what was sent)."""
    _backend(tensor).recv(_array(tensor, "recv"), src, tag)
    return src


def barrier(async_op: bool = False):
    """Wait until every rank has reached the barrier."""
    w = get_backend("cpu", None).barrier(async_op=async_op)
    return w if async_op else None
