"""Recording: the eager interceptor, ``record_function`` ranges, gradients and compiled plan nodes.

Everything here runs only while a profile records. The eager side is an interceptor
(:mod:`flow.interceptors`) that wraps every op call in a range; it sees composite ops too, so a
composite call is a range holding its primitive ops, as an aten op in PyTorch's profile holds
the ops it calls. The graph side is :data:`flow.graph.executor.PROFILE_HOOK`, which the executor
checks once per compiled step; it is ``None`` (no work) unless a profile records.
"""

from __future__ import annotations

import os
import threading
import traceback
from time import perf_counter_ns

import numpy as np

from flow import _dispatch
from flow._tensor import Tensor
from flow.profiler._events import FunctionEvent

_CURRENT: list = [None]  # the recording _Recorder, or None: the one test record_function pays when off
_FLOW_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class _Recorder:
    """The events of one recording cycle, with a stack of open ranges per thread."""

    def __init__(self, record_shapes: bool, profile_memory: bool, with_stack: bool) -> None:
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.events: list[FunctionEvent] = []  # in the order ranges opened
        self.local = threading.local()
        self.lock = threading.Lock()
        self.t0 = perf_counter_ns()

    def open(self, name: str, kind: str) -> FunctionEvent:
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        parent = stack[-1] if stack else None
        with self.lock:
            ev = FunctionEvent(len(self.events), name, kind, threading.get_native_id(), 0, parent)
            self.events.append(ev)
        if parent is not None:
            parent.cpu_children.append(ev)
        if self.with_stack:
            ev.stack = _user_stack()
        stack.append(ev)
        ev.start_ns = perf_counter_ns() - self.t0
        return ev

    def close(self, ev: FunctionEvent) -> None:
        ev.end_ns = perf_counter_ns() - self.t0
        stack = self.local.stack
        if stack and stack[-1] is ev:
            stack.pop()
        elif ev in stack:  # a range closed out of order (a ProfilerStep closed inside a block): close those above
            while stack.pop() is not ev:
                pass

    def finish(self) -> None:
        """Close the ranges still open in this thread (a profile left by an exception)."""
        for ev in reversed(getattr(self.local, "stack", [])):
            ev.end_ns = perf_counter_ns() - self.t0
        self.local.stack = []


def _user_stack() -> list[str]:
    """The caller's frames outside flow, innermost first, as PyTorch's ``file(line): function``."""
    frames = traceback.extract_stack()
    out = [f"{f.filename}({f.lineno}): {f.name}" for f in reversed(frames) if not f.filename.startswith(_FLOW_DIR)]
    return out[:16]


def _shape_of(x) -> list:
    if isinstance(x, Tensor):
        return list(x._data.shape)
    if isinstance(x, (list, tuple)) and x and all(isinstance(v, Tensor) for v in x):
        return [list(v._data.shape) for v in x]
    return []


def _new_bytes(outs, inputs) -> int:
    """Bytes of the output arrays that do not share memory with an input (in-place results and views
    of inputs allocate nothing)."""
    ins = [x._data for x in inputs if isinstance(x, Tensor) and isinstance(x._data, np.ndarray)]
    if isinstance(outs, Tensor):
        outs = (outs,)
    elif not isinstance(outs, (tuple, list)):
        return 0
    total = 0
    for t in outs:
        if not isinstance(t, Tensor):
            continue
        a = t._data
        if isinstance(a, np.ndarray) and any(np.may_share_memory(a, b) for b in ins):
            continue
        total += int(getattr(a, "nbytes", 0))
    return total


class _ProfiledGrad:
    """An autograd node's op whose gradient runs in a range named as the node (``mulBackward``)."""

    __slots__ = ("_op", "_name")

    def __init__(self, op, name: str) -> None:
        self._op = op
        self._name = name

    def __getattr__(self, name):
        return getattr(self._op, name)

    def grad(self, ctx, *grads):
        rec = _CURRENT[0]
        if rec is None:  # the backward of a profiled forward, run after the profile ended
            return self._op.grad(ctx, *grads)
        ev = rec.open(self._name, "backward")
        try:
            return self._op.grad(ctx, *grads)
        finally:
            rec.close(ev)


def _name_gradients(op, outs) -> None:
    for t in outs if isinstance(outs, (tuple, list)) else (outs,):
        n = getattr(t, "grad_fn", None) if isinstance(t, Tensor) else None
        if n is not None and getattr(n, "op", None) is op:  # a node this call recorded, not wrapped yet
            n.op = _ProfiledGrad(op, n.name())


def _offer_outer_composite(op, inputs, attrs):
    """Offer a composite call to the interceptors outside the profiler that see composites, as the
    dispatcher would if the profiler declined it."""
    state = _dispatch._CHAIN
    mine = state.visible
    i = (len(state.chain) if mine is None else mine) - 1
    while i >= 0:
        fn = state.chain[i]
        if getattr(fn, "sees_composites", False):
            state.visible = i
            try:
                r = fn(op, inputs, attrs)
            finally:
                state.visible = mine
            if r is not NotImplemented:
                return r
        i -= 1
    return NotImplemented


