"""torch.distributed's collectives of picklable Python objects: ``all_gather_object`` and
``broadcast_object_list``. Objects travel as their pickles in uint8 tensors (sizes first, then the
bytes, padded to the longest), so, as in torch, only use them with data you trust."""

from __future__ import annotations

import pickle

import numpy as np

from flow.distributed._collectives import _member, _peer, all_gather, broadcast
from flow.distributed._types import ProcessGroup

__all__ = ["all_gather_object", "broadcast_object_list"]


def _tensor(a: np.ndarray):
    import flow

    return flow.from_numpy(a)


def all_gather_object(object_list: list, obj: object, group: ProcessGroup | None = None) -> None:
    """Every rank's ``obj`` into ``object_list`` (which must have one slot per rank of the group).

    >>> out = [None] * dist.get_world_size()
    >>> dist.all_gather_object(out, {"rank": dist.get_rank()})
    """
    pg = _member(group, "all_gather_object")
    if pg is None:
        return
    if not isinstance(object_list, list) or len(object_list) != pg.size():
        got = len(object_list) if isinstance(object_list, list) else type(object_list).__name__
        raise ValueError(f"all_gather_object: object_list must be a list of {pg.size()} slots, got {got}")
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = [_tensor(np.zeros(1, np.int64)) for _ in range(pg.size())]
    all_gather(sizes, _tensor(np.array([data.size], np.int64)), group=pg)
    counts = [int(s.numpy()[0]) for s in sizes]
    longest = max(counts)
    mine = np.zeros(longest, np.uint8)
    mine[: data.size] = data
    pieces = [_tensor(np.zeros(longest, np.uint8)) for _ in range(pg.size())]
    all_gather(pieces, _tensor(mine), group=pg)
    for i, (p, n) in enumerate(zip(pieces, counts)):
        object_list[i] = pickle.loads(p.numpy()[:n].tobytes())


def broadcast_object_list(
    object_list: list,
    src: int | None = None,
    group: ProcessGroup | None = None,
    device: object = None,
    group_src: int | None = None,
) -> None:
    """The objects of ``object_list`` on rank ``src`` into ``object_list`` of every rank of the group
    (in place; each rank's list must have as many slots)."""
    pg = _member(group, "broadcast_object_list")
    if pg is None:
        return
    if not isinstance(object_list, list):
        raise TypeError(f"broadcast_object_list: object_list must be a list, got {type(object_list).__name__}")
    i = _peer(pg, src, group_src, "src", "broadcast_object_list")
    n = len(object_list)
    if pg.rank() == i:
        blobs = [pickle.dumps(o) for o in object_list]
        sizes = np.array([len(b) for b in blobs], np.int64)
    else:
        sizes = np.zeros(n, np.int64)
    size_t = _tensor(sizes)
    broadcast(size_t, group_src=i, group=pg)
    sizes = size_t.numpy()
    data = np.zeros(int(sizes.sum()), np.uint8)
    if pg.rank() == i:
        data[:] = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    data_t = _tensor(data)
    broadcast(data_t, group_src=i, group=pg)
    raw = data_t.numpy().tobytes()
    offset = 0
    for k, size in enumerate(sizes.tolist()):
        object_list[k] = pickle.loads(raw[offset : offset + size])
        offset += size
