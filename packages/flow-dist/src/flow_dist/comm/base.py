"""The communication interface: :class:`Backend` (collectives over a group of ranks) and
:class:`Work` (one in flight). See :mod:`flow_dist.comm.backend` for which backend serves a device."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["Backend", "Work", "REDUCE_OPS"]

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
