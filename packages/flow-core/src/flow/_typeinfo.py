"""Dtype and tensor queries of PyTorch's top level: ``flow.finfo``, ``flow.iinfo``, ``flow.is_complex``,
``flow.is_floating_point``, ``flow.is_nonzero``, ``flow.get_device``.

>>> flow.finfo(flow.float16).eps
0.0009765625
>>> flow.iinfo(flow.int8).max
127
"""

from __future__ import annotations

import builtins

import ml_dtypes
import numpy as np

from flow import _dtype as D

__all__ = ["finfo", "iinfo", "is_complex", "is_floating_point", "is_nonzero", "get_device"]


class finfo:
    """Numerical properties of a floating-point dtype (``flow.finfo(flow.float16).max``), as
    ``torch.finfo``: ``bits``, ``eps``, ``max``, ``min``, ``tiny`` (= ``smallest_normal``),
    ``resolution`` (``10 ** -precision``) and ``dtype`` (the dtype's name). ``flow.finfo()`` describes
    the default dtype."""

    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")

    def __init__(self, type: D.dtype | None = None) -> None:  # noqa: A002 - PyTorch's argument name
        dt = D.get_default_dtype() if type is None else _dtype_arg("finfo", type)
        if not dt.is_floating_point:
            raise TypeError(f"flow.finfo() requires a floating point dtype, got flow.{dt.name}; use flow.iinfo")
        # NumPy knows IEEE half/single/double; bfloat16 comes from ml_dtypes (NumPy's finfo does not know it)
        info = ml_dtypes.finfo(dt.np) if dt is D.bfloat16 else np.finfo(dt.np)
        self.bits = builtins.int(info.bits)
        self.eps = builtins.float(info.eps)
        self.max = builtins.float(info.max)
        self.min = builtins.float(info.min)
        self.tiny = builtins.float(info.smallest_normal)
        self.smallest_normal = self.tiny
        self.resolution = builtins.float(10.0 ** -builtins.int(info.precision))
        self.dtype = dt.name

    def __eq__(self, other: object) -> builtins.bool:
        return isinstance(other, finfo) and other.dtype == self.dtype

    def __hash__(self) -> builtins.int:
        return hash(("finfo", self.dtype))

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
            f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})"
        )


class iinfo:
    """Numerical properties of an integer dtype (``flow.iinfo(flow.int32).max``), as ``torch.iinfo``:
    ``bits``, ``max``, ``min`` and ``dtype`` (the dtype's name)."""

    __slots__ = ("bits", "max", "min", "dtype")

    def __init__(self, type: D.dtype) -> None:  # noqa: A002 - PyTorch's argument name
        dt = _dtype_arg("iinfo", type)
        if dt is D.bool:
            raise TypeError("flow.bool is not supported by flow.iinfo")
        if dt.is_floating_point:
            raise TypeError(f"flow.iinfo() requires an integer dtype, got flow.{dt.name}; use flow.finfo")
        info = np.iinfo(dt.np)
        self.bits = builtins.int(info.bits)
        self.max = builtins.int(info.max)
        self.min = builtins.int(info.min)
        self.dtype = dt.name

    def __eq__(self, other: object) -> builtins.bool:
        return isinstance(other, iinfo) and other.dtype == self.dtype

    def __hash__(self) -> builtins.int:
        return hash(("iinfo", self.dtype))

    def __repr__(self) -> str:
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


def _dtype_arg(where: str, value: object) -> D.dtype:
    if isinstance(value, D.dtype):
        return value
    try:
        return D.as_dtype(value)
    except (TypeError, KeyError):
        raise TypeError(f"flow.{where}(): expected a flow dtype, got {value!r}") from None


def _tensor_arg(where: str, input: object):
    from flow._tensor import Tensor

    if not isinstance(input, Tensor):
        raise TypeError(f"flow.{where}(): argument 'input' must be a Tensor, not {type(input).__name__}")
    return input


def is_complex(input) -> builtins.bool:
    """Whether ``input``'s dtype is complex (``flow.complex64`` / ``complex128``, see :mod:`flow._complex`)."""
    return _tensor_arg("is_complex", input).dtype.is_complex


def is_floating_point(input) -> builtins.bool:
    """Whether ``input``'s dtype is a floating-point one."""
    return _tensor_arg("is_floating_point", input).dtype.is_floating_point


def is_nonzero(input) -> builtins.bool:
    """Whether the single value of the one-element tensor ``input`` is nonzero (``bool(input)``)."""
    t = _tensor_arg("is_nonzero", input)
    n = t.numel()
    if n != 1:
        what = "no values" if n == 0 else "more than one value"
        raise RuntimeError(f"flow.is_nonzero(): Boolean value of Tensor with {what} is ambiguous")
    return builtins.bool(t.item())


def get_device(input) -> builtins.int:
    """The index of the device ``input`` is on: -1 for the CPU (PyTorch's ``torch.get_device``)."""
    dev = _tensor_arg("get_device", input).device
    return -1 if dev.type == "cpu" else (dev.index or 0)
