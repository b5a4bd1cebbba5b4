"""Autocast: eager mixed precision as a dispatcher interceptor.

Inside ``with flow.autocast("cpu", dtype=flow.bfloat16):`` every op call on a tensor of that
device type is offered to :func:`_intercept` first, which casts the op's floating inputs as the
op's colour says (:mod:`flow_amp.colors`) and passes the changed call on; ops whose inputs need
no cast run untouched. Autograd records the casts like any op, so gradients reach float32
parameters in float32. The casts of float32 leaf tensors that require grad (the parameters) are
cached until the outermost autocast region exits: a weight used by several ops of a step is
cast once per step per dtype.

State is per thread and per device type, as in PyTorch: an ``autocast("cpu")`` region in one
thread does nothing to another thread or to ``cuda`` tensors.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import flow
from flow import _dtype as D
from flow import interceptors
from flow.errors import FlowError
from flow.ops.composite import CompositeOp
from flow_amp import colors as C

__all__ = [
    "autocast",
    "is_autocast_enabled",
    "get_autocast_dtype",
    "is_autocast_cache_enabled",
    "clear_autocast_cache",
    "custom_fwd",
    "custom_bwd",
]

# torch.autocast's default low-precision dtype per device type
_DEFAULT_DTYPE = {"cpu": "bfloat16", "cuda": "float16"}
_LOW_DTYPES = ("bfloat16", "float16")


class _State(threading.local):
    def __init__(self) -> None:
        self.modes: dict[str, tuple[bool, Any]] = {}  # device type -> (enabled, dtype)
        self.cache_enabled = True
        self.depth = 0  # nesting of autocast regions (all device types)
        self.cache: dict = {}  # (id(tensor), dtype, grad mode) -> (tensor, version, cast)
        self.colors: dict = {}  # (op name, device type) -> colour, rebuilt per outermost region
        self.region = None  # the interceptor's context while any region is open


_STATE = _State()


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether autocast is on for ``device_type`` in this thread (for any device type when None)."""
    if device_type is None:
        return any(on for on, _ in _STATE.modes.values())
    mode = _STATE.modes.get(device_type)
    return bool(mode and mode[0])


def get_autocast_dtype(device_type: str):
    """The low-precision dtype autocast uses for ``device_type`` (its default when not inside a region)."""
    mode = _STATE.modes.get(device_type)
    if mode is not None:
        return mode[1]
    return getattr(flow, _DEFAULT_DTYPE.get(device_type, "bfloat16"))


def is_autocast_cache_enabled() -> bool:
    return _STATE.cache_enabled


def clear_autocast_cache() -> None:
    """Drop the cached low-precision copies of parameters (done when the outermost region exits)."""
    _STATE.cache.clear()


def _device_type(where: str, device_type) -> str:
    if not isinstance(device_type, str):
        raise TypeError(f"{where}: device_type must be a string such as 'cpu' or 'cuda', got {device_type!r}")
    device_type = device_type.split(":")[0]
    from flow.registry import REGISTRY

    # cuda is known without flow-cuda, as torch.autocast("cuda") works without a GPU
    if device_type not in REGISTRY.device_types and device_type not in _DEFAULT_DTYPE:
        raise FlowError(f"{where}: unknown device type {device_type!r}; known: {sorted(REGISTRY.device_types)}")
    return device_type


def _low_dtype(where: str, dtype) -> flow.dtype:
    try:
        dt = D.as_dtype(dtype)
    except TypeError:
        raise TypeError(f"{where}: dtype must be flow.bfloat16 or flow.float16, got {dtype!r}") from None
    if dt.name not in _LOW_DTYPES:
        raise FlowError(f"{where}: dtype must be flow.bfloat16 or flow.float16, got {dt}")
    return dt


