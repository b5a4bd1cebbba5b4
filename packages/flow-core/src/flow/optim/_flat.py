"""Flat, contiguous storage for an optimizer's parameters, gradients and states.

A :class:`FlatBucket` holds the parameters of one param group that share a dtype and a
device. Their values live in one contiguous 1-d buffer and each parameter's ``_data`` is
re-pointed to a view of its slice, so an update is one fused call (or a few vectorised NumPy
expressions) over a run of up to :data:`GRAD_CHUNK` elements (or one larger parameter) instead of
one Python op per parameter. A run's gradients are gathered with one ``concatenate(..., out=)``
into a scratch buffer of the run's size, reused from run to run and step to step, so the
optimizer never holds a second copy of all the gradients; optimizer states (``exp_avg`` ...) are
flat buffers with the parameters' layout.

The views stay valid as long as nobody replaces a parameter's ``_data``; ``param.data = x``,
``flow.load`` into a parameter etc. do, and :meth:`FlatBucket.in_sync` notices it (an identity
check per parameter), after which the optimizer re-flattens the group lazily and carries the
states over. Low-precision parameters (float16, bfloat16) are updated in float32: their states
and gradient buffer are float32, the parameter slice is upcast, updated and cast back.
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow.errors import FlowError

LOW_PRECISION = (D.float16, D.bfloat16)
# The most elements one fused update covers (a single larger parameter is a run of its own): it bounds
# the gradient scratch buffer to max(GRAD_CHUNK, the largest parameter) elements.
GRAD_CHUNK = 1 << 20


def array_module(device):
    """The array module (``xp``) of a device (NumPy on the CPU)."""
    if device.type == "cpu":
        return np
    from flow.registry import get_device_type

    return get_device_type(device.type).xp


class FlatBucket:
    """The parameters of one group with one dtype and device, flattened into one buffer."""

    def __init__(self, params: list) -> None:
        p0 = params[0]
        self.params = list(params)
        self.dtype = p0.dtype
        self.device = p0.device
        self.xp = xp = array_module(self.device)
        self.low = self.dtype in LOW_PRECISION
        self.cdtype = np.dtype(np.float32) if self.low else self.dtype.np  # compute / state dtype
        self.shapes = [tuple(p._data.shape) for p in self.params]
        self.numels = np.array([int(p._data.size) for p in self.params], dtype=np.int64)
        self.offsets = np.zeros(len(self.params) + 1, dtype=np.int64)
        np.cumsum(self.numels, out=self.offsets[1:])
        self.total = int(self.offsets[-1])
        self.flat = xp.empty(self.total, dtype=self.dtype.np)
        views = []
        for p, o, n, shape in zip(self.params, self.offsets, self.numels, self.shapes):
            seg = self.flat[o:o + n]
            seg[...] = p._data.reshape(-1)
            big = p._data.nbytes >= _TRIM_BYTES
            # re-pointed at once, so each old array is freed as soon as it is copied (and a big one given
            # back to the OS): flattening never holds two copies of all the parameters
            p._data = seg.reshape(shape)
            views.append(p._data)
            if big and xp is np:
                release_freed_memory()
        self.views = views
        self.states: dict[str, object] = {}  # name -> flat array (compute dtype)
        self.present: dict[str, np.ndarray] = {}  # name -> bool per param: state holds a value
        self.steps = np.zeros(len(self.params), dtype=np.int64)
        self.grad = None  # scratch for one run's gradients (grown to the largest run)

    # -- layout ------------------------------------------------------------------------
    def in_sync(self) -> bool:
        """True while every parameter still points at its view of the flat buffer."""
        for p, v in zip(self.params, self.views):
            if p._data is not v:
                return False
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
            raise ValueError(
                f"optimizer state '{name}' has {arr.size} elements but the parameter has {n} "
                f"(shape {self.shapes[i]})"
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
        long as possible within :data:`GRAD_CHUNK` elements (a larger parameter makes a range of its own).

        In the usual case (every parameter has a gradient, all were initialised together) these
        cover the whole bucket in ``total / GRAD_CHUNK`` or so fused updates.
        """
        out: list[tuple[int, int]] = []
        pres = [self.present[k] for k in names if k in self.present]
        numels = self.numels.tolist()
        start, key, size = -1, None, 0
        for i, p in enumerate(self.params):
            g = p.grad
            k = None if g is None else (int(self.steps[i]),) + tuple(bool(m[i]) for m in pres)
            n = numels[i]
            if k != key or k is None or size + n > GRAD_CHUNK:
                if key is not None:
                    out.append((start, i))
                start, key, size = i, k, 0
            size += n
        if key is not None:
            out.append((start, len(self.params)))
        return out

    def gather_grads(self, i0: int, i1: int, copy: bool = True):
        """Copy the gradients of parameters ``i0:i1`` into the scratch buffer (one concatenate); return that
        (1-d, the run's size; the caller may overwrite it).

        ``copy=False`` (for a caller that only reads it): a run of one parameter whose gradient is contiguous
        and of the compute dtype gives that gradient itself, flattened, and copies nothing.
        """
        o0, o1 = int(self.offsets[i0]), int(self.offsets[i1])
        if not copy and i1 - i0 == 1:
            gd = self.params[i0].grad._data
            if (gd.dtype == self.cdtype and gd.size == o1 - o0 and getattr(gd, "flags", None) is not None
                    and gd.flags.c_contiguous):
                return gd.reshape(-1)
        if self.grad is None or self.grad.shape[0] < o1 - o0:
            self.grad = None  # free the old one first
            self.grad = self.xp.empty(o1 - o0, dtype=self.cdtype)
        parts = []
        for i in range(i0, i1):
            g = self.params[i].grad
            gd = g._data
            if gd.size != self.numels[i]:
                raise FlowError(
                    f"optimizer: parameter of shape {self.shapes[i]} has a gradient of shape {tuple(gd.shape)}"
                )
            parts.append(gd.reshape(-1))
        out = self.grad[:o1 - o0]
        if len(parts) == 1:
            out[...] = parts[0]
        else:
            self.xp.concatenate(parts, out=out)
        return out

    def param_slice(self, o0: int, o1: int):
        """The parameter values of ``[o0, o1)`` as a contiguous array of the compute dtype."""
        seg = self.flat[o0:o1]
        return seg.astype(self.cdtype) if self.low else seg

    def write_back(self, o0: int, o1: int, values) -> None:
        if self.low:
            self.flat[o0:o1] = values


