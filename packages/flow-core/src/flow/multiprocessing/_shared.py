"""Tensor data in memory shared between processes: what ``Tensor.share_memory_()`` moves it into.

The data goes into an anonymous shared mapping (``mmap.mmap(-1, n)``, ``MAP_SHARED``): processes started
with ``fork`` (the default start method on Linux) inherit the mapping, so writes of any of them (an
optimizer step in a Hogwild worker) are seen by all. The mapping lives as long as an array using it.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["share_array", "is_shared_array"]


# NumPy 2 moved byte_bounds to numpy.lib.array_utils
_byte_bounds = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None) or np.byte_bounds


class _SharedBlock(mmap.mmap):
    """An anonymous shared mapping, of its own type so that :func:`is_shared_array` recognises it."""


def _owner(a: np.ndarray) -> object:
    # the object at the end of a view chain: the array that owns the memory, or the buffer (mmap, bytes)
    o: object = a
    while isinstance(o, np.ndarray) and o.base is not None:
        o = o.base
    return o


def is_shared_array(a: object) -> bool:
    """Whether ``a`` (a NumPy array) lives in memory shared by :func:`share_array`."""
    return isinstance(a, np.ndarray) and isinstance(_owner(a), _SharedBlock)


def share_array(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` in shared memory, with the same dtype, shape and strides (an array already in
    shared memory is returned as it is)."""
    if is_shared_array(a):
        return a
    if a.size == 0:
        nbytes, offset = 0, 0
    else:
        low, high = _byte_bounds(a)
        nbytes, offset = high - low, a.__array_interface__["data"][0] - low
    block = _SharedBlock(-1, max(nbytes, 1))  # mmap cannot map 0 bytes
    out = np.ndarray(a.shape, dtype=a.dtype, buffer=block, offset=offset, strides=a.strides)
    out[...] = a  # an element-wise copy keeps the layout (transposed, sliced, negative strides)
    out.flags.writeable = a.flags.writeable
    return out
