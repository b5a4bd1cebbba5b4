"""Tensor methods that make a new tensor like this one: ``new_zeros``, ``new_ones``, ``new_full``,
``new_empty``, ``new_tensor``, as in PyTorch.

The new tensor takes this tensor's dtype and device unless ``dtype=``/``device=`` are given; nothing else
(shape, values, autograd history) carries over.
"""

from __future__ import annotations

import warnings


def _dtype_device(self, dtype, device) -> tuple:
    return (self.dtype if dtype is None else dtype), (self.device if device is None else device)


def _need_size(op: str, size: tuple) -> None:
    if not size:
        raise TypeError(f"{op}() missing the required argument 'size' (ints or a tuple of ints)")


class NewTensorMethods:
    __slots__ = ()

    def new_zeros(self, *size, dtype=None, device=None, requires_grad: bool = False):
        """A tensor of zeros of ``size`` (ints or one tuple), in this tensor's dtype and device by default.

        >>> flow.ones(2, dtype=flow.float64).new_zeros(3, 4).dtype
        flow.float64
        """
        from flow._creation import zeros

        _need_size("new_zeros", size)
        dt, dev = _dtype_device(self, dtype, device)
        return zeros(*size, dtype=dt, device=dev, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad: bool = False):
        """A tensor of ones of ``size``, in this tensor's dtype and device by default."""
        from flow._creation import ones

        _need_size("new_ones", size)
        dt, dev = _dtype_device(self, dtype, device)
        return ones(*size, dtype=dt, device=dev, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad: bool = False):
        """An uninitialised tensor of ``size``, in this tensor's dtype and device by default."""
        from flow._creation import empty

        _need_size("new_empty", size)
        dt, dev = _dtype_device(self, dtype, device)
        return empty(*size, dtype=dt, device=dev, requires_grad=requires_grad)

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad: bool = False):
        """A tensor of ``size`` (a tuple or list of ints) filled with ``fill_value``, in this tensor's dtype
        (not one inferred from ``fill_value``) and device by default.

        >>> flow.zeros(2).new_full((2, 2), 7).dtype
        flow.float32
        """
        from flow._creation import full

        if not isinstance(size, (tuple, list)):
            raise TypeError(f"new_full(): size must be a tuple or list of ints, got {type(size).__name__}")
        dt, dev = _dtype_device(self, dtype, device)
        return full(tuple(size), fill_value, dtype=dt, device=dev, requires_grad=requires_grad)

    def new_tensor(self, data, *, dtype=None, device=None, requires_grad: bool = False):
        """A new tensor holding a copy of ``data``, in this tensor's dtype (``data``'s own is not inferred)
        and device by default; the copy is cut from any autograd history ``data`` has.

        >>> flow.zeros(1, dtype=flow.int32).new_tensor([1.7, 2.2])
        tensor([1, 2], dtype=flow.int32)
        """
        from flow._creation import tensor
        from flow._tensor import Tensor

        if isinstance(data, Tensor):
            warnings.warn(
                "new_tensor: to copy a tensor, data.detach().clone() is the recommended way",
                UserWarning,
                stacklevel=2,
            )
        dt, dev = _dtype_device(self, dtype, device)
        return tensor(data, dtype=dt, device=dev, requires_grad=requires_grad)
