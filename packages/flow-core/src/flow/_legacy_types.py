"""PyTorch's legacy tensor types: ``flow.FloatTensor``, ``flow.LongTensor``, ... and ``Tensor.type()``.

Each type names a dtype on the CPU, as in PyTorch:

- calling it makes a tensor of that dtype: ``flow.FloatTensor(2, 3)`` (uninitialised, of that shape),
  ``flow.FloatTensor([1, 2])`` (from data), ``flow.FloatTensor()`` (empty);
- ``isinstance(t, flow.FloatTensor)`` is True for a float32 CPU tensor (``type(t)`` stays ``flow.Tensor``);
- ``t.type()`` names the type (``'flow.FloatTensor'``) and ``t.type(flow.LongTensor)``,
  ``t.type('flow.LongTensor')`` or ``t.type('torch.LongTensor')`` converts.

>>> flow.LongTensor([1, 2]).dtype
flow.int64
>>> isinstance(flow.zeros(2), flow.FloatTensor)
True
"""

from __future__ import annotations

from typing import Any

from flow import _dtype as D

__all__ = [
    "FloatTensor",
    "DoubleTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "LongTensor",
    "IntTensor",
    "ShortTensor",
    "CharTensor",
    "ByteTensor",
    "BoolTensor",
]


class _LegacyTensorType(type):
    """The metaclass of the legacy types: calls construct tensors, ``isinstance`` checks the dtype."""

    dtype: D.dtype

    def __instancecheck__(cls, obj: Any) -> bool:
        from flow._tensor import Tensor

        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device.type == "cpu"

    def __call__(cls, *args: Any, device: Any = None) -> Any:
        from flow._device import device as _device
        from flow._tensor import Size, Tensor

        if device is not None and _device(device).type != "cpu":
            raise RuntimeError(f"flow.{cls.__name__}: legacy constructor expects device type cpu, got {device}")
        if len(args) == 1 and isinstance(args[0], Tensor):
            src = args[0]
            if src.dtype is not cls.dtype:
                raise TypeError(f"flow.{cls.__name__}: expected a {cls.dtype} tensor, got {src.dtype}")
            return src.detach()  # an alias of the same data, as PyTorch's legacy constructor
        if len(args) == 1 and isinstance(args[0], Size):
            args = tuple(args[0])
        if len(args) == 1 and isinstance(args[0], (str, bytes)):
            raise TypeError(f"flow.{cls.__name__}: invalid data type '{type(args[0]).__name__}'")
        if not args:
            args = (0,)
        return Tensor(*args, dtype=cls.dtype)

    def __repr__(cls) -> str:
        return f"<class 'flow.{cls.__name__}'>"


def _make(name: str, dt: D.dtype) -> _LegacyTensorType:
    return _LegacyTensorType(name, (), {"dtype": dt, "__module__": "flow", "__doc__": f"Tensors of dtype {dt}."})


FloatTensor = _make("FloatTensor", D.float32)
DoubleTensor = _make("DoubleTensor", D.float64)
HalfTensor = _make("HalfTensor", D.float16)
BFloat16Tensor = _make("BFloat16Tensor", D.bfloat16)
LongTensor = _make("LongTensor", D.int64)
IntTensor = _make("IntTensor", D.int32)
ShortTensor = _make("ShortTensor", D.int16)
CharTensor = _make("CharTensor", D.int8)
ByteTensor = _make("ByteTensor", D.uint8)
BoolTensor = _make("BoolTensor", D.bool)

_BY_DTYPE = {
    t.dtype: t
    for t in (
        FloatTensor,
        DoubleTensor,
        HalfTensor,
        BFloat16Tensor,
        LongTensor,
        IntTensor,
        ShortTensor,
        CharTensor,
        ByteTensor,
        BoolTensor,
    )
}
_BY_NAME = {t.__name__: t for t in _BY_DTYPE.values()}


def type_name(t: Any) -> str:
    """``t.type()``: ``'flow.FloatTensor'``, ``'flow.cuda.LongTensor'``, ..."""
    where = "" if t.device.type == "cpu" else f"{t.device.type}."
    return f"flow.{where}{_BY_DTYPE[t.dtype].__name__}"


def convert(t: Any, dst: Any, non_blocking: bool = False) -> Any:
    """``t.type(dst)``: ``dst`` a legacy type, its name (``'flow.LongTensor'``, ``'torch.cuda.FloatTensor'``)
    or a dtype; ``t`` itself when it already has that type."""
    if isinstance(dst, _LegacyTensorType):
        return t.to(dtype=dst.dtype, device="cpu", non_blocking=non_blocking)
    if isinstance(dst, str):
        parts = dst.split(".")
        if len(parts) in (2, 3) and parts[0] in ("flow", "torch") and parts[-1] in _BY_NAME:
            if len(parts) == 3 and parts[1] != "cuda":
                raise ValueError(f"invalid type: {dst!r}")
            dev = "cuda" if len(parts) == 3 else "cpu"
            out = t.to(dtype=_BY_NAME[parts[-1]].dtype, non_blocking=non_blocking)
            return out if out.device.type == dev else out.to(dev)
        try:
            dt = D.as_dtype(dst)
        except (TypeError, KeyError):
            raise ValueError(f"invalid type: {dst!r}") from None
        return t.to(dtype=dt, non_blocking=non_blocking)
    if isinstance(dst, D.dtype):
        return t.to(dtype=dst, non_blocking=non_blocking)
    raise TypeError(f"type(): expected a legacy tensor type, its name or a dtype, got {type(dst).__name__} {dst!r}")