_TRIM_BYTES = 1 << 20
_malloc_trim = None


def release_freed_memory() -> None:
    """Hand the memory that ``free`` kept in the C heap back to the OS (glibc's ``malloc_trim``; a no-op elsewhere).

    glibc raises its mmap threshold after the first large ``free``, so later arrays of up to 32 MiB live
    in the heap, and freeing them there does not lower the process's memory: without this, the old
    parameter arrays a bucket replaces would stay resident next to the flat copy.
    """
    global _malloc_trim
    if _malloc_trim is None:
        _malloc_trim = False
        try:
            import ctypes
            import sys

            if sys.platform.startswith("linux"):
                fn = ctypes.CDLL(None).malloc_trim
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
                _malloc_trim = fn
        except (OSError, AttributeError):  # not glibc (musl, macOS ...): nothing to do
            pass
    if _malloc_trim:
        _malloc_trim(0)


def segment_norms(x, starts, numels, xp=np):
    """The L2 norm of each segment ``x[starts[k]:starts[k] + numels[k]]`` (float64), vectorised."""
    out = np.zeros(len(numels), dtype=np.float64)
    nz = numels > 0
    if nz.any():
        sums = xp.add.reduceat(x * x, xp.asarray(starts[nz]), dtype=np.float64)
        out[nz] = np.asarray(sums.get() if hasattr(sums, "get") else sums)
    return np.sqrt(out)


def use_native(arr) -> bool:
    """Whether the native fused kernels can update ``arr`` (a float32/float64 NumPy array, extension built)."""
    from flow.backends.cpu import native

    return native.HAVE_NATIVE and isinstance(arr, np.ndarray) and arr.dtype in _NATIVE_DTYPES


_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
