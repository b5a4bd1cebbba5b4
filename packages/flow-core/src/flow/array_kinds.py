"""Array kinds: tensors whose data is not a device array, and the code that runs ops on them.

A tensor's data (``Tensor._data``) is normally an array of its device's array module (a NumPy
array on the CPU). A plugin may put an object of its own class there instead (a global tensor's
logical array, holding a placement, an SBP signature and the local piece; a symbolic array while
a graph is traced) and register the class with a *handler*::

    flow.array_kinds.register_array_kind(GlobalArray, global_handler)

From then on the dispatcher sends every op that has an input tensor whose data is of that class
to ``handler(op, inputs, attrs)`` (the same signature as an interceptor's, see
:mod:`flow.interceptors`), without any ``with`` block. The handler returns the op's result
(tensors of its kind, made with :func:`wrap`), or ``NotImplemented`` to pass the call on.

Precedence: interceptors come first (they see every call, as PyTorch's modes do), then array
kinds, then the kernel. Among the kinds of one call's inputs, the kind of the first such input
(in argument order, lists included) is asked first, then the next kind, each once; when every
one returned ``NotImplemented`` the kernel runs on the arrays as they are. A handler that calls
ops on tensors of its own kind is asked again (like ``__torch_dispatch__``): to compute its
answer it calls ops on the local pieces (plain tensors, :func:`flow.interceptors.run_op`) or
runs kernels on plain arrays (:func:`run_kernel`).

The array protocol (what a kind's class must provide so that a tensor can answer from it):

- ``shape``, ``ndim``, ``size``: the logical shape (a tuple of ints), its length and its number of
  elements (``Tensor.shape``, ``size()``, ``ndim``, ``numel()``, ``len()``; the op front ends and
  meta rules read them too);
- ``dtype``: a NumPy dtype or a ``flow.dtype`` (``Tensor.dtype``);
- ``device`` (optional): a ``flow.device`` or a device string (``Tensor.device``; without it the
  tensor is on the device given to :func:`wrap`, by default that of the op's inputs);
- ``__array__()`` (optional): the logical value as a host NumPy array (``numpy()``, ``item()``,
  printing); without it printing shows only the size;
- ``repr_extras()`` (optional): a list of ``"key=value"`` strings that printing appends
  (a global tensor's ``placement=...``, ``sbp=...``);
- ``copy()`` and ``a[...] = b`` (optional): needed for in-place ops and autograd accumulation on
  tensors of the kind (``b`` is an array of the same kind, or a NumPy array or scalar);
- ``like(host)`` (optional): an array of the kind laid out like this one holding the NumPy array
  ``host`` of the same logical shape; ``backward()`` makes its seed gradient (ones, or a plain
  ``gradient=``) of the kind with it, so that the gradients are of the kind;
- ``grad_for(g)`` (optional): the gradient tensor ``g`` as this leaf tensor's ``.grad`` holds it
  (a global parameter's gradient converted to the parameter's own SBP), called before ``g`` is
  accumulated into ``.grad``;
- ``storage`` and ``with_storage(array)`` (optional): the device array holding this process's
  data, and an array of the kind laid out like this one holding another such array; optimizers
  keep their states (momentum, ``exp_avg``) of such a parameter as device arrays shaped like its
  ``storage``, handed to the update ops as arrays of the kind (``with_storage``);
- ``strides`` / ``flags`` (optional): as NumPy's, for ``stride()`` / ``is_contiguous()``.

Autograd: a handler that answers an op records it with :func:`record`; ``backward()`` then calls
the op's gradient formula, whose ops run through the dispatcher again, so the handler sees the
backward ops too and the gradients of its tensors are tensors of its kind.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Callable, ContextManager

import numpy as np

from flow import _dispatch
from flow import _dtype as D
from flow._device import CPU
from flow._device import device as _device
from flow._kinds import KINDS

__all__ = [
    "register_array_kind",
    "unregister_array_kind",
    "registered_array_kinds",
    "handler_for",
    "is_kind_array",
    "storage_of",
    "wrap",
    "run_kernel",
    "record",
]

# The dispatcher reads this very dict (``flow._kinds.KINDS``): a lookup of ``type(array)`` there is
# all an op pays, and only when one of its input arrays is not a plain NumPy array.
_KINDS: dict = KINDS


def register_array_kind(cls: type, handler: Callable) -> None:
    """Send every op with an input tensor whose data is a ``cls`` to ``handler(op, inputs, attrs)``.

    ``cls`` must be a class other than ``numpy.ndarray`` with ``shape`` and ``dtype`` (see the module
    docs for the whole protocol). Registering a class again replaces its handler.
    """
    from flow.errors import FlowError

    if not isinstance(cls, type):
        raise TypeError(f"register_array_kind: expected a class, got {cls!r}")
    if cls is np.ndarray or issubclass(cls, (np.ndarray, np.generic)):
        raise FlowError(f"register_array_kind: {cls.__name__} is a NumPy array class; array kinds are other classes")
    if not callable(handler):
        raise TypeError(f"register_array_kind: expected a callable handler(op, inputs, attrs), got {handler!r}")
    _KINDS[cls] = handler


def unregister_array_kind(cls: type) -> None:
    """Forget ``cls``; tensors of it then go straight to the kernels."""
    if _KINDS.pop(cls, None) is None:
        from flow.errors import FlowError

        raise FlowError(f"unregister_array_kind: {getattr(cls, '__name__', cls)!r} is not a registered array kind")


def registered_array_kinds() -> dict:
    """``{class: handler}`` of the registered array kinds (a copy)."""
    return dict(_KINDS)


def handler_for(array: Any) -> Callable | None:
    """The handler registered for ``type(array)``, or None (a plain array)."""
    return _KINDS.get(array.__class__)


def is_kind_array(array: Any) -> bool:
    """Whether ``array`` is of a registered array kind."""
    return array.__class__ in _KINDS


def storage_of(array: Any) -> Any:
    """The device array behind a tensor's data: the array itself, or an array kind's ``storage``
    (a global tensor's local piece), which optimizer states and compiled graphs work on."""
    return array if array.__class__ is np.ndarray else getattr(array, "storage", array)


def flow_dtype(dt) -> D.dtype:
    """The ``flow.dtype`` of an array's ``dtype`` (a NumPy dtype or a flow dtype)."""
    if isinstance(dt, D.dtype):
        return dt
    r = D.NP_TO_DTYPE.get(dt)
    if r is None:
        r = D.NP_TO_DTYPE.get(np.dtype(dt))
    if r is None:
        from flow.errors import OpTypeError

        raise OpTypeError("wrap", f"array dtype {dt} is not a flow dtype")
    return r


def wrap(array: Any, device=None, *, dtype=None, requires_grad: bool = False):
    """A ``flow.Tensor`` whose data is ``array`` (of a kind, or a plain array), taking dtype and device from it.

    ``device``: used when the array has no ``device`` of its own (default: the CPU). ``dtype`` overrides
    the array's (for kinds whose ``dtype`` is not one flow knows). The tensor is a leaf; :func:`record`
    links outputs of an op to its inputs.
    """
    dev = getattr(array, "device", None)
    if dev is None or isinstance(array, np.ndarray):
        dev = device
    if dev is None:
        dev = CPU
    elif dev.__class__ is not _device:
        dev = _device(dev)
    dt = array.dtype if dtype is None else dtype
    if dt.__class__ is not D.dtype:
        dt = flow_dtype(dt)
    t = _dispatch.Tensor._make(array, dt, dev)
    if requires_grad:
        t.requires_grad = True
    return t


def run_kernel(op, *arrays, device: str = "cpu", dtype=None, **attrs):
    """Run ``op``'s registered kernel on plain arrays (a kind's local pieces) and return its raw result.

    No interceptor, array kind, meta rule or autograd is involved: this is the call the dispatcher
    makes once it has checked the inputs. ``device`` is the device type whose kernel runs; ``dtype``
    the dtype that selects the kernel (default: that of the first array argument).
    """
    op = _dispatch.opdef(op)
    if dtype is None:
        for a in arrays:
            if isinstance(a, (list, tuple)) and a:
                a = a[0]
            if hasattr(a, "dtype") and not isinstance(a, np.generic):
                dtype = a.dtype
                break
        else:
            from flow.errors import OpTypeError

            raise OpTypeError(op.name, "run_kernel: no array argument to take the dtype from; pass dtype=")
    dt = flow_dtype(dtype)
    dev_type = device.type if hasattr(device, "type") else str(device)
    kern = op._kcache.get((dev_type, dt))
    if kern is None:
        kern = _dispatch._resolve(op, dev_type, dt)
    return kern(*arrays, **attrs)


def record(op, inputs: tuple, attrs: dict, outputs, *, around: Callable[[], ContextManager] | None = None):
    """Record autograd for an op call a handler (or an interceptor) answered itself.

    ``inputs`` and ``attrs`` are the call's own (as the handler received them), ``outputs`` the tensor
    or tuple of tensors it returns. When grad mode is on, the op has a gradient and an input requires
    grad, the floating outputs get a ``grad_fn`` and ``backward()`` will call the op's gradient formula
    on them (its ops go through the dispatcher, so the handler sees them). ``around()``, if given, is
    entered while that gradient runs (the graph tracer marks the ops it records as backward ops with
    it). Returns the autograd node, or None when nothing was recorded.
    """
    from flow._tensor import Tensor
    from flow.autograd.grad_mode import STATE
    from flow.autograd.node import GradAround, Node

    op = _dispatch.opdef(op)
    if op.grad is None or not STATE.grad_enabled or not _any_requires_grad(inputs, Tensor):
        return None
    outs = outputs if isinstance(outputs, tuple) else (outputs,)
    n = Node.record(op, tuple(inputs), attrs, outs)
    tracing = sys.modules.get("flow.graph.tracer")
    tr = tracing.active_tracer() if tracing is not None else None
    if tr is not None and getattr(getattr(around, "func", None), "__self__", None) is not tr:
        # a handler's call while a graph is traced: the ops its gradient records are backward ops
        around = _both(around, tr.backward_region)
    if around is not None:
        n.op = GradAround(op, around)
    return n


def _any_requires_grad(inputs, Tensor) -> bool:
    for x in inputs:
        if isinstance(x, Tensor):
            if x._requires_grad:
                return True
        elif x.__class__ is list or x.__class__ is tuple:
            for t in x:
                if isinstance(t, Tensor) and t._requires_grad:
                    return True
    return False


def _both(first, second):
    if first is None:
        return second

    @contextmanager
    def both():
        with first(), second():
            yield

    return both
