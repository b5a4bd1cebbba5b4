"""``flow.accelerator``: PyTorch's ``torch.accelerator``, the device-neutral view of the current accelerator.

The accelerator is CUDA when the flow-cuda package provides it (see :mod:`flow.cuda`); on a CPU-only
machine there is none: ``is_available()`` is False, ``current_accelerator()`` None, ``device_count()`` 0,
and what needs a device raises :class:`AcceleratorNotAvailableError` (a RuntimeError, as in PyTorch).

>>> flow.accelerator.current_accelerator() is None
True
"""

from __future__ import annotations

from typing import Any

from flow._device import device
from flow.errors import FlowError

__all__ = [
    "AcceleratorNotAvailableError",
    "is_available",
    "current_accelerator",
    "device_count",
    "current_device_index",
    "current_device_idx",
    "set_device_index",
    "set_device_idx",
    "synchronize",
    "empty_cache",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
]


class AcceleratorNotAvailableError(FlowError):
    """An accelerator function that needs a device was called where there is none."""


def _cuda() -> Any:
    import flow.cuda

    return flow.cuda if flow.cuda.is_available() else None


def _none(what: str) -> AcceleratorNotAvailableError:
    return AcceleratorNotAvailableError(
        f"flow.accelerator.{what}: cannot access an accelerator device when none is available "
        "(the cuda device comes from the flow-cuda package)"
    )


def is_available() -> bool:
    """Whether an accelerator device can be used."""
    return _cuda() is not None


def current_accelerator(check_available: bool = False) -> device | None:
    """The accelerator's device type as a ``flow.device`` (``device("cuda")``), None on a CPU-only machine."""
    return device("cuda") if _cuda() is not None else None


def device_count() -> int:
    """Number of accelerator devices (0 on a CPU-only machine)."""
    cuda = _cuda()
    return cuda.device_count() if cuda is not None else 0


def current_device_index() -> int:
    """Index of the current accelerator device."""
    cuda = _cuda()
    if cuda is None:
        raise _none("current_device_index()")
    return cuda.current_device()


current_device_idx = current_device_index


def set_device_index(device: Any) -> None:
    """Make accelerator device ``device`` (an index or a device) the current one."""
    cuda = _cuda()
    if cuda is None:
        raise _none("set_device_index()")
    cuda.set_device(device)


set_device_idx = set_device_index


def synchronize(device: Any = None) -> None:
    """Wait for the work queued on an accelerator device."""
    cuda = _cuda()
    if cuda is None:
        raise _none("synchronize()")
    cuda.synchronize(device) if device is not None else cuda.synchronize()


def _memory(name: str):
    def fn(device_index: Any = None) -> int:
        cuda = _cuda()
        if cuda is None:
            raise _none(f"{name}()")
        return getattr(cuda, name)(device_index)

    fn.__name__ = name
    fn.__doc__ = f"The accelerator's ``{name}`` counter, in bytes."
    return fn


memory_allocated = _memory("memory_allocated")
max_memory_allocated = _memory("max_memory_allocated")
memory_reserved = _memory("memory_reserved")
max_memory_reserved = _memory("max_memory_reserved")


def empty_cache() -> None:
    """Release the accelerator's cached memory (an error without one, as in PyTorch)."""
    cuda = _cuda()
    if cuda is None:
        raise _none("empty_cache()")
    cuda.empty_cache()
