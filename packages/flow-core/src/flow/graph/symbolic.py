"""Symbolic arrays: what a traced tensor's ``_data`` is while build runs.

A :class:`SymbolicArray` has a shape and a NumPy dtype (like the ``meta`` test device's arrays)
and names the IR value it currently holds. It behaves like a *variable*: an in-place write
(``a[...] = b``, ``a += b``, which is how ``copy_``, ``add_``, ``fill_`` and the autograd engine
mutate tensors) records the new value and re-points the array at it, so later readers see the
new value and the tracer can turn "this state tensor ends with another value" into an explicit
state update. Asking for data (``item()``, ``numpy()``, ``bool()``, ``float()``, printing) raises
:class:`GraphTraceError` naming the op that made the tensor and the line of build that asked,
unless the array holds a constant of the graph (a value computed from constants only, see
:mod:`flow.graph.trace_constants`): reads of its host value (``item()``, ``unique``) get the data.

It is an array kind (:mod:`flow.array_kinds`, registered by :mod:`flow.graph.tracer`): it follows
the array protocol (``shape``, ``dtype``, ``copy()``, ``a[...] = b``; its ``__array__`` raises), and
an op on a symbolic tensor that reaches the dispatcher goes to the tracer that made it.
"""

from __future__ import annotations

import sys

import numpy as np

from flow.errors import FlowError


class GraphTraceError(FlowError):
    """User code asked for something a symbolic tensor cannot give while a graph is traced."""


class SymbolicArray:
    """Shape and dtype of a traced tensor, and the IR value it holds now."""

    __slots__ = ("shape", "dtype", "value", "tracer", "__weakref__")
    base = None  # never a view of another array (views are values of their own)

    def __init__(self, shape, dtype, value, tracer) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.value = value
        self.tracer = tracer

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def copy(self) -> "SymbolicArray":
        """A snapshot: holds the current value; later writes to this array do not change it."""
        return SymbolicArray(self.shape, self.dtype, self.value, self.tracer)

    # -- in-place writes -----------------------------------------------------------------
    def __setitem__(self, key, val) -> None:
        if not _is_full(key):
            raise self._error(
                "an in-place write to part of a tensor outside an op (x[i] = v under no_grad, or through a raw array)",
                hint="write the whole tensor, or run the assignment with grad enabled so that it is recorded as an op",
            )
        self.tracer.assign(self, val)

    def __iadd__(self, other):
        self.tracer.inplace_binary(self, other, "add")
        return self

    def __imul__(self, other):
        self.tracer.inplace_binary(self, other, "mul")
        return self

    def __isub__(self, other):
        self.tracer.inplace_binary(self, other, "sub")
        return self

    # -- asking for data -----------------------------------------------------------------
    def _error(self, what: str, hint: str = "") -> GraphTraceError:
        what = _entry_point() or what
        t = self.tracer
        src = t.describe_value(self.value) if t is not None else "a traced op"
        where = t.user_location() if t is not None else None
        at = f" at {where.short()}" if where is not None else ""
        hint = hint or (
            "move value-dependent Python code out of build (return the tensor and read it after the "
            "graph call), or run this part eagerly"
        )
        return GraphTraceError(
            f"graph tracing: {what}{at} needs the data of a tensor of shape {self.shape} "
            f"({self.dtype}) made by {src}, but while a graph is traced tensors are symbolic "
            f"(shapes only); {hint}"
        )

    def _constant(self):
        """The host data when this array holds a constant of its trace (computed from constants only,
        see :mod:`flow.graph.trace_constants`), else None."""
        v = self.value
        t = self.tracer
        if t is None:
            return None
        a = t.constant_array(v)
        if a is None or v.device.type == "cpu":
            return a
        from flow.registry import get_device_type

        return get_device_type(v.device.type).to_host(a)

    def __array__(self, dtype=None, copy=None):
        # a constant gives its data to reads of a tensor's host value (Tensor.numpy_host: item(),
        # unique, ...) only: NumPy's ``concrete[...] = sym`` (an in-place op on a tensor captured by
        # build) calls __array__ too, and that write would happen once while tracing instead of at
        # every step, so it keeps raising
        caller = sys._getframe(1).f_code
        if caller.co_name == "_kind_host" and caller.co_filename.endswith("_tensor.py"):
            c = self._constant()
            if c is not None:
                return np.array(c, dtype=dtype) if copy else np.asarray(c, dtype=dtype)
        raise self._error(
            "converting a traced tensor to a NumPy array (numpy(), item(), printing, or writing it "
            "into a tensor that is not part of the graph)"
        )

    def item(self, *args):
        c = self._constant()
        if c is not None:
            return np.asarray(c).item(*args)
        raise self._error("item()")

    def tolist(self):
        c = self._constant()
        if c is not None:
            return np.asarray(c).tolist()
        raise self._error("tolist()")

    def __bool__(self):
        raise self._error("bool() / an if-statement on a tensor")

    def __float__(self):
        raise self._error("float()")

    def __int__(self):
        raise self._error("int()")

    def __index__(self):
        raise self._error("using a tensor as an index")

    def __iter__(self):
        raise self._error("iterating over the raw data")

    def reshape(self, *shape):
        raise self._error("reshaping the raw array outside an op")

    def astype(self, *a, **k):
        raise self._error("converting the raw array outside an op")

    def __getitem__(self, key):
        raise self._error("indexing the raw array outside an op")

    def __repr__(self) -> str:
        return f"SymbolicArray(shape={self.shape}, dtype={self.dtype}, value=%{getattr(self.value, 'id', '?')})"


_FRIENDLY = {
    "__bool__": "bool() (an if-statement or a comparison on a tensor)",
    "__float__": "float()",
    "__int__": "int()",
    "__index__": "using a tensor as an index",
    "__repr__": "printing a tensor",
    "__str__": "printing a tensor",
    "__format__": "formatting a tensor",
    "__array__": "np.asarray()",
    "__iter__": "iterating over a tensor",
    "__len__": "len()",
}


def _entry_point() -> str:
    """The flow API the user called that ended up needing data (``item()``, ``numpy()``, ...)."""
    import os
    import sys

    import flow

    root = os.path.dirname(os.path.abspath(flow.__file__)) + os.sep
    here = os.path.abspath(__file__)
    f = sys._getframe(2)
    last = None
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(root):
            break
        if fn != here:
            last = f.f_code.co_name
        f = f.f_back
    if last is None or last.startswith("_") and last not in _FRIENDLY:
        return ""
    return _FRIENDLY.get(last, f"{last}()")


def _whole(k) -> bool:
    return k is Ellipsis or (k.__class__ is slice and k == slice(None))


def _is_full(key) -> bool:
    if key.__class__ is tuple:
        return all(_whole(k) for k in key)
    return _whole(key)
