"""Find where mixed precision loses accuracy: run one step in float32 and under autocast, op by op.

:func:`compare` runs ``step_fn(*inputs)`` twice from the same state, once in float32 and once inside
``flow.autocast(device_type, dtype)``, records every op call of both runs through an eager
interceptor (:mod:`flow.interceptors`), lines the two streams up and reports, op by op in execution
order, the relative error of each output and of each gradient, naming the first op whose error
passes a threshold and the line of user code that called it::

    report = flow.amp.debug.compare(lambda x, y: F.cross_entropy(model(x), y), x, y)
    print(report)                      # a table, the first offender marked with '>'
    row = report.first_divergence()    # None when every op stays under the threshold
    row.op, str(row.site), row.err     # ('sub', 'train.py:42', 0.93)

When the step returns a scalar tensor that requires grad (the loss, or a tuple whose first item is
the loss), :func:`compare` also runs ``backward()`` in each run (outside the autocast region, as
PyTorch recommends); gradient computations are ordinary op calls, so the backward ops are compared
too (each attributed to the forward op it differentiates), and so are the gradients of the leaves
(parameters, inputs that require grad). A step that calls ``backward()`` and ``optimizer.step()``
itself is recorded as it goes.

What it touches, and gives back: the default generator's state (``flow.get_rng_state``), NumPy's and
Python's global random state, the values of every tensor that existed before the step and that an op
read (parameters, buffers, optimizer states, the inputs: restored after each run if the step changed
them) and the ``.grad`` of the leaves (set to ``None`` when a run first uses the leaf, so that each
run's gradients are its own, and put back afterwards). Not restored: Python-side state such as an
optimizer's step count, a learning-rate scheduler or a user-made ``flow.Generator``. It keeps a copy
of every op output of both runs, so use a small batch.
"""

from __future__ import annotations

import os
import random
import sys
import sysconfig
from difflib import SequenceMatcher
from typing import Any, Callable

import numpy as np

import flow
from flow import _dtype as D
from flow import interceptors
from flow.autograd import queue_callback
from flow.errors import FlowError
from flow_amp.autocast import _STATE as _AUTOCAST_STATE
from flow_amp.autocast import autocast as _autocast
from flow_amp.divergence import (
    BACKWARD,
    DEFAULT_THRESHOLD,
    FORWARD,
    GradRow,
    Report,
    Row,
    Site,
    Unmatched,
    rel_error,
)

__all__ = ["compare", "Report", "Row", "GradRow", "Site", "Unmatched", "DEFAULT_THRESHOLD", "rel_error", "align"]

Tensor = flow.Tensor

# Frames in these directories are the framework's: an op's source line is the first frame outside them.
_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(p)) + os.sep for p in (flow.__file__, __file__)) + (
    sysconfig.get_paths()["stdlib"] + os.sep,
)
_is_library: dict[str, bool] = {}  # filename -> whether it is framework code


