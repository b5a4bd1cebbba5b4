"""The CPU caching allocator: statistics and switches (``flow.cpu.memory_stats`` and friends).

flow installs a NumPy memory handler (``csrc/allocator.cpp``, NEP 49) when its native kernels load:
requests of 64 KiB and more are rounded up to size buckets (powers of two in four sub-steps) and
freed blocks are kept per bucket for the next request of that size, so the pages of activation and
gradient buffers stay faulted in from one training step to the next instead of being unmapped by
``free`` and faulted in again. Smaller requests go to ``malloc``. Every ndarray created while it is
installed goes through it: eager kernels' outputs and the compiled graphs' arenas alike.

- ``FLOW_CPU_CACHING_ALLOCATOR=0`` in the environment: not installed.
- ``FLOW_CPU_CACHE_MB``: most megabytes kept cached (default: a quarter of RAM, at most 2048); beyond
  it the largest cached blocks are returned to the OS.
- It is installed only over NumPy's default handler, never over another library's.

NumPy keeps the current handler in a context variable: installing it (at load, or with
:func:`set_caching_allocator`) affects the calling thread's context; a thread started afterwards
begins with NumPy's default handler (call ``set_caching_allocator(True)`` in it to opt in). Each array
remembers the handler that allocated it, so a block from the cache always goes back to the cache,
whichever thread frees it and whether or not the handler is still installed.

Without flow's native extension there is no cache: :func:`memory_stats` is empty, the byte counters
are 0, :func:`empty_cache` does nothing and :func:`set_caching_allocator` raises ``RuntimeError``.
"""

from __future__ import annotations

import os
from typing import Any

from flow.errors import FlowError

__all__ = [
    "DEFAULT_CACHE_MB",
    "empty_cache",
    "install",
    "is_caching_allocator_enabled",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "set_caching_allocator",
    "set_per_process_cache_limit",
]

# Upper bound of the default cache limit: a ResNet-50 / GPT-2-small training step at batch 32 keeps
# well under this many megabytes of distinct activation buffers.
DEFAULT_CACHE_MB = 2048


def _native() -> Any:
    """flow._C with the handler installed (loading flow's kernels installs it), or None."""
    from flow.backends.cpu import native

    return native._C if native.HAVE_NATIVE else None


