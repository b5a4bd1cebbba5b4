"""Constants while tracing: values computed from constants only are known when build runs.

A value computed from constants only (tensors made inside build by factory functions, tensors
captured from outside it, and what ops compute from those: no graph input, no parameter or
buffer, no random draw) is the same at every step. The tracer records such ops as nodes as usual
(the constant-folding pass folds them later), but where the value itself is needed while tracing
it computes it then, with the ops' own kernels (:func:`constant_array`): for an op whose output
shape depends on its input's values (``nonzero``, so boolean-mask indexing and ``masked_select``),
which then runs at trace time and becomes a constant of the graph (:func:`fold_dynamic_call`),
e.g. the ``triu(ones(n, n), diagonal=1).bool()`` mask of DLRM's interaction; and for reads of a
tensor's host value (``item()``, ``unique``), see :class:`flow.graph.symbolic.SymbolicArray`.

Where such an op's input depends on the step's data, the trace fails with
:func:`dynamic_shape_error`: a compiled graph has fixed shapes and is not split into eager
pieces around the op (there are no graph breaks).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from flow import array_kinds
from flow._tensor import Tensor
from flow.autograd.grad_mode import no_grad
from flow.graph.ir import Value
from flow.graph.symbolic import GraphTraceError, SymbolicArray

# how the flow function the user called reads in an error (the outermost flow frame's name)
_CALLERS = {
    "__getitem__": "boolean-mask indexing (x[mask])",
    "getitem": "boolean-mask indexing (x[mask])",
    "__setitem__": "boolean-mask assignment (x[mask] = v)",
    "masked_select": "masked_select()",
    "nonzero": "nonzero()",
    "argwhere": "argwhere()",
}


def _own(a, inputs):
    # own the memory: a view would alias an input, which may be a captured tensor that changes later
    if getattr(a, "base", None) is not None or any(a is b for b in inputs):
        return a.copy()
    return a


def constant_array(tracer, v: Value):
    """The array ``v`` holds at every step when it is computed from constants only, else None.

    Graph constants give their array; a node's outputs are computed now (by the op's own kernels,
    on its device) when the node draws no random numbers, does not communicate and all its tensor
    inputs are such values in turn. Results are remembered per trace, so a chain runs once.
    """
    memo = tracer.folded
    if v.id in memo:
        return memo[v.id]
    if v.kind == "const":
        return tracer.ir.constants.get(v.id)
    n = v.producer
    if v.kind != "node" or n is None or n.op.nondeterministic or n.op.collective or n.tags.get("side_effect"):
        memo[v.id] = None
        return None
    args = []
    arrays = []
    for a in n.inputs:
        if a.__class__ is Value or a.__class__ is list:
            items = []
            for x in a if a.__class__ is list else (a,):
                arr = constant_array(tracer, x)
                if arr is None:
                    memo[v.id] = None
                    return None
                arrays.append(arr)
                items.append(array_kinds.wrap(arr, x.device, dtype=x.dtype))
            args.append(items if a.__class__ is list else items[0])
        else:
            args.append(a.value)  # a literal input
    from flow.interceptors import run_op

    try:
        with no_grad():
            out = run_op(n.op, tuple(args), n.attrs)
    except Exception:  # no kernel here, or a failure: leave it to run time, which reports the user's line
        out = None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    ok = out is not None and len(outs) == len(n.outputs)
    for o, t in zip(n.outputs, outs):
        a = getattr(t, "_data", None)
        good = ok and a.__class__ is not SymbolicArray and tuple(a.shape) == o.shape
        memo[o.id] = _own(a, arrays) if good else None
    return memo.get(v.id)


def fold_dynamic_call(tracer, op, inputs: tuple, attrs: dict):
    """Run ``op`` (whose output shape depends on its input's values) now, when every tensor input is
    computed from constants only: its outputs become graph constants. ``NotImplemented`` otherwise."""
    if op.nondeterministic or op.collective:
        return NotImplemented
    args = []
    arrays = []
    for x in inputs:
        seq = x.__class__ is list or x.__class__ is tuple
        items = []
        for t in x if seq else (x,):
            if not isinstance(t, Tensor):
                if seq:
                    return NotImplemented  # the normal path explains the bad sequence
                items.append(t)
                continue
            if t._requires_grad and op.grad is not None:
                return NotImplemented  # folding would cut its gradient
            d = t._data
            if d.__class__ is SymbolicArray:
                a = constant_array(tracer, d.value) if d.tracer is tracer else None
            elif d.__class__ is np.ndarray or not array_kinds.is_kind_array(d):
                a = d  # a concrete tensor: made inside build, or captured (a constant either way)
            else:
                a = None  # an array kind's tensor (a global tensor): its handler traces it
            if a is None:
                return NotImplemented
            arrays.append(a)
            items.append(array_kinds.wrap(a, t.device, dtype=t.dtype))
        args.append(items if seq else items[0])
    if not arrays:
        return NotImplemented
    from flow.interceptors import run_op

    try:
        with no_grad():
            out = run_op(op, tuple(args), attrs)
    except Exception:
        return NotImplemented
    multi = isinstance(out, (tuple, list))
    consts = []
    for o in out if multi else (out,):
        v = tracer.ir.add_constant(_own(o._data, arrays), o.dtype, o.device, name=f"folded {op.name}")
        consts.append(tracer.tensor_of(v))
    return tuple(consts) if multi else consts[0]


def _caller() -> str:
    """The flow function the user called that ran the op (outermost frame inside flow)."""
    import flow

    root = os.path.dirname(os.path.abspath(flow.__file__)) + os.sep
    f = sys._getframe(2)
    last = None
    while f is not None and f.f_code.co_filename.startswith(root):
        last = f.f_code.co_name
        f = f.f_back
    return _CALLERS.get(last or "", "")


def _origin(tracer, inputs: tuple) -> str:
    """What the first non-constant tensor input is made by (an op and its line, an input, a state)."""
    for x in inputs:
        for t in x if x.__class__ is list or x.__class__ is tuple else (x,):
            if isinstance(t, Tensor) and t._data.__class__ is SymbolicArray and t._data.value.kind != "const":
                return tracer.describe_value(t._data.value)
    return ""


def dynamic_shape_error(tracer, op, inputs: tuple) -> GraphTraceError:
    """The error for an op whose output shape depends on values that are only known at run time."""
    loc = tracer.user_location()
    at = f" at {loc.short()}" if loc else ""
    via = _caller()
    via = f" (called by {via})" if via else ""
    origin = _origin(tracer, inputs)
    made = f" (its input is made by {origin}, from the step's inputs or parameters)" if origin else ""
    return GraphTraceError(
        f"graph tracing: op '{op.name}'{at}{via} has an output shape that depends on the input values"
        f"{made}, which a compiled graph cannot have: its shapes are fixed and it is not split around "
        "such ops (no graph breaks). Build the mask or index "
        "from constants only (it is then computed while tracing), use a fixed-shape form "
        "(flow.where, index_select with a constant index), or run this part eagerly"
    )