class autocast:
    """Run ops in mixed precision: ``flow.autocast(device_type, dtype=None, enabled=True, cache_enabled=True)``.

    A context manager and a decorator (PyTorch's API). ``dtype`` is ``flow.bfloat16`` or
    ``flow.float16`` (default: bfloat16 on ``cpu``, float16 on ``cuda``). Regions nest; an inner
    ``autocast(..., enabled=False)`` runs its ops in the dtypes they get. Ops coloured ``allow``
    (matmul, linear, conv2d, einsum) run in ``dtype``; ``deny`` ops (losses, ``prod``) in
    float32; ``promote`` ops (``cat``, ``stack``) in their widest input dtype; ``infer`` ops
    (``layer_norm``) in their first input's dtype; the rest as their inputs come.

    >>> model = flow.nn.Linear(4, 2)
    >>> with flow.autocast("cpu", dtype=flow.bfloat16):
    ...     y = model(flow.randn(3, 4))
    >>> y.dtype
    flow.bfloat16
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled: bool = True) -> None:
        device_type = _device_type("autocast", device_type)
        if dtype is None:
            dtype = getattr(flow, _DEFAULT_DTYPE.get(device_type, "bfloat16"))
        dt = _low_dtype("autocast", dtype)
        self.device_type = device_type
        self.fast_dtype = dt
        self.enabled = bool(enabled)
        self.cache_enabled = bool(cache_enabled)
        self._saved: list = []

    def __enter__(self) -> "autocast":
        st = _STATE
        self._saved.append((st.modes.get(self.device_type), st.cache_enabled))
        st.modes[self.device_type] = (self.enabled, self.fast_dtype)
        st.cache_enabled = self.cache_enabled
        if st.depth == 0:
            st.colors = {}
            st.region = interceptors.intercept(_intercept)
            st.region.__enter__()
        st.depth += 1
        return self

    def __exit__(self, *exc) -> None:
        st = _STATE
        prev, cache_enabled = self._saved.pop()
        if prev is None:
            st.modes.pop(self.device_type, None)
        else:
            st.modes[self.device_type] = prev
        st.cache_enabled = cache_enabled
        st.depth -= 1
        if st.depth == 0:
            st.region.__exit__(None, None, None)
            st.region = None
            st.cache.clear()

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self.enabled, self.cache_enabled):
                return fn(*args, **kwargs)

        return run

    def __repr__(self) -> str:
        return f"flow.autocast({self.device_type!r}, dtype={self.fast_dtype}, enabled={self.enabled})"


def _color(name: str, device_type: str) -> str:
    key = (name, device_type)
    c = _STATE.colors.get(key)
    if c is None:
        from flow.registry import REGISTRY

        table = REGISTRY.tables.get(C.TABLE)
        rule = table.get(name) if table is not None else None
        C.check_rule(name, rule) if rule is not None else None
        c = _STATE.colors[key] = C.color_of(rule, device_type)
    return c


def _first_tensor(inputs: tuple):
    for x in inputs:
        if isinstance(x, flow.Tensor):
            return x
        if isinstance(x, (list, tuple)):
            for y in x:
                if isinstance(y, flow.Tensor):
                    return y
    return None


def _eligible(t) -> bool:
    # as torch: floating tensors other than float64 take part in autocast's casts
    return isinstance(t, flow.Tensor) and t.dtype.is_floating_point and t.dtype is not flow.float64


def _cast(t, dt):
    if t.dtype is dt:
        return t
    st = _STATE
    if st.cache_enabled and t.grad_fn is None and t.requires_grad and t.dtype is flow.float32:
        key = (id(t), dt, flow.is_grad_enabled())
        hit = st.cache.get(key)
        version = t._version[0]
        if hit is not None and hit[0] is t and hit[1] == version:
            return hit[2]
        out = t.to(dt)
        st.cache[key] = (t, version, out)
        return out
    return t.to(dt)


def _map(inputs: tuple, fn: Callable) -> tuple:
    out = []
    for x in inputs:
        if isinstance(x, (list, tuple)) and x and isinstance(x[0], flow.Tensor):
            out.append(type(x)(fn(y) for y in x))
        else:
            out.append(fn(x))
    return tuple(out)


def _widest(inputs: tuple):
    best = None
    for x in inputs:
        xs = x if isinstance(x, (list, tuple)) else (x,)
        for y in xs:
            if _eligible(y) and (best is None or y.dtype.itemsize > best.itemsize):
                best = y.dtype
    return best


def _first_float(inputs: tuple):
    for x in inputs:
        for y in x if isinstance(x, (list, tuple)) else (x,):
            if _eligible(y):
                return y.dtype
    return None


def _intercept(op, inputs: tuple, attrs: dict):
    first = _first_tensor(inputs)
    if first is None:
        return NotImplemented
    dev = first.device.type
    mode = _STATE.modes.get(dev)
    if mode is None or not mode[0]:
        return NotImplemented
    color = _color(op.name, dev)
    if color == C.CLEAR:
        return NotImplemented
    if color == C.ALLOW:
        if C.call_color(op.name, color, inputs, attrs) == C.CLEAR:
            return NotImplemented
        target = mode[1]
    elif color == C.DENY:
        target = flow.float32
    else:
        target = _widest(inputs) if color == C.PROMOTE else _first_float(inputs)
        if target is None:
            return NotImplemented
    if attrs.get("inplace") is True:  # never cast the buffer an update writes into
        return NotImplemented
    changed = False

    def conv(x):
        nonlocal changed
        if _eligible(x) and x.dtype is not target:
            changed = True
            return _cast(x, target)
        return x

    new = _map(inputs, conv)
    if not changed and op.__class__ is not CompositeOp:
        return NotImplemented
    # a coloured composite runs below autocast, as one op: its body's ops keep the dtypes chosen here
    return interceptors.redispatch(op, new, attrs)


_intercept.sees_composites = True  # composites (flow.ops.composite) are coloured as a whole, as torch's ops


# -- custom autograd Functions ------------------------------------------------------------------
def custom_fwd(fwd: Callable | None = None, *, device_type: str = "cpu", cast_inputs=None) -> Callable:
    """Decorate the ``forward`` of a custom ``autograd.Function`` (PyTorch's ``torch.amp.custom_fwd``).

    With ``cast_inputs=dtype``, inside an autocast region of ``device_type`` the floating
    inputs are cast to ``dtype`` and forward runs with autocast off; otherwise forward runs
    under the caller's autocast state. Either way :func:`custom_bwd` runs backward under the
    same state.
    """
    # checked here, not when forward (or, worse, backward) first runs
    device_type = _device_type("custom_fwd", device_type)
    dt = None
    if cast_inputs is not None:
        try:
            dt = D.as_dtype(cast_inputs)
        except TypeError:
            dt = None
        if dt is None or not dt.is_floating_point:
            raise TypeError(f"custom_fwd: cast_inputs must be a floating-point dtype or None, got {cast_inputs!r}")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=dt)

    @functools.wraps(fwd)
    def run(ctx, *args, **kwargs):
        ctx._amp_state = (is_autocast_enabled(device_type), get_autocast_dtype(device_type))
        if dt is None or not is_autocast_enabled(device_type):
            return fwd(ctx, *args, **kwargs)
        ctx._amp_state = (False, dt)

        def conv(x):
            return x.to(dt) if _eligible(x) else x

        args = _map(args, conv)
        kwargs = {k: conv(v) for k, v in kwargs.items()}
        with autocast(device_type, enabled=False):
            return fwd(ctx, *args, **kwargs)

    run._amp_device_type = device_type
    return run


def custom_bwd(bwd: Callable | None = None, *, device_type: str = "cpu") -> Callable:
    """Decorate the ``backward`` of a custom ``autograd.Function``: it runs under the autocast
    state its forward (decorated with :func:`custom_fwd`) ran under."""
    device_type = _device_type("custom_bwd", device_type)
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def run(ctx, *grads):
        state = getattr(ctx, "_amp_state", None)
        if state is None:
            return bwd(ctx, *grads)
        enabled, dt = state
        with autocast(device_type, dtype=dt if enabled else None, enabled=enabled):
            return bwd(ctx, *grads)

    return run
