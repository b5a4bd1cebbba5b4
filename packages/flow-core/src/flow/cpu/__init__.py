"""``flow.cpu``: PyTorch's ``torch.cpu`` namespace, plus the CPU caching allocator's controls.

The device queries answer as ``torch.cpu`` does (one device, always available, nothing to wait for).
The memory functions report on and steer flow's caching allocator for NumPy arrays (see
:mod:`flow.cpu.memory`): ``memory_stats``, ``memory_allocated``, ``memory_reserved``, ``empty_cache``,
``reset_peak_memory_stats``, ``set_caching_allocator``.
"""

from __future__ import annotations

from flow.cpu.memory import (
    empty_cache,
    is_caching_allocator_enabled,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_peak_memory_stats,
    set_caching_allocator,
    set_per_process_cache_limit,
)

__all__ = [
    "current_device",
    "device_count",
    "empty_cache",
    "is_available",
    "is_caching_allocator_enabled",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "set_caching_allocator",
    "set_per_process_cache_limit",
    "synchronize",
]


def is_available() -> bool:
    """Always ``True``: there is always a CPU (``torch.cpu.is_available``)."""
    return True


def device_count() -> int:
    """``1``: flow, like PyTorch, treats all cores as one ``cpu`` device."""
    return 1


def current_device() -> str:
    """``"cpu"``, as ``torch.cpu.current_device()`` returns."""
    return "cpu"


def synchronize(device: object = None) -> None:
    """A no-op: CPU kernels finish before they return (``torch.cpu.synchronize``)."""
    del device
