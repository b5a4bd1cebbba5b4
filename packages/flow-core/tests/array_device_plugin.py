"""A second device type with data, registered by the tests as a plugin: ``npdev``.

Its arrays are NumPy arrays, copied on every host transfer, and it has no kernels of its own:
every op runs there with the generic (NumPy-API) kernels, while the CPU runs the native ones
where flow-core has them. So the device conformance suite (``flow.testing.device_suite``)
compares two different kernel sets, forward and backward, without a GPU.
"""

from __future__ import annotations

import numpy as np

from flow.plugins import hookimpl
from flow.registry import DeviceType

NAME = "npdev"


def from_host(a, index=None) -> np.ndarray:
    return np.array(a, copy=True)


def to_host(a) -> np.ndarray:
    return np.array(a, copy=True)


NPDEV_DEVICE_TYPE = DeviceType(name=NAME, xp=np, from_host=from_host, to_host=to_host)


@hookimpl
def flow_register_device_types(registry) -> None:
    registry.register_device_type(NPDEV_DEVICE_TYPE)