def _run_composite(op, inputs, attrs):
    r = _offer_outer_composite(op, inputs, attrs)
    if r is not NotImplemented:
        return r
    # The body runs as it would without the profiler: every interceptor (the profiler included)
    # sees its ops, so they become children of the composite's range.
    state = _dispatch._CHAIN
    mine = state.visible
    state.visible = None
    try:
        return op.fn(*inputs, **attrs)
    finally:
        state.visible = mine


def _interceptor(op, inputs, attrs):
    rec = _CURRENT[0]
    if rec is None:
        return NotImplemented
    composite = getattr(op, "is_composite", False)
    ev = rec.open(op.name, "composite" if composite else "op")
    if rec.record_shapes:
        ev.input_shapes = [_shape_of(x) for x in inputs]
    try:
        if composite:
            out = _run_composite(op, inputs, attrs)
        else:
            out = _dispatch.call(op, *inputs, **attrs)
    finally:
        rec.close(ev)
    if not composite:
        if rec.profile_memory:
            ev.own_memory = _new_bytes(out, inputs)
        _name_gradients(op, out)
    return out


_interceptor.sees_composites = True


class record_function:
    """A named range in the profile, as ``torch.profiler.record_function``: a context manager or a
    decorator. The ops run inside it are its children. Costs one test when no profile records.

    >>> with flow.profiler.profile() as prof:
    ...     with flow.profiler.record_function("loss"):
    ...         y = (x * x).sum()
    """

    def __init__(self, name: str, args: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"record_function: expected a non-empty name, got {name!r}")
        if args is not None and not isinstance(args, str):
            raise TypeError(f"record_function: args must be a string or None, got {type(args).__name__}")
        self.name = name
        self.args = args
        self._ev = None
        self._rec = None

    def __enter__(self) -> record_function:
        rec = _CURRENT[0]
        if rec is not None:
            self._rec = rec
            self._ev = rec.open(self.name, "user")
            if self.args is not None:
                self._ev.args["args"] = self.args
        return self

    def __exit__(self, *exc) -> None:
        if self._ev is not None:
            self._rec.close(self._ev)
            self._ev = self._rec = None

    def __call__(self, fn):
        import functools

        if not callable(fn):
            raise TypeError(f"record_function: can decorate a callable, got {type(fn).__name__}")
        name, args = self.name, self.args

        @functools.wraps(fn)
        def wrapped(*a, **kw):
            with record_function(name, args):  # a new range per call: the decorator may be re-entered
                return fn(*a, **kw)

        return wrapped


def plan_node_name(plan, step) -> str:
    """A plan node's row name: its pass-given op name, fused groups by their members, and its place
    in the plan (``train_step/12:fused_elementwise[mul+add+relu]``)."""
    node = step.node
    name = node.name
    members = node.tags.get("fused")
    if members:
        name = f"{name}[{'+'.join(members)}]"
    return f"{plan.name}/{step.index}:{name}"


class _TimedKernel:
    __slots__ = ("fn", "name", "rec", "step")

    def __init__(self, fn, name: str, rec: _Recorder, step) -> None:
        self.fn, self.name, self.rec, self.step = fn, name, rec, step

    def __call__(self, *args, **kwargs):
        rec = self.rec
        ev = rec.open(self.name, "graph")
        try:
            out = self.fn(*args, **kwargs)
        finally:
            rec.close(ev)
        node = self.step.node
        ev.args["phase"] = node.tags.get("phase", "forward")
        if node.loc is not None:
            ev.args["loc"] = str(node.loc)
        if rec.record_shapes:
            ev.input_shapes = [list(a.shape) if hasattr(a, "shape") else [] for a in args]
        if rec.profile_memory and kwargs.get("out") is None:  # an out= step writes into the memory plan's arena
            outs = out if isinstance(out, tuple) else (out,)
            ev.own_memory = sum(int(getattr(o, "nbytes", 0)) for o in outs)
        return out


def _run_profiled_plan(exe, inputs, states, hosts):
    """The executor's step with each plan node's kernel timed (``PROFILE_HOOK``)."""
    rec = _CURRENT[0]
    if rec is None:
        return exe._fn(inputs, states, hosts)
    env = exe._env
    plan = exe.plan
    saved = {}
    for st in plan.steps:
        k = f"k{st.index}"
        saved[k] = env[k]
        env[k] = _TimedKernel(env[k], plan_node_name(plan, st), rec, st)
    ev = rec.open(f"graph {plan.name}", "graph")
    try:
        return exe._fn(inputs, states, hosts)
    finally:
        rec.close(ev)
        for k, fn in saved.items():
            if isinstance(env[k], _TimedKernel):
                env[k] = fn  # an autotuner may have rebound a kernel meanwhile: keep its choice
