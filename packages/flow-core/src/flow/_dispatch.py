"""Eager dispatch: meta check, cached kernel lookup, call, wrap, record autograd.

This is the hot path of every eager op. It calls no hooks and walks no
registries: the kernel for (op, device type, dtype) is resolved once and kept
on the op. Eager interceptors (autocast, tracing) are consulted only while one
is active; array kinds (:mod:`flow.array_kinds`: global tensors, symbolic
arrays) only when an input's array is not a plain NumPy array.
"""

from __future__ import annotations

import threading

import numpy as np

from flow import _dtype as D
from flow._fpstate import FP_ERRORS as _FP_ERRORS
from flow._fpstate import quiet_fp
from flow._kinds import KINDS
from flow.autograd.grad_mode import STATE
from flow.errors import FlowError, OpError, OpMemoryError, OpTypeError
from flow.registry.ops import OpDef

# Set by flow._tensor's importer (flow/__init__) to break the import cycle.
Tensor = None  # type: ignore[assignment]
Node = None  # type: ignore[assignment]

_NP_TO_DTYPE = D.NP_TO_DTYPE
_dtype_of = _NP_TO_DTYPE.get
_ndarray = np.ndarray
_COMPLEX_SCALARS = frozenset((complex, np.complex64, np.complex128))  # promote a real operand to complex
_asarray = np.asarray


# The active eager interceptors are per thread (as PyTorch's modes are): tracing a graph or an
# autocast region in one thread must not capture another thread's ops. ``_ACTIVE[0]`` counts the
# active interceptors of all threads, so with none anywhere the hot path pays one truth test.
class _ChainState(threading.local):
    """This thread's interceptor chain, and how much of it a call made from inside an interceptor
    may still see."""

    def __init__(self) -> None:
        self.chain: list = []  # outermost first; each is ``fn(op, inputs, attrs)`` -> result or NotImplemented
        self.visible = None  # None: all of the chain; i: only chain[:i]


_CHAIN = _ChainState()
# Array kinds (flow.array_kinds): {array class: handler(op, inputs, attrs)}. Looked up only for an
# input array that is not an ``np.ndarray``, so plain CPU tensors pay one class test per input.
_KINDS = KINDS
_ACTIVE = [0]
_ACTIVE_LOCK = threading.Lock()
_new = object.__new__


class OpHandle:
    """A Python-side reference to an op by name, resolved to its OpDef on first use."""

    __slots__ = ("name", "opdef")

    def __init__(self, name: str) -> None:
        from flow.registry import OP_HANDLES

        self.name = name
        self.opdef = None
        OP_HANDLES[name] = self

    def resolve(self):
        from flow.registry import get_op

        self.opdef = get_op(self.name)
        return self.opdef

    def __repr__(self) -> str:
        return f"<OpHandle {self.name}>"


def push_interceptor(fn) -> None:
    """Activate an eager interceptor; it becomes the innermost (consulted first)."""
    if not callable(fn):
        raise TypeError(f"push_interceptor: expected a callable fn(op, inputs, attrs), got {fn!r}")
    _CHAIN.chain.append(fn)
    with _ACTIVE_LOCK:
        _ACTIVE[0] += 1


def pop_interceptor(fn) -> None:
    """Deactivate an interceptor this thread pushed."""
    chain = _CHAIN.chain
    for i in range(len(chain) - 1, -1, -1):
        if chain[i] is fn:
            del chain[i]
            with _ACTIVE_LOCK:
                _ACTIVE[0] -= 1
            return
    raise ValueError("pop_interceptor: interceptor is not active in this thread")


def active_interceptors() -> tuple:
    """This thread's active interceptors, outermost first."""
    return tuple(_CHAIN.chain)


def opdef(op) -> OpDef:
    """The OpDef of an op name, :class:`OpHandle` or OpDef."""
    cls = op.__class__
    if cls is OpDef:
        return op
    if cls is OpHandle:
        return op.opdef or op.resolve()
    if cls is str:
        h = _handle_for(op)
        return h.opdef or h.resolve()
    raise TypeError(f"flow.ops.call: expected an op name, handle or OpDef, got {type(op).__name__}")


