"""The tracer: run build once with symbolic tensors and record every op call as an IR node.

It is an eager interceptor (:mod:`flow.interceptors`): each op call is answered by running the
op's meta rule and returning flow Tensors whose ``_data`` is a
:class:`~flow.graph.symbolic.SymbolicArray`, recorded for autograd with
:func:`flow.array_kinds.record`, so ``loss.backward()`` inside build runs the ops' gradient
formulas, which are intercepted in turn. The tracer stays an interceptor because factory ops
(no tensor input) and ops on concrete tensors inside build must be recorded too; the symbolic
array is also an array kind (:mod:`flow.array_kinds`), so an op on a symbolic tensor that reaches
the dispatcher below the interceptors (called by an interceptor outside the tracer, or through
``run_op``) still goes to its tracer, and one run outside its trace raises a clear error.
Parameters, buffers and optimizer states become state inputs bound to their live arrays; tensors
created while tracing (or captured from outside without being state) become constants; Python
scalars stay literal inputs of the nodes.

While tracing it also installs global module hooks (the module scope of each node).
``optimizer.step()`` and dropout need nothing special: their updates and masks are ops
(``sgd_update``, ``adam_update``, ``optimizer_update``, ``bernoulli_mask``) recorded like any
other; the optimizers' states and host values are bound by :mod:`flow.graph.optim_trace`.
Everything it touched (``_data``, ``.grad``, ``requires_grad``, ``grad_fn``, version counters of
state tensors) is restored afterwards, even when tracing fails.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from functools import partial

import numpy as np

from flow import _dtype as D
from flow import array_kinds
from flow._dispatch import _meta_inputs
from flow._tensor import Tensor
from flow.autograd.grad_mode import STATE, no_grad
from flow.errors import OpTypeError
from flow.graph.ir import GraphIR, HostSpec, Lit, SourceLoc, StateSpec, Value
from flow.graph.symbolic import GraphTraceError, SymbolicArray
from flow.graph.trace_constants import constant_array, dynamic_shape_error, fold_dynamic_call
from flow.interceptors import intercept
from flow.ops.meta import TensorMeta

_FLOW_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # flow's own folder
# folders whose frames are not the user's code when a node's source line is looked for: flow's and
# those of plugins that run ops for the user (flow-dist's handler), see register_library_dir
_LIBRARY_DIRS: tuple = (_FLOW_DIR,)


def register_library_dir(path: str) -> None:
    """Treat code under ``path`` (a plugin's package folder) like flow's own when the tracer looks
    for the user's line of a node (``print(graph)``, error messages)."""
    global _LIBRARY_DIRS
    d = os.path.abspath(path).rstrip(os.sep) + os.sep
    if d not in _LIBRARY_DIRS:
        _LIBRARY_DIRS = _LIBRARY_DIRS + (d,)


class _Tracing(threading.local):
    """The tracers running in this thread (innermost last): tracing is per thread, so eager code
    in other threads (a data pipeline, an evaluation loop) runs untouched while a graph traces."""

    def __init__(self) -> None:
        self.stack: list = []


_ACTIVE = _Tracing()


def active_tracer():
    """The innermost tracer running in this thread, or None."""
    stack = _ACTIVE.stack
    return stack[-1] if stack else None


# -- pytrees: the structure of build's inputs and outputs -----------------------------------------
def flatten(obj, leaves: list):
    """Append the tensors of a nested tuple/list/dict to ``leaves``; return the structure."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return ("T",)
    if obj.__class__ in (tuple, list):
        return (obj.__class__.__name__, tuple(flatten(o, leaves) for o in obj))
    if obj.__class__ is dict:
        keys = tuple(obj)
        return ("dict", keys, tuple(flatten(obj[k], leaves) for k in keys))
    return ("L", obj)


def unflatten(tree, leaves):
    it = iter(leaves)

    def build(t):
        tag = t[0]
        if tag == "T":
            return next(it)
        if tag == "tuple":
            return tuple(build(s) for s in t[1])
        if tag == "list":
            return [build(s) for s in t[1]]
        if tag == "dict":
            return {k: build(s) for k, s in zip(t[1], t[2])}
        return t[1]

    return build(tree)


def tree_key(tree):
    """A hashable form of a structure (literal leaves by value where they can be hashed)."""
    try:
        hash(tree)
        return tree
    except TypeError:
        return repr(tree)


def _symbolic_kind(op, inputs: tuple, attrs: dict):
    """The array-kind handler of :class:`SymbolicArray`: the call goes to the tracer of its first
    symbolic input, if that trace is running in this thread."""
    tracer = None
    for x in inputs:
        if x.__class__ is list or x.__class__ is tuple:
            x = next((t for t in x if isinstance(t, Tensor) and t._data.__class__ is SymbolicArray), None)
        if isinstance(x, Tensor) and x._data.__class__ is SymbolicArray:
            tracer = x._data.tracer
            break
    if tracer is None or tracer not in _ACTIVE.stack:
        raise GraphTraceError(
            f"graph tracing: op '{op.name}' was called on a symbolic tensor outside the trace "
            "that made it (after build returned, or in another thread); do not keep tensors "
            "from inside build across calls"
        )
    return tracer(op, inputs, attrs)


array_kinds.register_array_kind(SymbolicArray, _symbolic_kind)


class Tracer:
    """Records one traced step into ``self.ir``. Use :func:`trace`."""

    def __init__(self, name: str, entry_codes=(), module_names: dict | None = None) -> None:
        self.ir = GraphIR(name)
        self.entry_codes = set(entry_codes)
        self.module_names = dict(module_names or {})
        self._saved: dict[int, tuple] = {}  # id(tensor) -> (tensor, fields to restore, initial value)
        self._array_states: list = []  # (SymbolicArray, initial Value) of states that are not tensors' data
        self._consts: dict[int, tuple] = {}
        self._scope: list[str] = [""]
        self._bwd: list = []
        self.phase = "forward"
        self.last_node = None
        self._captured = 0
        self.folded: dict[int, object] = {}  # value id -> its array when computed from constants (or None)

    # -- states, hosts, constants --------------------------------------------------------
    def add_state_tensor(self, t: Tensor, name: str, kind: str) -> Value:
        """Make ``t`` a state input: its ``_data`` becomes symbolic until tracing ends."""
        prev = self._saved.get(id(t))
        if prev is not None:
            return prev[2]
        d = t._data
        if d.__class__ is SymbolicArray or array_kinds.storage_of(d).__class__ is SymbolicArray:
            raise GraphTraceError(f"graph tracing: state tensor '{name}' is already being traced by another graph")
        if d.__class__ is np.ndarray or not array_kinds.is_kind_array(d):
            get = partial(getattr, t, "_data")
            a = d
        else:  # an array kind: the graph holds its storage (this process's piece)
            a = _check_kind(d, f"state tensor '{name}'")
            get = partial(_storage_of, t)
        v = self.ir.add_state(TensorMeta(tuple(a.shape), t.dtype, t.device), StateSpec(name, kind, get, t))
        if a is not d:
            v.attrs.update(d.layout())
        self._saved[id(t)] = (t, (d, t.grad, t._requires_grad, t.grad_fn, t._version[0]), v)
        sym = SymbolicArray(a.shape, a.dtype, v, self)
        t._data = sym if a is d else d.with_storage(sym)
        t.grad = None
        return v

    def add_state_array(self, name: str, kind: str, meta, get) -> Tensor:
        """A state that is not a tensor's data (an optimizer buffer): returns a symbolic tensor for it."""
        v = self.ir.add_state(meta, StateSpec(name, kind, get))
        sym = SymbolicArray(meta.shape, meta.dtype.np, v, self)
        self._array_states.append((sym, v))
        return array_kinds.wrap(sym, meta.device, dtype=meta.dtype)

    def host_input(self, name: str, meta, feed) -> Tensor:
        """A value the runtime computes on the host before every step (learning rate, step count)."""
        v = self.ir.add_host(meta, HostSpec(name, feed))
        return self.tensor_of(v)

    def tensor_of(self, v: Value) -> Tensor:
        return array_kinds.wrap(SymbolicArray(v.shape, v.dtype.np, v, self), v.device, dtype=v.dtype)

    @contextmanager
    def _backward_of(self, node):
        """While the gradient of IR node ``node`` runs, the ops it records are its backward ops."""
        bwd = self._bwd
        bwd.append(node)
        try:
            yield
        finally:
            bwd.pop()

    def backward_region(self):
        """While the gradient of a call an array kind's handler recorded runs: its ops are backward ops."""
        return self._backward_of(None)

    def value_of(self, x: Tensor) -> Value:
        """The IR value a tensor holds now (a concrete tensor becomes a constant, or a captured state)."""
        d = x._data
        if d.__class__ is not SymbolicArray and d.__class__ is not np.ndarray and array_kinds.is_kind_array(d):
            s = array_kinds.storage_of(d)
            if s.__class__ is SymbolicArray:  # a tensor of an array kind made while tracing: its piece
                d = s
        if d.__class__ is SymbolicArray:
            if d.tracer is not self:
                raise GraphTraceError(
                    "graph tracing: a symbolic tensor from another (or a finished) trace was "
                    "used; do not keep tensors from inside build across calls"
                )
            return d.value
        if x._requires_grad and x.grad_fn is None:  # a parameter nobody declared: still live state
            self._captured += 1
            return self.add_state_tensor(x, f"captured.{self._captured - 1}", "captured")
        c = self._consts.get(id(x))
        if c is not None and c[1] is d and c[2] == x._version[0]:
            return c[3]
        _check_plain(d, "a tensor captured by build (a constant of the graph)")
        arr = d.copy() if isinstance(d, np.ndarray) else d
        v = self.ir.add_constant(arr, x.dtype, x.device)
        self._consts[id(x)] = (x, d, x._version[0], v)
        return v

    def constant_array(self, v: Value):
        """The array ``v`` holds at every step if it is computed from constants only (computed now), else None."""
        return constant_array(self, v)

    def describe_value(self, v: Value) -> str:
        if v.kind == "node" and v.producer is not None:
            n = v.producer
            where = f" at {n.loc.short()}" if n.loc is not None else ""
            return f"op '{n.name}'{where}"
        return f"{v.kind} '{v.name}'" if v.name else f"a graph {v.kind}"

    # -- source locations and scopes ------------------------------------------------------
    def user_location(self) -> SourceLoc | None:
        """The line of build (or the traced function) running now, and the innermost user line."""
        f = sys._getframe(1)
        inner = None
        entry = self.entry_codes
        while f is not None:
            code = f.f_code
            if code in entry:
                if inner is None:
                    return SourceLoc(code.co_filename, f.f_lineno, code.co_name)
                return SourceLoc(code.co_filename, f.f_lineno, code.co_name, *inner)
            if inner is None and not code.co_filename.startswith(_LIBRARY_DIRS):
                inner = (code.co_filename, f.f_lineno, code.co_name)
            f = f.f_back
        return SourceLoc(*inner) if inner is not None else None

    def _pre_hook(self, module, args):
        if active_tracer() is not self:  # a module called in another thread, or by an inlined graph
            return
        name = self.module_names.get(id(module))
        if name is None:
            parent = self._scope[-1]
            name = f"{parent}.{type(module).__name__}" if parent else type(module).__name__
        self._scope.append(name)
        # module calls as [name, first id, end id): the nodes made during the call (activation checkpointing)
        self.ir.meta.setdefault("module_calls", []).append([name, self.ir._next, None])

    def _post_hook(self, module, args, out):
        if active_tracer() is not self:
            return
        if len(self._scope) > 1:
            name = self._scope.pop()
            for call in reversed(self.ir.meta.get("module_calls", ())):
                if call[0] == name and call[2] is None:
                    call[2] = self.ir._next
                    break

    # -- the interceptor -----------------------------------------------------------------
    def __call__(self, op, inputs: tuple, attrs: dict):
        if op.dynamic_shape:
            # on a value computed from constants only (a triu mask) the op runs now: its result is a constant
            folded = fold_dynamic_call(self, op, inputs, attrs)
            if folded is NotImplemented:
                raise dynamic_shape_error(self, op, inputs)
            return folded
        for x in inputs:  # another array kind's tensor (a global one): its handler answers first and
            # runs the op on its pieces, which are symbolic and come back here (the symbolic kind)
            for t in x if x.__class__ is list or x.__class__ is tuple else (x,):
                if isinstance(t, Tensor) and _other_kind(t._data):
                    if not _traceable(t._data):  # captured by build: it would be a constant
                        _check_plain(t._data, "a tensor captured by build (a constant of the graph)")
                    return NotImplemented
        args = []
        needs_grad = False
        dev = None
        for x in inputs:
            if isinstance(x, Tensor):
                args.append(self.value_of(x))
                needs_grad = needs_grad or x._requires_grad
                dev = dev or x.device
            elif x.__class__ is list or x.__class__ is tuple:
                seq = []
                for t in x:
                    if not isinstance(t, Tensor):
                        raise OpTypeError(
                            op.name, f"expected a sequence of Tensors, got an element of type {type(t).__name__}"
                        )
                    seq.append(self.value_of(t))
                    needs_grad = needs_grad or t._requires_grad
                    dev = dev or t.device
                args.append(seq)
            else:
                args.append(Lit(x))
        if dev is None:
            raise OpTypeError(op.name, "expected at least one Tensor input")
        meta = op.meta(*_meta_inputs(inputs), **attrs)
        multi = isinstance(meta, (tuple, list))
        metas = tuple(meta) if multi else (meta,)
        tags = {"phase": self.phase}
        scope = self._scope[-1]
        loc = self.user_location()
        if self._bwd:
            fwd = self._bwd[-1]
            if fwd is None:  # the gradient of a call an array kind's handler recorded
                tags = {"phase": "backward"}
            else:
                tags = {"phase": "backward", "bwd_of": fwd.id}
                scope = fwd.scope
                if fwd.loc is not None:
                    tags["fwd_loc"] = fwd.loc.short()
        if multi:
            tags["multi_output"] = True
        node = self.ir.add_node(op, args, attrs, metas, loc, scope, tags)
        self.last_node = node
        outs = tuple(self.tensor_of(v) for v in node.outputs)
        if needs_grad and op.grad is not None and STATE.grad_enabled:
            array_kinds.record(op, inputs, attrs, outs, around=partial(self._backward_of, node))
        return outs if multi else outs[0]

    # -- in-place writes on symbolic arrays ----------------------------------------------
    def assign(self, dst: SymbolicArray, val) -> None:
        """``dst[...] = val``: ``dst`` now holds ``val`` (broadcast and cast to it)."""
        dv = dst.value
        if isinstance(val, SymbolicArray):
            t = self.tensor_of(val.value)
            if tuple(t.shape) != dst.shape:
                t = t.expand(*dst.shape)
            if t.dtype.np != dst.dtype:
                t = t.to(D.NP_TO_DTYPE[dst.dtype])
            dst.value = t._data.value
            return
        if isinstance(val, (np.ndarray, np.generic, int, float, bool)):
            arr = np.array(np.broadcast_to(np.asarray(val, dtype=dst.dtype), dst.shape))
            dst.value = self.ir.add_constant(arr, D.NP_TO_DTYPE[dst.dtype], dv.device)
            return
        raise GraphTraceError(f"graph tracing: cannot write a {type(val).__name__} into a traced tensor")

    def inplace_binary(self, dst: SymbolicArray, other, opname: str) -> None:
        a = self.tensor_of(dst.value)
        b = self.tensor_of(other.value) if isinstance(other, SymbolicArray) else other
        with no_grad():
            r = a + b if opname == "add" else a * b if opname == "mul" else a - b
        self.assign(dst, r._data)

    # -- running -------------------------------------------------------------------------
    @contextmanager
    def active(self):
        from flow.nn.modules import hooks as mhooks

        pre = mhooks.register_module_forward_pre_hook(self._pre_hook)
        post = mhooks.register_module_forward_hook(self._post_hook)
        stack = _ACTIVE.stack
        stack.append(self)
        try:
            with intercept(self):
                yield self
        finally:
            stack.pop()
            pre.remove()
            post.remove()
            self.restore()

    def finish_updates(self) -> None:
        """Turn "this state ends with another value" into explicit state updates."""
        ir = self.ir
        for t, _, v0 in self._saved.values():
            d = t._data
            if d.__class__ is not SymbolicArray and array_kinds.storage_of(d).__class__ is SymbolicArray:
                d = array_kinds.storage_of(d)  # an array kind's state: its piece
            if d.__class__ is SymbolicArray:
                if d.value is not v0:
                    ir.updates.append((v0, d.value))
            else:  # replaced by a concrete array while tracing (param.data = ...)
                ir.updates.append((v0, self.value_of(t)))
        for sym, v0 in self._array_states:
            if sym.value is not v0:
                ir.updates.append((v0, sym.value))

    def restore(self) -> None:
        for t, (data, grad, rg, gfn, ver), _ in self._saved.values():
            t._data = data
            t.grad = grad
            t._requires_grad = rg
            t.grad_fn = gfn
            t._version[0] = ver


def _check_plain(a, what: str) -> None:
    """A constant of a compiled graph is a device array: the data of an array kind (a global
    tensor) can be an input or a state (see :func:`_check_kind`), not a constant."""
    if a.__class__ is not np.ndarray and array_kinds.is_kind_array(a) and a.__class__ is not SymbolicArray:
        raise GraphTraceError(
            f"graph tracing: {what} is a tensor of array kind {type(a).__name__}; a compiled graph "
            "bakes such tensors in as constants, which it cannot do for an array kind: pass it as an "
            "argument of the step, or make it a parameter or buffer of a module the graph knows"
        )


def _storage_of(t: Tensor):
    return t._data.storage


def _other_kind(d) -> bool:
    return d.__class__ is not np.ndarray and d.__class__ is not SymbolicArray and array_kinds.is_kind_array(d)


def _traceable(d) -> bool:
    return hasattr(d, "storage") and hasattr(d, "with_storage") and hasattr(d, "layout")


def _check_kind(d, what: str):
    """The storage of an array-kind input or state of a compiled graph (which runs on it): the kind
    must give ``storage``, ``with_storage`` and ``layout`` (see flow.array_kinds)."""
    missing = [k for k in ("storage", "with_storage", "layout") if not hasattr(d, k)]
    if missing:
        raise GraphTraceError(
            f"graph tracing: {what} is a tensor of array kind {type(d).__name__}, which has no "
            f"{', '.join(missing)}; a compiled graph runs on an array kind's storage and needs all "
            "three (see flow.array_kinds), so pass plain tensors or run this step eagerly"
        )
    a = d.storage
    if a.__class__ is not np.ndarray and array_kinds.is_kind_array(a):
        raise GraphTraceError(f"graph tracing: the storage of {what} is itself of array kind {type(a).__name__}")
    return a


def _check_literals(tree) -> None:
    tag = tree[0]
    if tag == "L":
        if isinstance(tree[1], SymbolicArray):
            raise tree[1]._error(
                "returning the raw array of a traced tensor (numpy())",
                hint="return the tensor itself; graph outputs are flow Tensors",
            )
    elif tag in ("tuple", "list"):
        for t in tree[1]:
            _check_literals(t)
    elif tag == "dict":
        for t in tree[2]:
            _check_literals(t)


def trace(
    fn,
    args: tuple,
    kwargs: dict,
    *,
    name: str = "graph",
    entry_codes=(),
    modules=None,
    optimizers=(),
    after=None,
    module_names=None,
) -> GraphIR:
    """Trace ``fn(*args, **kwargs)`` into a :class:`GraphIR`.

    ``modules``: ``{name: Module}`` whose parameters and buffers are state inputs; ``optimizers``:
    ``[(name, optimizer)]`` whose parameters and states are; ``after(tracer)`` runs once ``fn``
    returned, still tracing (nn.Graph steps its optimizers there).
    """
    from flow.graph import optim_trace

    if module_names is None:
        module_names = {}
        for mname, m in (modules or {}).items():
            for sub, mm in m.named_modules(prefix=mname):
                module_names.setdefault(id(mm), sub)
    tr = Tracer(name, entry_codes or (getattr(fn, "__code__", None),), module_names)
    tr.ir.meta["optimizer_names"] = {id(opt): oname for oname, opt in optimizers}
    for _, opt in optimizers:
        optim_trace.prepare(opt)
    leaves: list = []
    in_tree = flatten((args, kwargs), leaves)
    with tr.active(), optim_trace.binding(tr, optimizers) as optimizer_binding:
        for mname, m in (modules or {}).items():
            for pname, p in m.named_parameters(prefix=mname):
                tr.add_state_tensor(p, pname, "param")
            for bname, b in m.named_buffers(prefix=mname):
                if b is not None:
                    tr.add_state_tensor(b, bname, "buffer")
        optimizer_binding.bind()  # the optimizers' parameters, states and host values
        sym_leaves = []
        for i, t in enumerate(leaves):
            d = t._data
            kind = d.__class__ is not np.ndarray and array_kinds.is_kind_array(d)
            a = _check_kind(d, f"input {i}") if kind else d
            v = tr.ir.add_input(TensorMeta(tuple(a.shape), t.dtype, t.device), name=f"input{i}")
            s = tr.tensor_of(v)
            if kind:  # the graph's input is the kind's storage; build sees a tensor of the kind
                v.attrs.update(d.layout())
                s = array_kinds.wrap(d.with_storage(s._data), t.device, dtype=t.dtype)
            s._requires_grad = t._requires_grad and t.dtype.is_floating_point
            sym_leaves.append(s)
        sargs, skwargs = unflatten(in_tree, sym_leaves)
        out = fn(*sargs, **skwargs)
        if after is not None:
            after(tr)
        out_leaves: list = []
        tr.ir.out_tree = flatten(out, out_leaves)
        _check_literals(tr.ir.out_tree)
        tr.ir.outputs = [tr.value_of(t) for t in out_leaves]
        # outputs of an array kind: the graph computes their storage; the kind array made while
        # tracing is the template the runtime wraps each step's storage in (with_storage)
        kinds = {i: t._data for i, t in enumerate(out_leaves) if _other_kind(t._data)}
        if kinds:
            tr.ir.meta["output_kinds"] = kinds
            for i, d in kinds.items():
                tr.ir.outputs[i].attrs.update(d.layout())
        tr.finish_updates()
    tr.ir.meta["in_tree"] = in_tree
    return tr.ir
