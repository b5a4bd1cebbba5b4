"""The backend of a group of one process: every collective is a copy, no MPI needed."""

from __future__ import annotations

import numpy as np

from flow_dist.comm.base import REDUCE_OPS, Backend, Work
from flow_dist.comm.errors import CommError

__all__ = ["LocalBackend"]


def _done(value, async_op: bool):
    return Work(lambda: value, lambda: True) if async_op else value


class LocalBackend(Backend):
    def __init__(self, ranks: tuple) -> None:
        self.ranks = tuple(ranks)
        self.rank, self.size = 0, 1

    def _peer(self, r: int, what: str) -> None:
        if r != 0:
            raise CommError(f"{what}: rank {r} is not in a group of 1")

    def all_reduce(self, a, op="sum", async_op=False, out=None):
        if op not in REDUCE_OPS:
            raise CommError(f"all_reduce: unknown op {op!r}; expected one of {REDUCE_OPS}")
        return _done(np.array(a, copy=True), async_op)

    def all_gather(self, a, async_op=False):
        return _done([np.array(a, copy=True)], async_op)

    def reduce_scatter(self, pieces, op="sum", async_op=False):
        if len(pieces) != 1:
            raise CommError(f"reduce_scatter: {len(pieces)} pieces for a group of 1")
        return _done(np.array(pieces[0], copy=True), async_op)

    def broadcast(self, a, src=0, async_op=False):
        self._peer(src, "broadcast")
        return _done(np.array(a, copy=True), async_op)

    def reduce(self, a, dst=0, op="sum", async_op=False):
        self._peer(dst, "reduce")
        return _done(np.array(a, copy=True), async_op)

    def all_to_all(self, pieces, async_op=False):
        if len(pieces) != 1:
            raise CommError(f"all_to_all: {len(pieces)} pieces for a group of 1")
        return _done([np.array(pieces[0], copy=True)], async_op)

    def send(self, a, dst, tag=0, async_op=False):
        raise CommError("send: a group of 1 has no other rank")

    def recv(self, out, src, tag=0, async_op=False):
        raise CommError("recv: a group of 1 has no other rank")

    def barrier(self, async_op=False):
        return _done(None, async_op)
