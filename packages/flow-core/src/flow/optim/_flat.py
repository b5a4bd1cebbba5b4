"""Flat optimizer states over parameters that stay where they are.

A :class:`FlatBucket` holds the parameters of one param group that share a dtype and a device.
Their optimizer states (``exp_avg`` ...) are flat buffers, one per state, laid out as the
parameters one after the other, so a step is one fused multi-tensor update (see
:mod:`flow.optim._foreach`) per run of up to :data:`GRAD_CHUNK` elements (or one larger
parameter) instead of one Python op per parameter.

The parameters themselves are **not** moved into a flat buffer: each keeps its own array, which
every view, ``detach()`` and ``from_numpy`` alias of it shares (PyTorch's semantics, which weight
tying and EMA code rely on), and the update writes into that array. The bucket remembers each
parameter's array; ``param.data = x``, ``flow.load`` into a parameter etc. replace it, and
:meth:`FlatBucket.in_sync` notices (an identity check per parameter): the bucket then takes the new
arrays as they are when their shapes are unchanged (:meth:`FlatBucket.refresh`), else the optimizer
rebuilds the group and carries the states over. Low-precision parameters (float16, bfloat16) are
updated in float32: their states are float32, and each update goes through a float32 copy that is
cast back.
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow.optim._foreach import Scratch, overlaps, split_runs
from flow.optim.errors import OptimizerError

LOW_PRECISION = (D.float16, D.bfloat16)
# The most elements one fused update covers (a single larger parameter is a run of its own): it bounds
# the scratch buffers (gathered gradients, copies of low-precision parameters) to max(GRAD_CHUNK, the
# largest parameter) elements.
GRAD_CHUNK = 1 << 20


def array_module(device):
    """The array module (``xp``) of a device (NumPy on the CPU)."""
    if device.type == "cpu":
        return np
    from flow.registry import get_device_type

    return get_device_type(device.type).xp


def _read_only(p) -> bool:
    flags = getattr(p._data, "flags", None)
    return flags is not None and not getattr(flags, "writeable", True)


def check_param_array(opt_name: str, label: str, p) -> None:
    """A parameter's array must be writable: the update writes into it (it is shared with its views)."""
    if _read_only(p):
        raise OptimizerError(
            f"{opt_name}: {label} (shape {tuple(p.shape)}) is read-only (e.g. flow.from_numpy of a "
            "non-writable array) and the optimizer updates it in place; make it writable or pass a copy"
        )


