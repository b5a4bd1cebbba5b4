"""Device types: how a kind of device stores arrays and moves them to and from the host."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class DeviceType:
    """Everything the core needs to know about a kind of device.

    ``xp`` is the device's array module (NumPy's API); generic kernels are built
    from it. ``kernel_fallback``, when set, builds a kernel for any op that has
    no registered kernel on this device (a shape-only device uses the op's
    meta rule this way). ``kernel_adapter(op, dtype, kernel)``, when set, is asked once per
    resolution for a dtype that no kernel is registered for exactly (the kernel found serves any
    dtype) and returns the kernel to use: the CPU runs float16 / bfloat16 through its float32
    kernels this way (:mod:`flow.backends.cpu.lowp`).
    """

    name: str
    xp: Any
    from_host: Callable[[np.ndarray, int | None], Any]
    to_host: Callable[[Any], np.ndarray]
    synchronize: Callable[[int | None], None] = lambda index=None: None
    allocate: Callable[..., Any] | None = None
    is_available: Callable[[], bool] = lambda: True
    device_count: Callable[[], int] = lambda: 1
    use_generic_kernels: bool = True
    kernel_fallback: Callable | None = None
    kernel_adapter: Callable | None = None
    array_types: tuple = ()
    plugin: str = ""
    extra: dict = field(default_factory=dict)

    def empty(self, shape, np_dtype, index=None):
        if self.allocate is not None:
            return self.allocate(shape, np_dtype, index)
        return self.xp.empty(shape, dtype=np_dtype)


def _cpu_from_host(a, index=None):
    return a


def _cpu_to_host(a):
    return a


CPU_DEVICE_TYPE = DeviceType(
    name="cpu",
    xp=np,
    from_host=_cpu_from_host,
    to_host=_cpu_to_host,
    array_types=(np.ndarray,),
)
