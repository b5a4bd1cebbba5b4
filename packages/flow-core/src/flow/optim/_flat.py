"""Flat optimizer states over parameters that stay where they are.

A :class:`FlatBucket` holds the parameters of one param group that share a dtype and a device.
Their optimizer states (``exp_avg`` ...) are flat buffers, one per state, laid out as the
parameters one after the other, so a step is one update op (see :mod:`flow.ops.optim`) per run
of parameters in the same state, whose kernel walks the parameters in fused multi-tensor calls of
up to :data:`GRAD_CHUNK` elements, instead of one Python op per parameter.

The parameters themselves are **not** moved into a flat buffer: each keeps its own array, which
every view, ``detach()`` and ``from_numpy`` alias of it shares (PyTorch's semantics, which weight
tying and EMA code rely on), and the update writes into that array. The bucket remembers each
parameter's array; ``param.data = x``, ``flow.load`` into a parameter etc. replace it, and
:meth:`FlatBucket.in_sync` notices (an identity check per parameter): the bucket then takes the new
arrays as they are when their shapes are unchanged (:meth:`FlatBucket.refresh`), else the optimizer
rebuilds the group and carries the states over. Low-precision parameters (float16, bfloat16) are
updated in float32: their states are float32, and each update goes through a float32 copy that is
cast back.

The update ops take tensors: the bucket keeps, per state, one tensor per parameter that views its
piece of the flat buffer (:meth:`FlatBucket.state_views`), and small host tensors for the values fed
to the ops (:meth:`FlatBucket.feed`: the step count, whether a state is new), made once and reused.

A plugin can give the states of one parameter a layout of their own (:func:`set_state_layout`, a
:class:`StateLayout`): flow-dist's ZeRO keeps the state of a broadcast global parameter split on the
data-parallel axis, so each process holds 1/n of it. The bucket then sizes that parameter's piece
of every flat state by the layout's ``local_shape`` and hands the update ops ``layout.wrap(view)``;
eager steps and compiled steps (:mod:`flow.graph.optim_trace`) read the same layout.
"""

from __future__ import annotations

import weakref

import numpy as np

from flow import _dtype as D
from flow._tensor import Tensor
from flow.array_kinds import storage_of
from flow.optim.errors import OptimizerError

LOW_PRECISION = (D.float16, D.bfloat16)
# The most elements one fused kernel call covers (a single larger parameter is a call of its own): it bounds
# the scratch buffers of the update kernels (gathered gradients, copies of low-precision parameters; one
# set per thread, see flow.optim._foreach.thread_scratch) to max(GRAD_CHUNK, the
# largest parameter) elements.
GRAD_CHUNK = 1 << 20


