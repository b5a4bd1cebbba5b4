"""What ``flow.distributed`` (torch.distributed's API, in flow-core) runs on: where this process is,
which backends there are, and the collectives on local tensors over a group of global ranks.

flow-core keeps the API's state (the default group, backend names, argument checks) and calls
these through ``flow.provided`` (``"distributed.impl"``), so the core never imports flow-dist.
Groups are tuples of global ranks; ``src`` / ``dst`` here are indices into the group (the core
translates torch's global ranks). Every function writes its result into the tensors given, as
torch does, and returns a :class:`flow_dist.comm.Work` when ``async_op`` (its ``wait()`` writes),
else None. ``gather`` and ``scatter`` run as an all-gather and a broadcast of the whole list:
the backends have no rooted gather, and a collective keeps the ranks' calls checked against
each other.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from flow_dist import env
from flow_dist.comm import _array, _finish, _into
from flow_dist.comm.backend import _FACTORIES, get_backend  # (_FACTORIES: which device types have a backend)
from flow_dist.comm.errors import CommError

__all__ = [
    "world",
    "has_device_backend",
    "mpi_available",
    "set_timeout",
    "restore_timeout",
    "export_torchrun_env",
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
    "barrier",
]


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process, from the MPI launcher's environment."""
    return env.get_rank(), env.get_world_size()


def has_device_backend(device_type: str) -> bool:
    """Whether a communication backend serves ``device_type`` (``"cuda"``: NCCL from flow-cuda)."""
    return device_type in _FACTORIES


def mpi_available() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def set_timeout(seconds: float | None) -> str | None:
    """Make collectives time out after ``seconds`` (``FLOW_COMM_TIMEOUT``, which the MPI backend reads
    at every wait); returns the previous setting, for :func:`restore_timeout`."""
    old = os.environ.get("FLOW_COMM_TIMEOUT")
    if seconds is not None:
        os.environ["FLOW_COMM_TIMEOUT"] = repr(float(seconds))
    return old


def restore_timeout(old: str | None) -> None:
    if old is None:
        os.environ.pop("FLOW_COMM_TIMEOUT", None)
    else:
        os.environ["FLOW_COMM_TIMEOUT"] = old


def export_torchrun_env() -> None:
    """Set torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``) from the MPI launcher's, where unset: scripts written for
    torchrun read them (``int(os.environ["LOCAL_RANK"])``) to pick their device or shard."""
    values = {
        "RANK": env.get_rank(),
        "WORLD_SIZE": env.get_world_size(),
        "LOCAL_RANK": env.get_local_rank(),
        "LOCAL_WORLD_SIZE": env.get_local_size(),
        # MPI connects the ranks; these only answer scripts that read them
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": 29500,
    }
    for name, value in values.items():
        os.environ.setdefault(name, str(value))


def _backend(t, ranks: tuple):
    return get_backend(t.device.type, ranks)


def _count(seq: Sequence, n: int, what: str, name: str) -> list:
    items = list(seq)
    if len(items) != n:
        raise CommError(f"{what}: {name} has {len(items)} tensors for a group of {n} ranks")
    return items