def _default_limit_bytes() -> int:
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX
        ram = 0
    cap = DEFAULT_CACHE_MB << 20
    return min(cap, ram // 4) if ram > 0 else cap


def _env_limit_bytes() -> int:
    raw = os.environ.get("FLOW_CPU_CACHE_MB")
    if raw is None or raw.strip() == "":
        return _default_limit_bytes()
    try:
        mb = float(raw)
    except ValueError:
        raise ValueError(f"FLOW_CPU_CACHE_MB must be a number of megabytes, got {raw!r}") from None
    if not mb >= 0:
        raise ValueError(f"FLOW_CPU_CACHE_MB must be >= 0, got {raw!r}")
    return int(mb * (1 << 20))


def install(c_module: Any) -> str | None:
    """Install the caching handler when flow's kernels load (called by flow.backends.cpu.native).

    Returns the name of the handler that was there, or ``None`` when ``FLOW_CPU_CACHING_ALLOCATOR=0``.
    Another library's handler is left in place (the cache then serves nothing)."""
    if os.environ.get("FLOW_CPU_CACHING_ALLOCATOR", "1").strip() == "0":
        c_module.alloc_set_caching(False)
        return None
    c_module.alloc_set_limit(_env_limit_bytes())
    c_module.alloc_set_caching(True)
    return c_module.alloc_install()


def memory_stats() -> dict[str, Any]:
    """Counters of the caching allocator, keyed like ``torch.cuda.memory_stats``.

    Byte counters cover the cached (>= 64 KiB) blocks only; small requests are counted in
    ``num_small_allocs`` and served by ``malloc``:

    - ``allocated_bytes.current`` / ``.peak``: blocks in use (bucket sizes);
    - ``requested_bytes.current`` / ``.peak``: what those blocks were asked for;
    - ``reserved_bytes.current`` / ``.peak``: in use + cached, all the cache holds from the OS;
    - ``cached_bytes.current``, ``cached_blocks.current``, ``cached_buckets.current``, ``active_blocks.current``;
    - ``num_allocs`` (= ``num_cache_hits`` + ``num_cache_misses``), ``num_frees``, ``num_releases``
      (blocks returned to the OS), ``num_alloc_retries`` (a failed map retried after emptying the cache),
      ``num_ooms``; ``limit_bytes``, ``min_block_bytes``, ``caching``.

    >>> a = np.empty(1 << 20, np.uint8)  # 1 MiB: a cache block
    >>> addr = a.ctypes.data
    >>> del a  # kept in its bucket, pages still faulted in
    >>> np.empty(1 << 20, np.uint8).ctypes.data == addr  # the next 1 MiB request gets it back
    True
    >>> s = flow.cpu.memory_stats(); s["num_allocs"] == s["num_cache_hits"] + s["num_cache_misses"]
    True
    """
    c = _native()
    if c is None:
        return {}
    return dict(sorted(c.alloc_stats().items()))


def memory_allocated() -> int:
    """Bytes of cached-allocator blocks in use (``allocated_bytes.current``)."""
    return int(memory_stats().get("allocated_bytes.current", 0))


def max_memory_allocated() -> int:
    """Peak of :func:`memory_allocated` since start or :func:`reset_peak_memory_stats`."""
    return int(memory_stats().get("allocated_bytes.peak", 0))


def memory_reserved() -> int:
    """Bytes the cache holds from the OS, in use or cached (``reserved_bytes.current``)."""
    return int(memory_stats().get("reserved_bytes.current", 0))


def max_memory_reserved() -> int:
    """Peak of :func:`memory_reserved` since start or :func:`reset_peak_memory_stats`."""
    return int(memory_stats().get("reserved_bytes.peak", 0))


def empty_cache() -> int:
    """Return every cached (unused) block to the OS; returns the bytes released. Blocks in use stay."""
    c = _native()
    return 0 if c is None else int(c.alloc_empty_cache())


def reset_peak_memory_stats() -> None:
    """Set the ``.peak`` counters to the current values (``torch.cuda.reset_peak_memory_stats``)."""
    c = _native()
    if c is not None:
        c.alloc_reset_peaks()


def set_per_process_cache_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` cached (unused) bytes; releases the largest cached blocks now if above."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"set_per_process_cache_limit: nbytes must be an int, got {type(nbytes).__name__}")
    if nbytes < 0:
        raise ValueError(f"set_per_process_cache_limit: nbytes must be >= 0, got {nbytes}")
    c = _native()
    if c is None:
        raise FlowError("set_per_process_cache_limit: flow's native extension (flow._C) is not available")
    c.alloc_set_limit(nbytes)


def is_caching_allocator_enabled() -> bool:
    """Whether freed blocks are cached and the handler is installed in the calling thread's context."""
    c = _native()
    return c is not None and bool(c.alloc_stats()["caching"]) and c.alloc_handler_name() == "flow_caching_allocator"


def set_caching_allocator(enabled: bool) -> None:
    """Switch the caching allocator on or off (in the calling thread's context, see the module docstring).

    Off: NumPy's default handler is put back, the cache is emptied, and blocks still in use are
    returned to the OS when their arrays are freed. On: the handler is installed again; a
    ``RuntimeError`` is raised if another library's handler is installed."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_caching_allocator: enabled must be a bool, got {type(enabled).__name__}")
    c = _native()
    if c is None:
        raise FlowError("set_caching_allocator: flow's native extension (flow._C) is not available")
    if enabled:
        found = c.alloc_install()
        if found not in ("default_allocator", "flow_caching_allocator"):
            raise FlowError(f"set_caching_allocator: NumPy's memory handler is {found!r} (not NumPy's default)")
        c.alloc_set_caching(True)
    else:
        c.alloc_uninstall()
        c.alloc_set_caching(False)
