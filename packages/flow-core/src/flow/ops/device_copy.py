"""Moving tensors between devices, differentiably."""

from __future__ import annotations

from flow.autograd.function import Function


def _transfer(t, dev):
    from flow._tensor import Tensor
    from flow.registry import get_device_type

    if t.device is dev:
        return t
    src = get_device_type(t.device.type)
    dst = get_device_type(dev.type)
    host = src.to_host(t._data)
    return Tensor._make(dst.from_host(host, dev.index), t.dtype, dev)


class _ToDevice(Function):
    @staticmethod
    def forward(ctx, x, dev):
        ctx.src = x.device
        return _transfer(x, dev)

    @staticmethod
    def backward(ctx, g):
        return _ToDevice.apply(g, ctx.src), None


def to_device(x, dev):
    """A copy of ``x`` on ``dev``; gradients flow back to the source device."""
    if x.device is dev:
        return x
    return _ToDevice.apply(x, dev)