class FlatBucket:
    """The parameters of one group with one dtype and device, with their states in flat buffers."""

    def __init__(self, params: list, opt_name: str = "optimizer", labels: list[str] | None = None) -> None:
        p0 = params[0]
        self.params = list(params)
        self.opt_name = opt_name
        # how errors name each parameter ("param_groups[0]['params'][3]")
        self.labels = list(labels) if labels is not None else [f"parameter {i}" for i in range(len(params))]
        self.dtype = p0.dtype
        self.device = p0.device
        self.xp = array_module(self.device)
        self.low = self.dtype in LOW_PRECISION
        self.cdtype = np.dtype(np.float32) if self.low else self.dtype.np  # compute / state dtype
        self.shapes = [tuple(p._data.shape) for p in self.params]
        self.numels = np.array([int(p._data.size) for p in self.params], dtype=np.int64)
        self.offsets = np.zeros(len(self.params) + 1, dtype=np.int64)
        np.cumsum(self.numels, out=self.offsets[1:])
        self.total = int(self.offsets[-1])
        self.states: dict[str, object] = {}  # name -> flat array (compute dtype)
        self.present: dict[str, np.ndarray] = {}  # name -> bool per param: state holds a value
        self.steps = np.zeros(len(self.params), dtype=np.int64)
        self.scratch = Scratch(self.xp, self.cdtype)
        self._take_arrays()

    def _take_arrays(self) -> None:
        self.arrays = [p._data for p in self.params]
        self.conflicts = overlaps(self.arrays)  # parameters sharing memory are updated one after the other
        self.read_only = [i for i, p in enumerate(self.params) if _read_only(p)]

    def check_writable(self) -> None:
        """Before a step: every parameter's array can be written (state_dict() etc. work regardless)."""
        if self.read_only:
            i = self.read_only[0]
            check_param_array(self.opt_name, self.labels[i], self.params[i])

    # -- layout ------------------------------------------------------------------------
    def in_sync(self) -> bool:
        """True while every parameter still holds the array the bucket knows."""
        for p, a in zip(self.params, self.arrays):
            if p._data is not a:
                return False
        return True

    def refresh(self) -> bool:
        """Take the parameters' new arrays when dtype, device and shapes are unchanged (True); False when
        the group must be rebuilt."""
        for p, shape in zip(self.params, self.shapes):
            if p.dtype is not self.dtype or p.device != self.device or tuple(p._data.shape) != shape:
                return False
        self._take_arrays()
        return True

    def state(self, name: str, fill: float = 0.0):
        """The flat state buffer ``name``, allocated (filled with ``fill``) on first use."""
        buf = self.states.get(name)
        if buf is None:
            buf = self.xp.full(self.total, fill, dtype=self.cdtype)
            self.states[name] = buf
            self.present[name] = np.zeros(len(self.params), dtype=bool)
        return buf

    def param_state(self, i: int) -> dict:
        """``{name: array view}`` of the states that hold a value for parameter ``i``."""
        o, n, shape = int(self.offsets[i]), int(self.numels[i]), self.shapes[i]
        return {k: buf[o:o + n].reshape(shape) for k, buf in self.states.items() if self.present[k][i]}

    def set_param_state(self, i: int, name: str, value) -> None:
        """Copy ``value`` (any array-like of the parameter's size) into state ``name`` of parameter ``i``."""
        o, n = int(self.offsets[i]), int(self.numels[i])
        arr = np.asarray(value)
        if arr.size != n:
            raise OptimizerError(
                f"{self.opt_name}: optimizer state '{name}' has {arr.size} elements but {self.labels[i]} has "
                f"{n} (shape {self.shapes[i]})"
            )
        buf = self.state(name)
        buf[o:o + n] = self.xp.asarray(arr.reshape(-1).astype(self.cdtype, copy=False))
        self.present[name][i] = True

    def clear_state(self) -> None:
        self.states.clear()
        self.present.clear()
        self.steps[:] = 0

    # -- one step ------------------------------------------------------------------------
    def runs(self, names) -> list[tuple[int, int]]:
        """Ranges ``[i0, i1)`` of parameters that have a gradient and the same step/state status, each as
        long as possible within :data:`GRAD_CHUNK` elements (a larger parameter makes a range of its own)
        and holding no two parameters that share memory.

        In the usual case (every parameter has a gradient, all were initialised together) these
        cover the whole bucket in ``total / GRAD_CHUNK`` or so fused updates.
        """
        out: list[tuple[int, int]] = []
        pres = [self.present[k] for k in names if k in self.present]
        start, key = -1, None
        for i, p in enumerate(self.params):
            k = None if p.grad is None else (int(self.steps[i]),) + tuple(bool(m[i]) for m in pres)
            if k != key:
                if key is not None:
                    out.extend(split_runs(self.numels, self.conflicts, GRAD_CHUNK, start, i))
                start, key = i, k
        if key is not None:
            out.extend(split_runs(self.numels, self.conflicts, GRAD_CHUNK, start, len(self.params)))
        return out

    def grads(self, i0: int, i1: int) -> list:
        """The gradient arrays of parameters ``i0:i1`` (checked against the parameters' sizes)."""
        out = []
        for i in range(i0, i1):
            gd = self.params[i].grad._data
            if gd.size != self.numels[i]:
                raise OptimizerError(
                    f"{self.opt_name}: {self.labels[i]} of shape {self.shapes[i]} has a gradient of shape "
                    f"{tuple(gd.shape)}"
                )
            out.append(gd)
        return out


def segment_norms(x, starts, numels, xp=np):
    """The L2 norm of each segment ``x[starts[k]:starts[k] + numels[k]]`` (float64), vectorised."""
    out = np.zeros(len(numels), dtype=np.float64)
    nz = numels > 0
    if nz.any():
        sums = xp.add.reduceat(x * x, xp.asarray(starts[nz]), dtype=np.float64)
        out[nz] = np.asarray(sums.get() if hasattr(sums, "get") else sums)
    return np.sqrt(out)
