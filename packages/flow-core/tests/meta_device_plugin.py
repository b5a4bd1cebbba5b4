"""A second device type, registered by the tests as a plugin: ``meta``, which holds shapes only.

It proves that a device can be added from outside the core with nothing but the hooks:
its arrays are :class:`MetaArray` (shape and dtype, no data), it has no kernels at all, and
its ``kernel_fallback`` answers every op by running the op's meta rule. So every op,
autograd included, runs on it without a GPU, and opcheck compares the meta rule with the
output shapes on a second device.

The tests register it with ``flow.plugins.register(meta_device_plugin, name=...)`` from a
fixture in ``conftest.py`` and unregister it afterwards.
"""

from __future__ import annotations

import numpy as np

from flow._dtype import NP_TO_DTYPE
from flow.errors import FlowError
from flow.ops.meta import TensorMeta
from flow.plugins import hookimpl
from flow.registry import DeviceType

NAME = "meta"


class MetaArray:
    """The array of a shape-only device: a shape and a NumPy dtype, no data."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __setitem__(self, key, value) -> None:
        pass  # in-place writes (copy_, fill_, add_) have no data to change

    def __repr__(self) -> str:
        return f"MetaArray(shape={self.shape}, dtype={self.dtype})"


class _NoArrayModule:
    """The meta device has no array module: anything asking for one learns why."""

    __name__ = "meta_xp"

    def __getattr__(self, name: str):
        raise FlowError(f"the '{NAME}' device holds shapes only and has no array module (asked for xp.{name})")


def _device():
    from flow._device import device

    return device(NAME)


def _as_meta(a):
    if isinstance(a, MetaArray):
        return TensorMeta(a.shape, NP_TO_DTYPE[a.dtype], _device())
    if a.__class__ is list or a.__class__ is tuple:
        return type(a)(_as_meta(x) for x in a)
    if isinstance(a, np.generic):  # a scalar operand; NumPy 2 scalars carry .shape/.dtype/.device ("cpu")
        return a.item()
    return a


def _to_array(m) -> MetaArray:
    return MetaArray(m.shape, m.dtype.np)


def kernel_fallback(op):
    """The kernel of ``op`` on this device: its meta rule, giving shape-only outputs."""

    def kernel(*arrays, **attrs):
        out = op.meta(*[_as_meta(a) for a in arrays], **attrs)
        if isinstance(out, (tuple, list)):
            return tuple(_to_array(m) for m in out)
        return _to_array(out)

    kernel.__name__ = f"meta_{op.name}"
    return kernel


def from_host(a, index=None) -> MetaArray:
    a = np.asarray(a)
    return MetaArray(a.shape, a.dtype)


def to_host(a):
    raise FlowError(
        f"tensors on the '{NAME}' device hold shapes only, no data: there are no values to copy to the host "
        f"(shape {a.shape}, dtype {a.dtype})"
    )


def allocate(shape, np_dtype, index=None) -> MetaArray:
    return MetaArray(shape, np_dtype)


META_DEVICE_TYPE = DeviceType(
    name=NAME,
    xp=_NoArrayModule(),
    from_host=from_host,
    to_host=to_host,
    allocate=allocate,
    use_generic_kernels=False,
    kernel_fallback=kernel_fallback,
    array_types=(MetaArray,),
    extra={"shape_only": True},
)


@hookimpl
def flow_register_device_types(registry) -> None:
    registry.register_device_type(META_DEVICE_TYPE)
