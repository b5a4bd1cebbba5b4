"""Tensor methods for conversions: to, dtype shorthands, numpy, item, tolist, clone."""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow._device import device as _device
from flow.errors import AutogradError


def _no_data_while_tracing(t, what: str) -> None:
    """Inside ``nn.Graph.build`` (or a function being compiled) tensors are symbolic: say so, with the
    graph-mode way to get the values, before any eager advice (``.detach().numpy()``) that would fail too."""
    d = t._data
    if d.__class__ is not np.ndarray:
        from flow.graph.symbolic import SymbolicArray

        if d.__class__ is SymbolicArray:
            raise d._error(
                what,
                hint="return the tensor from build() and call .numpy() on what the graph call "
                "returns, or compute this part eagerly outside the graph",
            )


class ConversionMethods:
    __slots__ = ()

    def to(self, *args, dtype=None, device=None, non_blocking: bool = False, copy: bool = False):
        """Convert dtype and/or device: ``t.to(flow.float16)``, ``t.to("cuda")``, ``t.to(other)``."""
        from flow._tensor import Tensor
        from flow.ops.conversion import to_dtype
        from flow.ops.device_copy import to_device

        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, D.dtype) or (not isinstance(a, (str, _device)) and a is not None and _maybe_dtype(a)):
                dtype = a
            elif isinstance(a, (str, _device)):
                if isinstance(a, str) and a.replace("torch.", "").replace("flow.", "") in D._BY_NAME:
                    dtype = a
                else:
                    device = a
            else:
                raise TypeError(f"to(): unexpected argument {a!r}")
        out = self
        if device is not None:
            dev = _device(device) if not isinstance(device, _device) else device
            if dev is not out.device:
                out = to_device(out, dev)
        if dtype is not None:
            out = to_dtype(out, D.as_dtype(dtype))
        if copy and out is self:
            out = self.clone()
        return out

    def type(self, dtype=None):
        if dtype is None:
            return f"flow.{self.dtype.name}"
        return self.to(dtype)

    def type_as(self, other):
        """This tensor in ``other``'s dtype (itself when it has it already); only the dtype of
        ``other`` is read. Recorded as the ``cast_like`` op, so a traced graph keeps "in the dtype of
        ``other``" when a pass changes ``other``'s dtype (AMP)."""
        from flow.ops.conversion import cast_like

        return cast_like(self, other)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None, non_blocking: bool = False):
        return self.to("cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device))

    def float(self):
        return self.to(D.float32)

    def double(self):
        return self.to(D.float64)

    def half(self):
        return self.to(D.float16)

    def bfloat16(self):
        return self.to(D.bfloat16)

    def long(self):
        return self.to(D.int64)

    def int(self):
        return self.to(D.int32)

    def short(self):
        return self.to(D.int16)

    def char(self):
        return self.to(D.int8)

    def byte(self):
        return self.to(D.uint8)

    def bool(self):
        return self.to(D.bool)

    def numpy(self, *, force: bool = False):
        """The data as a NumPy array (shares memory for CPU tensors, as in PyTorch)."""
        _no_data_while_tracing(self, "numpy()")
        if self._requires_grad and not force:
            raise AutogradError("Can't call numpy() on a tensor that requires grad; use tensor.detach().numpy()")
        return self.numpy_host()

    def item(self):
        """The single value of a one-element tensor as a Python number."""
        if self._data.size != 1:
            raise ValueError(
                f"item(): only one-element tensors can be converted to Python scalars, got {self._data.size} elements"
            )
        return (
            self.numpy_host().reshape(()).item()
            if self.dtype not in (D.bfloat16,)
            else float(self.numpy_host().reshape(()).astype("float32"))
        )

    def tolist(self):
        _no_data_while_tracing(self, "tolist()")
        a = self.numpy_host()
        if self.dtype is D.bfloat16:
            a = a.astype("float32")
        return a.tolist()

    def clone(self, *, memory_format=None):
        from flow.ops.conversion import clone

        return clone(self)

    def contiguous(self, memory_format=None):
        from flow.ops.conversion import contiguous

        return contiguous(self)

    def copy_(self, src, non_blocking: bool = False):
        """Copy ``src`` (broadcast, cast, moved to this device) into this tensor in place."""
        from flow._tensor import Tensor
        from flow.ops.inplace import apply_inplace

        if not isinstance(src, Tensor):
            from flow._creation import tensor

            src = tensor(src, dtype=self.dtype, device=self.device)
        src = src.to(self.device) if src.device is not self.device else src
        if src.dtype is not self.dtype:
            src = src.to(self.dtype)
        if tuple(src.shape) != tuple(self.shape):
            src = src.expand(*self.shape)
        from flow.ops.conversion import clone

        return apply_inplace(
            self, clone(src) if src._requires_grad else src.detach() if not src._requires_grad else src, "copy_"
        )


def _maybe_dtype(a) -> bool:
    try:
        D.as_dtype(a)
        return True
    except TypeError:
        return False