class StateLayout:
    """How one parameter's optimizer states are laid out, when not like the parameter's local piece.

    ``local_shape``: the shape of the piece of each state this process holds. Subclasses override
    :meth:`wrap` (the array the update ops get, e.g. a global array of that piece with its own SBP)
    and :meth:`from_param` (this process's piece of a state given like the parameter's local piece:
    what a state dict or a rebuilt group carries over).
    """

    def __init__(self, local_shape: tuple) -> None:
        self.local_shape = tuple(int(d) for d in local_shape)
        if any(d < 0 for d in self.local_shape):
            raise ValueError(f"StateLayout: local_shape must have non-negative sizes, got {local_shape!r}")

    @property
    def numel(self) -> int:
        return int(np.prod(self.local_shape, dtype=np.int64))

    def wrap(self, view):
        """The state array the update ops take, made from ``view`` (this process's piece, ``local_shape``):
        a view of it, or an array kind whose storage is ``view`` (a compiled step binds that storage)."""
        return view

    def from_param(self, arr):
        """This process's piece (``local_shape``) of a state given in the parameter's local shape."""
        raise OptimizerError(
            f"{type(self).__name__}: cannot take a state of shape {tuple(np.shape(arr))} laid out like its parameter"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(local_shape={self.local_shape})"


# id(parameter) -> (weak reference to it, its StateLayout); the version changes with every set, so a bucket
# sees a change with one comparison per step instead of one look-up per parameter
_LAYOUTS: dict = {}
_LAYOUT_VERSION = [0]


def set_state_layout(param: Tensor, layout: "StateLayout | None") -> None:
    """Lay out the optimizer states of ``param`` as ``layout`` says (``None``: like the parameter again).

    Every optimizer holding ``param`` rebuilds its bucket at its next step and carries the states over
    (through :meth:`StateLayout.from_param` when they were laid out like the parameter).
    """
    if not isinstance(param, Tensor):
        raise TypeError(f"set_state_layout: expected a parameter (a Tensor), got {type(param).__name__}")
    if layout is not None and not isinstance(layout, StateLayout):
        raise TypeError(f"set_state_layout: layout must be a StateLayout or None, got {type(layout).__name__}")
    key = id(param)
    if layout is None:
        _LAYOUTS.pop(key, None)
    else:
        _LAYOUTS[key] = (weakref.ref(param, lambda _r, k=key: _LAYOUTS.pop(k, None)), layout)
    _LAYOUT_VERSION[0] += 1


def state_layout(param: Tensor) -> "StateLayout | None":
    """The :class:`StateLayout` of ``param``'s optimizer states (``None``: like the parameter)."""
    hit = _LAYOUTS.get(id(param))
    return hit[1] if hit is not None and hit[0]() is param else None


def array_module(device):
    """The array module (``xp``) of a device (NumPy on the CPU)."""
    if device.type == "cpu":
        return np
    from flow.registry import get_device_type

    return get_device_type(device.type).xp


def _like_param(d, view):
    """A state view of a parameter whose data ``d`` is of an array kind: of that kind, like ``d``."""
    if d.__class__ is np.ndarray:
        return view
    with_storage = getattr(d, "with_storage", None)
    return view if with_storage is None else with_storage(view)


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
        # states hold what each process holds of its parameter (a global parameter's local piece)
        self.local_shapes = [tuple(storage_of(p._data).shape) for p in self.params]
        # each parameter's piece of a flat state: its local piece, or what its StateLayout says
        self.layout_version = _LAYOUT_VERSION[0]
        self.layouts = [state_layout(p) for p in self.params]
        self.state_shapes = [s if lay is None else lay.local_shape for s, lay in zip(self.local_shapes, self.layouts)]
        self.numels = np.array([int(np.prod(s, dtype=np.int64)) for s in self.state_shapes], dtype=np.int64)
        self.offsets = np.zeros(len(self.params) + 1, dtype=np.int64)
        np.cumsum(self.numels, out=self.offsets[1:])
        self.total = int(self.offsets[-1])
        self.states: dict[str, object] = {}  # name -> flat array (compute dtype)
        self.present: dict[str, np.ndarray] = {}  # name -> bool per param: state holds a value
        self.steps = np.zeros(len(self.params), dtype=np.int64)
        self._views: dict[str, tuple] = {}  # name -> (flat buffer, [tensor viewing each parameter's piece])
        self.feeds: dict[str, tuple] = {}  # name -> (host array, tensor of it)
        self._take_arrays()

    def _take_arrays(self) -> None:
        # (parameters sharing memory are split into separate kernel calls by the update ops' kernels)
        self.arrays = [p._data for p in self.params]
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
        return self.layout_version == _LAYOUT_VERSION[0] or self._same_layouts()

    def _same_layouts(self) -> bool:
        if any(state_layout(p) is not lay for p, lay in zip(self.params, self.layouts)):
            return False
        self.layout_version = _LAYOUT_VERSION[0]
        return True

    def refresh(self) -> bool:
        """Take the parameters' new arrays when dtype, device and shapes are unchanged (True); False when
        the group must be rebuilt."""
        for p, shape, local in zip(self.params, self.shapes, self.local_shapes):
            if p.dtype is not self.dtype or p.device != self.device or tuple(p._data.shape) != shape:
                return False
            if tuple(storage_of(p._data).shape) != local:
                return False
        if not self._same_layouts():  # a new state layout: rebuilt, the states carried over
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

    def state_views(self, name: str, fill: float = 0.0) -> list:
        """One tensor per parameter viewing its piece of state ``name`` (the update ops' state inputs);
        made again only when the flat buffer was replaced."""
        buf = self.state(name, fill)
        hit = self._views.get(name)
        if hit is not None and hit[0] is buf:
            return hit[1]
        cdt = D.NP_TO_DTYPE[np.dtype(self.cdtype)]
        views = [
            Tensor._make(self.wrap_state(i, buf[int(o) : int(o) + int(n)].reshape(shape)), cdt, self.device)
            for i, (o, n, shape) in enumerate(zip(self.offsets, self.numels, self.state_shapes))
        ]
        self._views[name] = (buf, views)
        return views

    def wrap_state(self, i: int, view):
        """The array of parameter ``i``'s state piece ``view`` that the update ops take: of its
        :class:`StateLayout`, or of the parameter's array kind."""
        lay = self.layouts[i]
        return _like_param(self.params[i]._data, view) if lay is None else lay.wrap(view)

    def feed(self, name: str, shape: tuple = (), dtype=D.int64) -> tuple:
        """``(array, tensor)``: a small host value fed to the update op (the step count, first-step
        flags); the optimizer writes the array before each call, the tensor is the op's input."""
        hit = self.feeds.get(name)
        if hit is None or hit[0].shape != shape:
            arr = np.zeros(shape, dtype=dtype.np)
            hit = self.feeds[name] = (arr, Tensor._make(arr, dtype, self.device))
        return hit

    def param_state(self, i: int) -> dict:
        """``{name: array view}`` of the states that hold a value for parameter ``i``."""
        o, n, shape = int(self.offsets[i]), int(self.numels[i]), self.state_shapes[i]
        return {k: buf[o : o + n].reshape(shape) for k, buf in self.states.items() if self.present[k][i]}

    def set_param_state(self, i: int, name: str, value) -> None:
        """Copy ``value`` (any array-like of the parameter's size) into state ``name`` of parameter ``i``."""
        o, n = int(self.offsets[i]), int(self.numels[i])
        arr = np.asarray(value)
        lay = self.layouts[i]
        if lay is not None and arr.size != n and tuple(arr.shape) == self.local_shapes[i]:
            arr = np.asarray(lay.from_param(arr))  # laid out like the parameter: take this process's piece
        if arr.size != n:
            raise OptimizerError(
                f"{self.opt_name}: optimizer state '{name}' has {arr.size} elements but {self.labels[i]} has "
                f"{n} (shape {self.shapes[i]})"
            )
        buf = self.state(name)
        buf[o : o + n] = self.xp.asarray(arr.reshape(-1).astype(self.cdtype, copy=False))
        self.present[name][i] = True

    def clear_state(self) -> None:
        self.states.clear()
        self.present.clear()
        self._views.clear()
        self.steps[:] = 0

    # -- one step ------------------------------------------------------------------------
    def runs(self, names) -> list[tuple[int, int]]:
        """Ranges ``[i0, i1)`` of consecutive parameters that have a gradient and the same step/state status:
        one update op each. In the usual case (every parameter has a gradient, all were initialised
        together) that is the whole bucket; the op's kernel splits it into fused calls of at most
        :data:`GRAD_CHUNK` elements."""
        params = self.params
        n = len(params)
        pres = [self.present[k] for k in names if k in self.present]
        if all(p.grad is not None for p in params):  # the usual case, checked first: one run of the bucket
            steps = self.steps
            if n == 1 or ((steps == steps[0]).all() and all(m.all() or not m.any() for m in pres)):
                return [(0, n)] if n else []
        has = np.fromiter((p.grad is not None for p in params), dtype=bool, count=n)
        # a parameter's status: has a gradient, its step count, which states hold a value; runs start where
        # the status changes (vectorised: one pass of NumPy over the bucket, not Python per parameter)
        cols = [has, self.steps] + pres
        change = np.zeros(n, dtype=bool)
        if n:
            change[0] = True
            for c in cols:
                change[1:] |= c[1:] != c[:-1]
        starts = np.flatnonzero(change).tolist()
        ends = starts[1:] + [n]
        return [(i0, i1) for i0, i1 in zip(starts, ends) if has[i0]]

    def grads(self, i0: int, i1: int) -> list:
        """The gradients of parameters ``i0:i1``, checked against the parameters' shapes and dtypes (before
        any update: the update op's meta rule must not fail half-way through a step)."""
        out = [p.grad for p in self.params[i0:i1]]
        dtype, device, shapes = self.dtype, self.device, self.shapes
        for k, g in enumerate(out):
            if g.dtype is not dtype or g.device is not device or g._data.shape != shapes[i0 + k]:
                self._bad_grad(i0 + k, g)
        return out

    def _bad_grad(self, i: int, g) -> None:
        if tuple(g._data.shape) != self.shapes[i]:
            raise OptimizerError(
                f"{self.opt_name}: {self.labels[i]} of shape {self.shapes[i]} has a gradient of shape "
                f"{tuple(g._data.shape)}"
            )
        if g.dtype is not self.dtype or g.device != self.device:
            raise OptimizerError(
                f"{self.opt_name}: {self.labels[i]} ({self.dtype} on {self.device}) has a gradient of dtype "
                f"{g.dtype} on {g.device}"
            )


def segment_norms(x, starts, numels, xp=np):
    """The L2 norm of each segment ``x[starts[k]:starts[k] + numels[k]]`` (float64), vectorised."""
    out = np.zeros(len(numels), dtype=np.float64)
    nz = numels > 0
    if nz.any():
        sums = xp.add.reduceat(x * x, xp.asarray(starts[nz]), dtype=np.float64)
        out[nz] = np.asarray(sums.get() if hasattr(sums, "get") else sums)
    return np.sqrt(out)