def call(op, *inputs, **attrs):
    """Run an op on tensors: ``flow.ops.call("add", a, b)``.

    ``op`` is an op name, an :class:`OpHandle` or an OpDef. Called from inside an
    interceptor, the call continues down the chain: only the interceptors outside
    the running one see it, then the op runs.
    """
    cls = op.__class__
    if cls is OpHandle:
        op = op.opdef or op.resolve()
    elif cls is str:
        h = _handle_for(op)
        op = h.opdef or h.resolve()
    elif cls is not OpDef:
        if getattr(op, "is_composite", False):  # flow.ops.composite: redispatched by an interceptor
            return call_composite(op, inputs, attrs) if _ACTIVE[0] and _CHAIN.chain else op.fn(*inputs, **attrs)
        raise TypeError(f"flow.ops.call: expected an op name, handle or OpDef, got {type(op).__name__}")
    if _ACTIVE[0] and _CHAIN.chain:
        return _intercepted(op, inputs, attrs)
    return execute(op, inputs, attrs)


def call_composite(op, inputs: tuple, attrs: dict):
    """Offer a composite op's call to the visible interceptors that see composites (innermost
    first), else run its body, whose ops the same interceptors see (see :mod:`flow.ops.composite`)."""
    state = _CHAIN
    chain = state.chain
    top = state.visible
    i = (len(chain) if top is None else min(top, len(chain))) - 1
    while i >= 0:
        fn = chain[i]
        if getattr(fn, "sees_composites", False):
            state.visible = i
            try:
                r = fn(op, inputs, attrs)
            finally:
                state.visible = top
            if r is not NotImplemented:
                return r
        i -= 1
    return op.fn(*inputs, **attrs)


def run_composite_below(op, inputs: tuple, attrs: dict):
    """A composite op's body with no interceptor seeing its ops (``flow.interceptors.run_op``)."""
    state = _CHAIN
    top = state.visible
    state.visible = 0
    try:
        return op.fn(*inputs, **attrs)
    finally:
        state.visible = top


def _intercepted(op, inputs: tuple, attrs: dict):
    """Offer the call to the visible interceptors, innermost first; the first that does not
    return NotImplemented gives the result. While one runs, the ops it calls see only the
    interceptors outside it."""
    state = _CHAIN
    chain = state.chain
    top = state.visible
    i = (len(chain) if top is None else min(top, len(chain))) - 1
    while i >= 0:
        fn = chain[i]
        state.visible = i
        try:
            r = fn(op, inputs, attrs)
        finally:
            state.visible = top
        if r is not NotImplemented:
            return r
        i -= 1
    return execute(op, inputs, attrs)


_by_name: dict = {}


def _handle_for(name: str) -> OpHandle:
    h = _by_name.get(name)
    if h is None:
        from flow.registry import OP_HANDLES

        h = OP_HANDLES.get(name) or OpHandle(name)
        _by_name[name] = h
    return h


