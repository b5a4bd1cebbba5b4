"""Padding layers: Reflection, Replication, Constant and Zero padding in 1-d, 2-d and 3-d."""

from __future__ import annotations

import flow.nn.functional as F
from flow.nn.modules.module import Module

__all__ = [
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
]


def _pad_tuple(cls: str, padding, nd: int) -> tuple:
    """torch's layout: an int pads every side; else (left, right[, top, bottom[, front, back]])."""
    if isinstance(padding, bool):
        raise TypeError(f"{cls}: padding must be an int or a tuple of {2 * nd} ints, got {padding!r}")
    if isinstance(padding, int):
        return (padding,) * (2 * nd)
    if not isinstance(padding, (tuple, list)) or len(padding) != 2 * nd:
        raise ValueError(f"{cls}: padding must be an int or a tuple of {2 * nd} ints, got {padding!r}")
    if any(isinstance(p, bool) or not isinstance(p, int) for p in padding):
        raise TypeError(f"{cls}: padding must hold ints, got {padding!r}")
    return tuple(padding)


class _PadNd(Module):
    _nd = 1
    _mode = "constant"

    def __init__(self, padding) -> None:
        super().__init__()
        self.padding = _pad_tuple(type(self).__name__, padding, self._nd)

    def forward(self, input):
        if input.ndim not in (self._nd + 1, self._nd + 2):
            raise ValueError(
                f"{type(self).__name__}: expected a {self._nd + 1}-d or {self._nd + 2}-d input, "
                f"got shape {tuple(input.shape)}"
            )
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    """Pad the last dim by reflecting the input at its edges (without repeating the edge)."""

    _mode = "reflect"


class ReflectionPad2d(ReflectionPad1d):
    _nd = 2


class ReflectionPad3d(ReflectionPad1d):
    _nd = 3


class ReplicationPad1d(_PadNd):
    """Pad the last dim by repeating the edge values."""

    _mode = "replicate"


class ReplicationPad2d(ReplicationPad1d):
    _nd = 2


class ReplicationPad3d(ReplicationPad1d):
    _nd = 3


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        if input.ndim not in (self._nd + 1, self._nd + 2):
            raise ValueError(
                f"{type(self).__name__}: expected a {self._nd + 1}-d or {self._nd + 2}-d input, "
                f"got shape {tuple(input.shape)}"
            )
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pad the last dim with a constant ``value``."""


class ConstantPad2d(_ConstantPadNd):
    _nd = 2


class ConstantPad3d(_ConstantPadNd):
    _nd = 3


class ZeroPad1d(ConstantPad1d):
    """Pad the last dim with zeros."""

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ZeroPad1d):
    _nd = 2


class ZeroPad3d(ZeroPad1d):
    _nd = 3
