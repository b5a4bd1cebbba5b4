"""Thread counts of PyTorch's top level: ``flow.set_num_threads`` / ``get_num_threads`` (the OpenMP
threads of flow's native CPU kernels, :mod:`flow.backends.cpu.native`) and ``set_num_interop_threads``
/ ``get_num_interop_threads``.

flow runs ops of one thread one after another (there is no inter-op thread pool), so the inter-op
count is recorded and reported but changes nothing.
"""

from __future__ import annotations

import operator
import os

__all__ = ["set_num_threads", "get_num_threads", "set_num_interop_threads", "get_num_interop_threads"]

_INTEROP: list[int] = []  # the value set_num_interop_threads recorded, [] until then


def _positive(where: str, n: object) -> int:
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"{where} expects an int, but got {type(n).__name__}")
    n = operator.index(n)
    if n <= 0:
        raise ValueError(f"{where} expects a positive integer, got {n}")
    return n


def get_num_threads() -> int:
    """Number of threads flow's CPU kernels use (intra-op parallelism)."""
    from flow.backends.cpu import native

    return native.get_num_threads()


def set_num_threads(n: int) -> None:
    """Set the number of threads flow's CPU kernels use (intra-op parallelism)."""
    from flow.backends.cpu import native

    native.set_num_threads(_positive("set_num_threads", n))


def get_num_interop_threads() -> int:
    """Number of inter-op threads: what :func:`set_num_interop_threads` set, else the CPU count."""
    return _INTEROP[0] if _INTEROP else (os.cpu_count() or 1)


def set_num_interop_threads(n: int) -> None:
    """Record the number of inter-op threads (flow has no inter-op pool, so it changes nothing)."""
    n = _positive("set_num_interop_threads", n)
    _INTEROP[:] = [n]