def execute(op, inputs: tuple, attrs: dict):
    """Run ``op`` on its device below all interceptors (interceptors may call this).

    Sends the call to the handler of an input's array kind first, if any (see
    :mod:`flow.array_kinds`). Checks devices, runs the meta rule (once per input
    signature: a meta rule sees only shapes, dtypes, devices, attributes and
    non-tensor inputs, so the signatures that passed are remembered on the op),
    calls the cached kernel, wraps the output and records an autograd node when
    an input requires grad and grad mode is on.
    """
    em = op.eager_meta
    n = len(inputs)
    first = inputs[0] if n else None
    if n == 2 and isinstance(first, Tensor) and isinstance(inputs[1], Tensor):  # most ops: two tensors
        b = inputs[1]
        a0 = first._data
        a1 = b._data
        if (a0.__class__ is not _ndarray or a1.__class__ is not _ndarray) and (
            a0.__class__ in _KINDS or a1.__class__ in _KINDS
        ):
            r = _to_kinds(op, inputs, attrs)
            if r is not NotImplemented:
                return r
        dev = first.device
        if b.device is not dev:
            raise _device_mismatch(op, inputs)
        needs_grad = first._requires_grad or b._requires_grad
        arrays = (a0, a1)
        if em:
            sig = (a0.shape, first.dtype, a1.shape, b.dtype, dev._str)
    elif n == 1 and isinstance(first, Tensor):  # ... or one
        a0 = first._data
        if a0.__class__ is not _ndarray and a0.__class__ in _KINDS:
            r = _to_kinds(op, inputs, attrs)
            if r is not NotImplemented:
                return r
        dev = first.device
        needs_grad = first._requires_grad
        arrays = (a0,)
        if em:
            sig = (a0.shape, first.dtype, dev._str)
    else:
        first, needs_grad, arrays, sig, kinds = _gather(op, inputs, em)
        if kinds:
            r = _to_kinds(op, inputs, attrs)
            if r is not NotImplemented:
                return r
            if kinds == 2:
                raise _device_mismatch(op, inputs)
        dev = first.device
        if em:
            sig.append(dev._str)
            sig = tuple(sig)
    if em:
        if attrs:
            sig += (tuple(attrs.items()), tuple(map(type, attrs.values())))
        try:
            known = sig in op._mcache
        except TypeError:  # an unhashable attribute or input: no caching
            known = True
            op.meta(*_meta_inputs(inputs), **attrs)
        if not known:
            op.meta(*_meta_inputs(inputs), **attrs)
            cache = op._mcache
            if len(cache) >= _META_CACHE_SIZE:
                cache.clear()
            cache.add(sig)
    kern = op._kcache.get((dev.type, first.dtype))
    if kern is None:
        kern = _resolve(op, dev.type, first.dtype)
    try:
        out = kern(*arrays, **attrs) if attrs else kern(*arrays)
    except FlowError:
        raise
    except MemoryError as e:  # stays a MemoryError (``except MemoryError`` must catch it), naming the op
        raise _out_of_memory(op, inputs, e) from e
    except _FP_ERRORS:  # the user's NumPy settings raise on inf/nan: give them silently, as PyTorch
        out = _quietly(op, inputs, attrs, kern, arrays)
    except Exception as e:  # explain kernel failures with the op's meta rule
        raise _explain(op, inputs, attrs, e) from e
    if out.__class__ is _ndarray and (dt := _dtype_of(out.dtype)) is not None:
        t = _new(Tensor)
        t._data = out
        t.dtype = dt
        t.device = dev
        t._requires_grad = False
        t.grad = None
        t.grad_fn = None
        t._version = [0]
        t._base = None
        t._extra = None
        if needs_grad and op.grad is not None and STATE.grad_enabled:
            Node.record(op, inputs, attrs, (t,))
        return t
    if out.__class__ is tuple:
        record = needs_grad and op.grad is not None and STATE.grad_enabled
        if not record and attrs and attrs.get("inplace") is True:
            return _inplace_outputs(out, inputs, dev, op)
        outs = tuple([_wrap(o, dev, op) for o in out])
        if record:
            Node.record(op, inputs, attrs, outs)
        return outs
    t = _wrap(out, dev, op)
    if needs_grad and op.grad is not None and STATE.grad_enabled:
        Node.record(op, inputs, attrs, (t,))
    return t


_META_CACHE_SIZE = 1024  # input signatures remembered per op


def _to_kinds(op, inputs: tuple, attrs: dict):
    """Offer the call to the handlers of its inputs' array kinds, in the order the inputs come
    (each kind once); the first that does not return NotImplemented gives the result."""
    seen = []
    for x in inputs:
        if isinstance(x, Tensor):
            cls = x._data.__class__
            if cls in _KINDS and cls not in seen:
                seen.append(cls)
        elif x.__class__ is list or x.__class__ is tuple:
            for t in x:
                if isinstance(t, Tensor):
                    cls = t._data.__class__
                    if cls in _KINDS and cls not in seen:
                        seen.append(cls)
    for cls in seen:
        h = _KINDS.get(cls)
        if h is not None:
            r = h(op, inputs, attrs)
            if r is not NotImplemented:
                return r
    return NotImplemented


def _gather(op, inputs: tuple, em: bool):
    """The general case of :func:`execute`: any mix of tensors, tensor lists and other values.
    The last result says whether an input's array is of a registered array kind (1; 2 when the
    tensors are on different devices too)."""
    first = None
    needs_grad = False
    kinds = mismatch = False
    arrays = []
    sig = [] if em else None
    for x in inputs:
        if isinstance(x, Tensor):
            a = x._data
            if a.__class__ is not _ndarray and a.__class__ in _KINDS:
                kinds = True
            if first is None:
                first = x
            elif x.device is not first.device:
                mismatch = True
            if x._requires_grad:
                needs_grad = True
            arrays.append(a)
            if em:
                sig.append(a.shape)
                sig.append(x.dtype)
        elif x.__class__ is list or x.__class__ is tuple:
            seq = []
            for t in x:
                if not isinstance(t, Tensor):
                    raise OpTypeError(
                        op.name, f"expected a sequence of Tensors, got an element of type {type(t).__name__}"
                    )
                a = t._data
                if a.__class__ is not _ndarray and a.__class__ in _KINDS:
                    kinds = True
                if first is None:
                    first = t
                elif t.device is not first.device:
                    mismatch = True
                if t._requires_grad:
                    needs_grad = True
                seq.append(a)
            arrays.append(seq)
            if em:
                sig.append(tuple([(t._data.shape, t.dtype) for t in x]))
        else:
            arrays.append(x)
            if em:
                sig.append(x)
                sig.append(x.__class__)
    if first is None:
        raise OpTypeError(op.name, "expected at least one Tensor input")
    if mismatch:
        if not kinds:
            raise _device_mismatch(op, inputs)
        kinds = 2  # tensors of array kinds may mix devices if their handler answers; else an error
    return first, needs_grad, arrays, sig, kinds