def _same_dtype(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if a.dtype != b.dtype:
        raise CommError(f"{what}: the output tensor is {b.dtype}, the input {a.dtype}; they must match")


def all_reduce(tensor, op: str, ranks: tuple, async_op: bool):
    a = _array(tensor, "all_reduce")
    w = _backend(tensor, ranks).all_reduce(a, op=op, async_op=async_op)
    return _finish(w, lambda r: _into(a, r, "all_reduce"), async_op)


def broadcast(tensor, src: int, ranks: tuple, async_op: bool):
    a = _array(tensor, "broadcast")
    w = _backend(tensor, ranks).broadcast(a, src=src, async_op=async_op)
    return _finish(w, lambda r: _into(a, r, "broadcast"), async_op)


def reduce(tensor, dst: int, op: str, ranks: tuple, async_op: bool):
    a = _array(tensor, "reduce")
    w = _backend(tensor, ranks).reduce(a, dst=dst, op=op, async_op=async_op)
    return _finish(w, lambda r: None if r is None else _into(a, r, "reduce"), async_op)


def all_gather(tensor_list: Sequence, tensor, ranks: tuple, async_op: bool):
    a = _array(tensor, "all_gather")
    outs = [_array(t, "all_gather") for t in _count(tensor_list, len(ranks), "all_gather", "tensor_list")]
    w = _backend(tensor, ranks).all_gather(a, async_op=async_op)

    def write(pieces):
        for o, p in zip(outs, pieces):
            _into(o, p, "all_gather")

    return _finish(w, write, async_op)


def all_gather_into_tensor(output, tensor, ranks: tuple, async_op: bool):
    a, out = _array(tensor, "all_gather_into_tensor"), _array(output, "all_gather_into_tensor")
    _same_dtype(a, out, "all_gather_into_tensor")
    if out.size != a.size * len(ranks):
        shape = (len(ranks) * a.shape[0],) + a.shape[1:] if a.ndim else (len(ranks),)
        raise CommError(
            f"all_gather_into_tensor: the output has {out.size} elements; it must hold the group's "
            f"{len(ranks)} inputs of {a.size} (shape {shape})"
        )
    w = _backend(tensor, ranks).all_gather(a, async_op=async_op)

    def write(pieces):
        if any(p.shape != a.shape for p in pieces):
            raise CommError(f"all_gather_into_tensor: the ranks' inputs differ in shape: {[p.shape for p in pieces]}")
        # concatenated along dim 0 or stacked: the same elements in the same order
        out[...] = np.stack(pieces).reshape(out.shape)

    return _finish(w, write, async_op)


def reduce_scatter(output, input_list: Sequence, op: str, ranks: tuple, async_op: bool):
    out = _array(output, "reduce_scatter")
    pieces = [_array(t, "reduce_scatter") for t in _count(input_list, len(ranks), "reduce_scatter", "input_list")]
    w = _backend(output, ranks).reduce_scatter(pieces, op=op, async_op=async_op)
    return _finish(w, lambda r: _into(out, r, "reduce_scatter"), async_op)


def reduce_scatter_tensor(output, tensor, op: str, ranks: tuple, async_op: bool):
    a, out = _array(tensor, "reduce_scatter_tensor"), _array(output, "reduce_scatter_tensor")
    _same_dtype(a, out, "reduce_scatter_tensor")
    n = len(ranks)
    if a.size != out.size * n:
        raise CommError(
            f"reduce_scatter_tensor: the input has {a.size} elements; it must hold {n} pieces of the "
            f"output's {out.size} (shape {tuple(out.shape)})"
        )
    flat = np.ascontiguousarray(a).reshape(-1)
    pieces = [flat[i * out.size : (i + 1) * out.size].reshape(out.shape) for i in range(n)]
    w = _backend(output, ranks).reduce_scatter(pieces, op=op, async_op=async_op)
    return _finish(w, lambda r: _into(out, r, "reduce_scatter_tensor"), async_op)


def gather(tensor, gather_list: Sequence | None, dst: int, me: int, ranks: tuple, async_op: bool):
    a = _array(tensor, "gather")
    outs = None
    if me == dst:
        outs = [_array(t, "gather") for t in _count(gather_list, len(ranks), "gather", "gather_list")]
    w = _backend(tensor, ranks).all_gather(a, async_op=async_op)

    def write(pieces):
        for o, p in zip(outs or (), pieces):
            _into(o, p, "gather")

    return _finish(w, write, async_op)


def scatter(tensor, scatter_list: Sequence | None, src: int, me: int, ranks: tuple, async_op: bool):
    a = _array(tensor, "scatter")
    n = len(ranks)
    if me == src:
        pieces = [_array(t, "scatter") for t in _count(scatter_list, n, "scatter", "scatter_list")]
        bad = [i for i, p in enumerate(pieces) if p.shape != a.shape or p.dtype != a.dtype]
        if bad:
            p = pieces[bad[0]]
            raise CommError(
                f"scatter: scatter_list[{bad[0]}] is {tuple(p.shape)} {p.dtype}; every piece must be the "
                f"output tensor's {tuple(a.shape)} {a.dtype}"
            )
        whole = np.stack(pieces)
    else:
        whole = np.empty((n,) + a.shape, a.dtype)  # every rank knows the list's shape from its output
    w = _backend(tensor, ranks).broadcast(whole, src=src, async_op=async_op)
    return _finish(w, lambda r: _into(a, r[me], "scatter"), async_op)


def all_to_all(output_list: Sequence, input_list: Sequence, ranks: tuple, async_op: bool):
    n = len(ranks)
    ins = [_array(t, "all_to_all") for t in _count(input_list, n, "all_to_all", "input_tensor_list")]
    outs = [_array(t, "all_to_all") for t in _count(output_list, n, "all_to_all", "output_tensor_list")]
    w = _backend(input_list[0], ranks).all_to_all(ins, async_op=async_op)

    def write(pieces):
        for o, p in zip(outs, pieces):
            _into(o, p, "all_to_all")

    return _finish(w, write, async_op)


def _splits(sizes, rows: int, n: int, what: str, name: str) -> list[int]:
    if sizes is None or len(sizes) == 0:
        if rows % n:
            raise CommError(f"all_to_all_single: {what} has {rows} rows, which do not split evenly over {n} ranks")
        return [rows // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != rows:
        raise CommError(
            f"all_to_all_single: {name}={sizes} must be {n} non-negative row counts summing to {what}'s {rows} rows"
        )
    return sizes


def all_to_all_single(output, tensor, output_split_sizes, input_split_sizes, ranks: tuple, async_op: bool):
    a, out = _array(tensor, "all_to_all_single"), _array(output, "all_to_all_single")
    _same_dtype(a, out, "all_to_all_single")
    if a.ndim == 0 or out.ndim == 0 or a.shape[1:] != out.shape[1:]:
        raise CommError(
            f"all_to_all_single: input {tuple(a.shape)} and output {tuple(out.shape)} must be at least 1-d "
            "and agree beyond dim 0"
        )
    n = len(ranks)
    send = _splits(input_split_sizes, a.shape[0], n, "the input", "input_split_sizes")
    expect = _splits(output_split_sizes, out.shape[0], n, "the output", "output_split_sizes")
    bounds = np.cumsum([0] + send)
    pieces = [a[bounds[i] : bounds[i + 1]] for i in range(n)]
    w = _backend(tensor, ranks).all_to_all(pieces, async_op=async_op)

    def write(got):
        rows = [p.shape[0] for p in got]
        if rows != expect:
            raise CommError(f"all_to_all_single: received {rows} rows from the ranks, output_split_sizes says {expect}")
        out[...] = np.concatenate(got, axis=0).reshape(out.shape)

    return _finish(w, write, async_op)


def send(tensor, dst: int, tag: int, ranks: tuple, async_op: bool):
    w = _backend(tensor, ranks).send(_array(tensor, "send"), dst, tag, async_op=async_op)
    return w if async_op else None


def recv(tensor, src: int, tag: int, ranks: tuple, async_op: bool):
    w = _backend(tensor, ranks).recv(_array(tensor, "recv"), src, tag, async_op=async_op)
    return w if async_op else None


def barrier(ranks: tuple, async_op: bool):
    w = get_backend("cpu", ranks).barrier(async_op=async_op)
    return w if async_op else None