def _user_site() -> Site | None:
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        lib = _is_library.get(name)
        if lib is None:
            lib = _is_library[name] = name.startswith(_LIBRARY_DIRS) or name.startswith("<frozen")
        if not lib:
            return Site(name, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None


def _host_copy(t) -> np.ndarray:
    return np.array(t.numpy_host(), copy=True)


class _Record:
    """One op call as it ran: its outputs (host copies) and where its tensor inputs came from."""

    __slots__ = ("op", "phase", "parent", "inserted", "site", "outputs", "shapes", "dtypes", "discrete", "sources")

    def __init__(self, op, phase, parent, inserted, site, outputs, shapes, dtypes, discrete, sources) -> None:
        self.op = op
        self.phase = phase
        self.parent = parent  # backward ops: the forward record they differentiate
        self.inserted = inserted  # a cast autocast made (or the gradient of one)
        self.site = site
        self.outputs = outputs
        self.shapes = shapes
        self.dtypes = dtypes
        self.discrete = discrete  # per output: holds decisions (a mask, indices), not rounded numbers
        # per tensor input: (record, slot) or ("ext", id) for a tensor made before the step, or None
        self.sources = sources

    def key(self) -> tuple:
        return (self.op, self.shapes)


class _Snapshot:
    """A tensor that existed before the step: its values and ``.grad`` as they were, to give back."""

    __slots__ = ("tensor", "array", "version", "grad", "first_use", "is_leaf", "discrete")

    def __init__(self, t, first_use: int | None) -> None:
        self.tensor = t
        self.array = _host_copy(t)
        self.version = t._version[0]
        self.grad = t.grad
        self.first_use = first_use
        self.is_leaf = t.requires_grad and t.grad_fn is None
        self.discrete = not t.dtype.is_floating_point
        if self.is_leaf:
            t.grad = None  # this run's gradient starts from nothing; the old one comes back in restore()

    def restore(self) -> None:
        t = self.tensor
        now = t.numpy_host()
        if now.shape != self.array.shape or now.tobytes() != self.array.tobytes():
            with flow.no_grad():
                t.copy_(flow.tensor(self.array, dtype=t.dtype, device=t.device))
        if self.is_leaf:
            t.grad = self.grad


class _Trace:
    """The recording of one run: an interceptor (:meth:`record`) that runs and copies every op call,
    and, innermost, :meth:`enter`, which marks the call the user made so that the casts autocast
    inserts for it can be told apart from casts the user asked for."""

    def __init__(self, amp: bool) -> None:
        self.amp = amp
        self.records: list[_Record] = []
        self.phase = FORWARD
        self.current: int | None = None  # the forward record whose gradient the engine is computing
        self.user_op = None
        self.live = True
        self.saw_backward = False
        self.made: dict[int, tuple] = {}  # id(tensor) -> (record, slot, version) for tensors this run made
        self.keep: list = []  # those tensors, so their ids stay theirs while the run lasts
        self.external: dict[int, _Snapshot] = {}
        self.grads: dict[int, np.ndarray | None] = {}
        self.loss: float | None = None

    def preload(self, tensors) -> None:
        for t in tensors:
            if id(t) not in self.external:
                self.external[id(t)] = _Snapshot(t, None)

    def enter(self, op, inputs: tuple, attrs: dict):
        prev = self.user_op
        self.user_op = op
        try:
            return interceptors.redispatch(op, inputs, attrs)
        finally:
            self.user_op = prev

    def record(self, op, inputs: tuple, attrs: dict):
        idx = len(self.records)
        phase = self.phase
        parent = self.current if phase == BACKWARD else None
        sources = self._sources(inputs, idx)
        if phase == FORWARD:
            site = _user_site()
            # a cast seen while the user's call is another op is one autocast made for that op
            inserted = self.amp and op.name == "cast" and self.user_op is not None and self.user_op is not op
        else:
            site = None  # a backward op's source is its forward op's
            inserted = parent is not None and self.records[parent].inserted
        # a cast of a mask or of indices to a float dtype still holds decisions: an element that flips
        # (a value near a relu's kink rounding the other way) is no loss of precision in itself
        from_discrete = op.name == "cast" and all(self.is_discrete(s) for s in sources)
        out = interceptors.redispatch(op, inputs, attrs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        arrays, shapes, dtypes, discrete = [], [], [], []
        for slot, t in enumerate(outs):
            if not isinstance(t, Tensor):
                arrays.append(None)
                shapes.append(None)
                dtypes.append(None)
                discrete.append(False)
                continue
            arrays.append(_host_copy(t))
            shapes.append(tuple(t.shape))
            dtypes.append(t.dtype.name)
            discrete.append(from_discrete or not t.dtype.is_floating_point)
            self.made[id(t)] = (idx, slot, t._version[0])
            self.keep.append(t)
            if phase == FORWARD and t.grad_fn is not None:
                # the engine runs a node's output hooks just before its gradient: they say which
                # forward op the backward ops that follow belong to
                t.register_hook(self._hook(idx))
        self.records.append(
            _Record(
                op.name, phase, parent, inserted, site, arrays, tuple(shapes), tuple(dtypes), tuple(discrete), sources
            )
        )
        return out

    def _sources(self, inputs: tuple, idx: int) -> tuple:
        out = []
        for x in inputs:
            if isinstance(x, Tensor):
                out.append(self._source(x, idx))
            elif isinstance(x, (list, tuple)):
                out.extend(self._source(t, idx) for t in x if isinstance(t, Tensor))
            else:
                out.append(None)
        return tuple(out)

    def _source(self, t, idx: int):
        ver = t._version[0]
        made = self.made.get(id(t))
        if made is not None:
            return made[:2] if made[2] == ver else None  # changed in place since: its value is unknown
        snap = self.external.get(id(t))
        if snap is None:
            snap = self.external[id(t)] = _Snapshot(t, idx)
        elif snap.first_use is None:
            snap.first_use = idx
        return ("ext", id(t)) if snap.version == ver else None

    def _hook(self, idx: int) -> Callable:
        def hook(grad):
            if self.live:
                if self.phase != BACKWARD:
                    self.phase = BACKWARD
                    self.saw_backward = True
                    queue_callback(self._backward_done)
                self.current = idx
            return None

        return hook

    def _backward_done(self) -> None:
        self.phase = FORWARD
        self.current = None

    def finish(self, loss) -> None:
        if loss is not None:
            self.loss = float(loss.detach().float().item())
        for key, snap in self.external.items():
            if snap.is_leaf:
                g = snap.tensor.grad
                self.grads[key] = None if g is None else _host_copy(g)
        self.made = {}
        self.keep = []

    def is_discrete(self, src) -> bool:
        if src is None:
            return False
        if src[0] == "ext":
            return self.external[src[1]].discrete
        return self.records[src[0]].discrete[src[1]]

    def value(self, src) -> np.ndarray | None:
        if src is None:
            return None
        if src[0] == "ext":
            return self.external[src[1]].array
        return self.records[src[0]].outputs[src[1]]


def compare(
    step_fn: Callable,
    *inputs: Any,
    dtype=flow.bfloat16,
    device_type: str = "cpu",
    threshold: float | None = None,
    grads: bool = True,
    module: flow.nn.Module | None = None,
) -> Report:
    """Run ``step_fn(*inputs)`` in float32 and under ``flow.autocast(device_type, dtype)``, compare op by op.

    ``threshold`` is the relative error (:func:`rel_error`) an output must pass to count as a
    divergence; by default 5e-2 for bfloat16 and 1e-2 for float16 (see ``DEFAULT_THRESHOLD``).
    With ``grads`` (the default) and a step that returns its loss, both runs also run backward.
    ``module`` (or a module passed as ``step_fn`` or among ``inputs``) names the parameters in the
    gradients section and has its whole state (parameters and buffers) restored.

    >>> model = flow.nn.Sequential(flow.nn.Linear(8, 16), flow.nn.ReLU(), flow.nn.Linear(16, 4))
    >>> x, y = flow.randn(32, 8), flow.randint(0, 4, (32,))
    >>> report = flow.amp.debug.compare(lambda x, y: flow.nn.functional.cross_entropy(model(x), y), x, y)
    >>> report.first_divergence() is None
    True
    """
    if not callable(step_fn):
        raise TypeError(
            f"compare: step_fn must be callable (a function running one step), got {type(step_fn).__name__}"
        )
    if isinstance(step_fn, (flow.graph.Graph, flow.graph.CompiledFunction)):
        raise FlowError(
            "compare: step_fn is a compiled graph, whose ops do not run eagerly one by one; pass the eager "
            "step (the module or function the graph wraps); for graph mode, see graph.config.enable_amp"
        )
    low = _low_dtype(dtype)
    threshold = DEFAULT_THRESHOLD[low.name] if threshold is None else _check_threshold(threshold)
    amp_region = _autocast(device_type, dtype=low)  # checks device_type
    if _AUTOCAST_STATE.depth:
        raise FlowError("compare: called inside an autocast region; call it outside, it opens its own")
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor) and x.grad_fn is not None and grads:
            raise ValueError(
                f"compare: inputs[{i}] has autograd history (grad_fn={x.grad_fn}); both runs would backward "
                f"through it: pass inputs[{i}].detach() (with .requires_grad_() if its gradient is wanted)"
            )
    modules = [m for m in (module, step_fn, *inputs) if isinstance(m, flow.nn.Module)]
    state = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    rng = (flow.get_rng_state(), np.random.get_state(), random.getstate())
    try:
        ref = _run(step_fn, inputs, None, state, grads, rng, "float32")
        amp = _run(step_fn, inputs, amp_region, state, grads, rng, str(low))
    finally:
        _set_rng(rng)
    names = {id(p): n for m in modules for n, p in m.named_parameters()}
    names.update({id(x): f"inputs[{i}]" for i, x in enumerate(inputs) if isinstance(x, Tensor)})
    return _report(ref, amp, names, threshold=threshold, dtype=low.name, device_type=amp_region.device_type)


def _low_dtype(dtype):
    try:
        dt = dtype if isinstance(dtype, flow.dtype) else D.as_dtype(dtype)
    except (TypeError, ValueError, KeyError):
        raise ValueError(f"compare: dtype must be flow.bfloat16 or flow.float16, got {dtype!r}") from None
    if dt.name not in DEFAULT_THRESHOLD:
        raise ValueError(f"compare: dtype must be a low-precision float (flow.bfloat16 or flow.float16), got {dt}")
    return dt


def _check_threshold(threshold) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < float("inf"):
        raise ValueError(f"compare: threshold must be a positive finite relative error, got {threshold!r}")
    return float(threshold)


def _set_rng(rng: tuple) -> None:
    flow.set_rng_state(rng[0])
    np.random.set_state(rng[1])
    random.setstate(rng[2])


def _loss_of(result):
    """The step's loss: a one-element tensor that requires grad (alone or first in a tuple)."""
    if isinstance(result, (tuple, list)) and result:
        result = result[0]
    if isinstance(result, Tensor) and result.numel() == 1 and result.requires_grad:
        return result
    return None


def _run(step_fn, inputs: tuple, amp_region, state: list, grads: bool, rng: tuple, label: str) -> _Trace:
    trace = _Trace(amp=amp_region is not None)
    _set_rng(rng)
    trace.preload(state)
    try:
        with interceptors.intercept(trace.record):
            try:
                if amp_region is None:
                    with interceptors.intercept(trace.enter):
                        result = step_fn(*inputs)
                else:
                    with amp_region, interceptors.intercept(trace.enter):
                        result = step_fn(*inputs)
            except Exception as e:
                e.add_note(f"(raised by step_fn in the {label} run of flow.amp.debug.compare)")
                raise
            loss = _loss_of(result)
            if grads and loss is not None and not trace.saw_backward:
                loss.backward()
        trace.finish(loss)
    finally:
        trace.live = False
        for snap in trace.external.values():
            snap.restore()
    return trace


def align(ref_keys: list, amp_keys: list) -> list[tuple[int, int]]:
    """Pairs ``(i, j)`` of equal keys, increasing in both, matching as many as possible in order.

    The streams agree op for op unless the step behaves differently under autocast (a branch on a
    dtype, a cast only one run needs); then the longest matching blocks are paired
    (:class:`difflib.SequenceMatcher`, near linear for streams that mostly agree) and the rest is
    reported as unmatched.
    """
    if ref_keys == amp_keys:
        return [(i, i) for i in range(len(ref_keys))]
    sm = SequenceMatcher(None, ref_keys, amp_keys, autojunk=False)
    return [(b.a + k, b.b + k) for b in sm.get_matching_blocks() for k in range(b.size)]


def _pairs(ref: _Trace, amp: _Trace) -> list[tuple[int, int]]:
    """Matching record indices of the two runs: forward ops in order, then each forward pair's
    backward ops among themselves (the engine may order independent branches differently when
    autocast's casts add nodes)."""
    rf = [i for i, r in enumerate(ref.records) if r.phase == FORWARD]
    af = [i for i, r in enumerate(amp.records) if r.phase == FORWARD and not r.inserted]
    pairs = [(rf[i], af[j]) for i, j in align([ref.records[k].key() for k in rf], [amp.records[k].key() for k in af])]
    fmap: dict = {a: b for a, b in pairs}
    fmap[None] = None
    groups_r: dict = {}
    groups_a: dict = {}
    for i, r in enumerate(ref.records):
        if r.phase == BACKWARD:
            groups_r.setdefault(r.parent, []).append(i)
    for i, r in enumerate(amp.records):
        if r.phase == BACKWARD and not r.inserted:
            groups_a.setdefault(r.parent, []).append(i)
    for parent, rs in groups_r.items():
        if parent not in fmap:
            continue
        as_ = groups_a.get(fmap[parent], [])
        keys_r = [ref.records[k].key() for k in rs]
        keys_a = [amp.records[k].key() for k in as_]
        pairs.extend((rs[i], as_[j]) for i, j in align(keys_r, keys_a))
    pairs.sort()
    return pairs


def _max(values) -> float | None:
    vs = [v for v in values if v is not None]
    return max(vs) if vs else None


def _report(ref: _Trace, amp: _Trace, names: dict, **info) -> Report:
    pairs = _pairs(ref, amp)
    row_of = {i: k for k, (i, _) in enumerate(pairs)}
    rows = [_row(k, ref, amp, i, j, row_of) for k, (i, j) in enumerate(pairs)]
    unmatched, casts = _unmatched(ref, amp, pairs)
    grad_rows = _grads(ref, amp, names, row_of, rows)
    inserted = sum(r.inserted for r in amp.records)
    return Report(rows, grad_rows, unmatched, inserted=inserted, extra_casts=casts, losses=(ref.loss, amp.loss), **info)


def _row(k: int, ref: _Trace, amp: _Trace, i: int, j: int, row_of: dict) -> Row:
    r, a = ref.records[i], amp.records[j]
    errs, flips = [], []
    for x, y, discrete in zip(r.outputs, a.outputs, r.discrete):
        if x is None or y is None or discrete:
            errs.append(None)
            if x is not None and y is not None:
                flips.append(_flips(x, y))
        else:
            errs.append(rel_error(x, y))
    ins, in_flips = [], []
    for s, t in zip(r.sources, a.sources):
        if s is not None and t is not None:
            x, y = ref.value(s), amp.value(t)
            if ref.is_discrete(s):
                in_flips.append(_flips(x, y))
            else:
                ins.append(rel_error(x, y))
    return Row(
        index=k,
        phase=r.phase,
        op=r.op,
        of=row_of.get(r.parent) if r.phase == BACKWARD else None,
        site=_site(ref, r),
        shapes=r.shapes,
        dtype=next((d for d in a.dtypes if d), None),
        ref_dtype=next((d for d in r.dtypes if d), None),
        err=_max(errs),
        errs=tuple(errs),
        in_err=_max(ins),
        mismatch=_max(flips),
        in_mismatch=_max(in_flips),
    )


def _site(trace: _Trace, r: _Record) -> Site | None:
    """A forward op's own source line; a backward op's is that of the forward op it differentiates."""
    if r.phase == FORWARD:
        return r.site
    return trace.records[r.parent].site if r.parent is not None else None


def _flips(x: np.ndarray, y: np.ndarray) -> float:
    """The fraction of elements of two discrete values (masks, indices) that differ."""
    if x.shape != y.shape:
        return 1.0
    return float(np.mean(x != y)) if x.size else 0.0


# Casts only the mixed-precision run makes besides autocast's own: library code that brings a weight
# to its input's dtype (batch norm's cast_like), the dispatcher's type promotion of a float32 and a
# bfloat16 operand (a residual add after a promoted layer norm), and their gradients.
_CAST_OPS = ("cast", "cast_like")


def _unmatched(ref: _Trace, amp: _Trace, pairs: list) -> tuple[list[Unmatched], int]:
    """The op calls of each run with no counterpart, and how many of the mixed-precision run's are casts."""
    used_r = {i for i, _ in pairs}
    used_a = {j for _, j in pairs}
    out = []
    casts = 0
    for label, trace, used in (("float32", ref, used_r), ("amp", amp, used_a)):
        for i, r in enumerate(trace.records):
            if i in used or r.inserted:
                continue
            if trace is amp and r.op in _CAST_OPS:
                casts += 1
                continue
            out.append(Unmatched(label, r.op, r.phase, _site(trace, r), r.shapes))
    return out, casts


def _grads(ref: _Trace, amp: _Trace, names: dict, row_of: dict, rows: list) -> list[GradRow]:
    out = []
    for n, (key, g_ref) in enumerate(ref.grads.items()):
        if key not in amp.grads:
            continue
        g_amp = amp.grads[key]
        if g_ref is None and g_amp is None:
            continue
        snap = ref.external[key]
        t = snap.tensor
        first = row_of.get(snap.first_use)
        err = float("inf") if g_ref is None or g_amp is None else rel_error(g_ref, g_amp)
        out.append(
            GradRow(
                name=names.get(key, f"leaf {n}"),
                shape=tuple(t.shape),
                dtype=None if g_amp is None else str(g_amp.dtype),
                err=err,
                first_use=first,
                site=rows[first].site if first is not None else None,
            )
        )
    return out
