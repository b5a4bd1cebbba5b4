"""``flow.Tensor(...)``: the constructor's reading of its arguments (data, or a size)."""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow._creation import _alloc, _dev, _dt, _host_array, _size, _to_device


def tensor_init(self, args, dtype, device, requires_grad) -> None:
    from flow._tensor import Tensor

    dev = _dev(device)
    if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
        dt = D.as_dtype(dtype) if dtype is not None else None
        a, dt = _host_array(args[0], dt)
        if dtype is None and not isinstance(args[0], Tensor) and dt is not D._default_dtype:
            # flow.Tensor(data) has the default dtype, whatever the data's own (a list of ints, a
            # float64 NumPy array), as torch.Tensor; only a Tensor argument keeps its dtype
            dt = D._default_dtype
            a = a.astype(dt.np)
    else:
        dt = _dt(dtype)
        a = _alloc("Tensor", np.zeros, _size("Tensor", args), dt.np)
    self._data = _to_device(a, dev)
    self.dtype = dt
    self.device = dev
    self._requires_grad = False
    self.grad = None
    self.grad_fn = None
    self._version = [0]
    self._base = None
    self._extra = None
    if requires_grad:
        self.requires_grad_(True)