def _inplace_outputs(out: tuple, inputs: tuple, dev, op) -> tuple:
    """The outputs of an op that wrote them into its inputs (``inplace=True``, the optimizer updates):
    an output array that is an input tensor's own array comes back as that tensor, not a new one
    wrapping the same memory (16 such wrappers were most of a small optimizer step's cost)."""
    mine = {}
    for x in inputs:
        if x.__class__ is list or x.__class__ is tuple:
            for t in x:
                mine[id(t._data)] = t
        elif isinstance(x, Tensor):
            mine[id(x._data)] = x
    outs = []
    for o in out:
        t = mine.get(id(o))
        outs.append(_wrap(o, dev, op) if t is None else t)
    return tuple(outs)


def _wrap(a, dev, op=None):
    if a.__class__ is not _ndarray and dev.type == "cpu":
        a = _asarray(a)
    t = _new(Tensor)
    t._data = a
    try:
        t.dtype = _NP_TO_DTYPE[a.dtype]
    except (KeyError, TypeError, AttributeError):
        name = op.name if op is not None else "kernel"
        raise OpTypeError(
            name,
            f"the kernel returned {type(a).__name__} of dtype {getattr(a, 'dtype', None)}, which is not a flow dtype",
        ) from None
    t.device = dev
    t._requires_grad = False
    t.grad = None
    t.grad_fn = None
    t._version = [0]
    t._base = None
    t._extra = None
    return t


def _resolve(op, device_type: str, dtype):
    from flow.plugins.manager import ensure_loaded
    from flow.registry import REGISTRY

    ensure_loaded()
    return REGISTRY.resolve_kernel(op, device_type, dtype)


def _device_mismatch(op, inputs) -> OpError:
    devs = []
    for x in inputs:
        if isinstance(x, Tensor):
            devs.append(str(x.device))
        elif isinstance(x, (list, tuple)):
            devs.extend(str(t.device) for t in x if isinstance(t, Tensor))
    return OpError(op.name, f"expected all tensors on the same device, got tensors on {sorted(set(devs))}")


def _meta_inputs(inputs: tuple) -> tuple:
    """Inputs as meta rules see them: NumPy scalars (which the dispatcher makes of Python
    numbers) become Python numbers again, so that nothing but tensors looks like a tensor."""
    for x in inputs:
        if isinstance(x, np.generic):
            return tuple(x.item() if isinstance(x, np.generic) else x for x in inputs)
    return inputs


def _quietly(op, inputs, attrs, kern, arrays):
    """Run a kernel again under NumPy's "ignore" state (see :mod:`flow._fpstate`)."""
    try:
        with quiet_fp():
            return kern(*arrays, **attrs) if attrs else kern(*arrays)
    except FlowError:
        raise
    except MemoryError as e:
        raise _out_of_memory(op, inputs, e) from e
    except Exception as e:
        raise _explain(op, inputs, attrs, e) from e


def _out_of_memory(op, inputs, err: MemoryError) -> MemoryError:
    shapes = [tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__ for x in inputs]
    return OpMemoryError(op.name, f"out of memory for inputs with shapes {shapes}: {err}")


def _explain(op, inputs, attrs, err: Exception) -> Exception:
    try:
        op.meta(*_meta_inputs(inputs), **attrs)
    except FlowError as e:
        return e
    except Exception:  # a broken meta rule must not hide the kernel's error
        pass
    shapes = [tuple(x.shape) if isinstance(x, Tensor) else x for x in _meta_inputs(inputs)]
    dtypes = [x.dtype for x in inputs if isinstance(x, Tensor)]
    cls = OpTypeError if isinstance(err, TypeError) else OpError
    return cls(op.name, f"failed for inputs with shapes {shapes} and dtypes {dtypes}: {type(err).__name__}: {err}")


