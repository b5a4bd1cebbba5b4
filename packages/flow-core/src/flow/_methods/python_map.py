"""``Tensor.apply_`` and ``map_``: run a Python callable on each element of a CPU tensor, in place, as in
PyTorch. They are slow by nature (one Python call per element) and have no gradient, so tensors that
require grad are refused.
"""

from __future__ import annotations

import numbers

import numpy as np

from flow.errors import AutogradError, OpError, OpTypeError


def _check_host(op: str, t, what: str) -> None:
    if t.device.type != "cpu" or t._data.__class__ is not np.ndarray:
        raise OpError(op, f"only works on CPU tensors, but {what} is on '{t.device}'")
    if t._requires_grad:
        raise AutogradError(f"Can't call {op}() on a tensor that requires grad; use tensor.detach().{op}() instead")


def _host_values(t, shape: tuple) -> list:
    a = np.broadcast_to(t._data, shape)
    if t.dtype.name == "bfloat16":
        a = a.astype(np.float32)  # hands the callable Python floats, as for every other floating dtype
    return a.reshape(-1).tolist()


def _store(self, op: str, results: list):
    """Write the callable's results into ``self`` (cast to its dtype) and bump the version counter."""
    for r in results:
        if isinstance(r, (numbers.Real, np.bool_)):
            continue
        raise OpTypeError(op, f"the callable must return a real number, got {type(r).__name__} {r!r}")
    try:
        out = np.array(results, dtype=self.dtype.np).reshape(self._data.shape)
    except OverflowError as e:
        raise OpError(op, f"a result does not fit in {self.dtype}: {e}") from None
    self._data[...] = out
    # PyTorch leaves the counter alone here; bumping it lets autograd catch a gradient that saved the old values
    self._version[0] += 1
    return self


class PythonMapMethods:
    __slots__ = ()

    def apply_(self, callable):
        """Replace each element ``x`` by ``callable(x)`` (CPU only; ``x`` is a Python number).

        >>> flow.tensor([1.0, 2.0]).apply_(lambda x: x * 10)
        tensor([10., 20.])
        """
        _check_host("apply_", self, "self")
        shape = tuple(self._data.shape)
        return _store(self, "apply_", [callable(x) for x in _host_values(self, shape)])

    def map_(self, tensor, callable):
        """Replace each element ``x`` by ``callable(x, y)``, ``y`` the matching element of ``tensor``
        (broadcast to this tensor's shape, same dtype; CPU only)."""
        from flow._tensor import Tensor

        _check_host("map_", self, "self")
        if not isinstance(tensor, Tensor):
            raise OpTypeError("map_", f"tensor must be a Tensor, got {type(tensor).__name__}")
        _check_host("map_", tensor, "tensor")
        if tensor.dtype is not self.dtype:
            raise OpTypeError("map_", f"expected tensor of dtype {self.dtype} like self, got {tensor.dtype}")
        shape = tuple(self._data.shape)
        try:
            np.broadcast_to(np.empty(tuple(tensor.shape), dtype=np.bool_), shape)
        except ValueError:
            raise OpError(
                "map_", f"tensor of shape {tuple(tensor.shape)} cannot be broadcast to self's shape {shape}"
            ) from None
        pairs = zip(_host_values(self, shape), _host_values(tensor, shape))
        return _store(self, "map_", [callable(x, y) for x, y in pairs])