# ---------------------------------------------------------------------------
# Binary elementwise ops: PyTorch's type promotion, then execute.
# ---------------------------------------------------------------------------
_scalar_result_dtype = D.scalar_result_dtype
_promote = D.promote_types
_SCALARS = (int, float, bool)


def binary(handle, a, b, promote_to_float: bool = False):
    """Call a binary elementwise op with PyTorch's promotion of tensors and scalars."""
    op = handle.opdef or handle.resolve()
    if (
        isinstance(a, Tensor)
        and isinstance(b, Tensor)
        and a.dtype is b.dtype
        and (not promote_to_float or a.dtype.category == 2)
    ):
        inputs = (a, b)
    else:
        inputs = _promote_pair(op, a, b, promote_to_float)
    if _ACTIVE[0] and _CHAIN.chain:
        return _intercepted(op, inputs, {})
    return execute(op, inputs, {})


def _complex_pair(a, b) -> tuple:
    from flow._complex._ops import promote_pair  # complex tensors are an array kind of their own

    return promote_pair(a, b)


def _promote_pair(op, a, b, promote_to_float):
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            ad, bd = a.dtype, b.dtype
            if ad is bd:
                if promote_to_float and ad.category != 2:
                    dt = D._default_dtype
                    return _cast(a, dt), _cast(b, dt)
                return a, b
            if ad.is_complex or bd.is_complex:
                return _complex_pair(a, b)
            # zero-dim tensors take part like scalars unless of a higher category
            a0d, b0d = not a._data.shape, not b._data.shape  # 0-d (array kinds need not have ndim)
            if a0d and not b0d and ad.category <= bd.category:
                dt = bd
            elif b0d and not a0d and bd.category <= ad.category:
                dt = ad
            else:
                dt = _promote(ad, bd)
            if promote_to_float and dt.category != 2:
                dt = D._default_dtype
            return (a if ad is dt else _cast(a, dt)), (b if bd is dt else _cast(b, dt))
        if a._data.__class__ is not _ndarray and a.dtype.is_complex or b.__class__ in _COMPLEX_SCALARS:
            return _complex_pair(a, b)
        if b.__class__ in _SCALARS or isinstance(b, (int, float, np.generic)):
            dt = _scalar_result_dtype(a.dtype, type(b))
            if promote_to_float and dt.category != 2:
                dt = D._default_dtype
            return (a if a.dtype is dt else _cast(a, dt)), _scalar(b, dt)
        raise OpTypeError(op.name, f"expected a Tensor or a number as 'other', got {type(b).__name__}")
    if isinstance(b, Tensor):
        if b._data.__class__ is not _ndarray and b.dtype.is_complex or a.__class__ in _COMPLEX_SCALARS:
            return _complex_pair(a, b)
        if a.__class__ in _SCALARS or isinstance(a, (int, float, np.generic)):
            dt = _scalar_result_dtype(b.dtype, type(a))
            if promote_to_float and dt.category != 2:
                dt = D._default_dtype
            return _scalar(a, dt), (b if b.dtype is dt else _cast(b, dt))
        raise OpTypeError(op.name, f"expected a Tensor or a number as 'input', got {type(a).__name__}")
    raise OpTypeError(op.name, f"expected at least one Tensor, got {type(a).__name__} and {type(b).__name__}")


def _scalar(v, dt):
    # A Python scalar becomes a NumPy scalar of the result dtype so the kernel's
    # output has exactly that dtype (NumPy would otherwise pick its own).
    if v.__class__ is float and (v > 65504.0 or v < -65504.0):  # may overflow a narrow float: inf, silently
        with np.errstate(over="ignore"):
            return dt.np.type(v)
    try:
        return dt.np.type(v)
    except OverflowError:
        if dt.category == 1 and isinstance(v, (int, np.integer)):
            # integers wrap around, as in PyTorch (uint8 + 1000 == uint8 + 232)
            bits = dt.itemsize * 8
            w = int(v) & ((1 << bits) - 1)
            if dt.is_signed and w >= 1 << (bits - 1):
                w -= 1 << bits
            return dt.np.type(w)
        raise OpError("scalar", f"value {v} does not fit in {dt}") from None


def _cast(t, dt):
    # by name, through the dispatcher: importing flow.ops here would tie the dispatcher into the
    # import cycle of the op modules
    return call("cast", t, dtype=dt.name)
