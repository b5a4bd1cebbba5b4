"""Compiling and running one specialised step; the cache of steps by input signature.

:func:`compile_step` traces, runs the pass pipeline, lowers and builds the executor.
:class:`CompiledStep` runs it: it binds the state inputs to the live arrays of the modules and
optimizers (so eager mode and graph mode share them), feeds the host values (learning rates,
step counts), writes state updates back, runs the IR's effects and wraps the outputs as flow
Tensors. :class:`Runner` is what ``nn.Graph`` and ``flow.compile`` share: the cache keyed by
input shapes/dtypes (plus anything else the trace depends on), debug output, DOT/JSON export,
prefetching.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from flow._tensor import Tensor
from flow.array_kinds import storage_of
from flow.autograd.grad_mode import STATE
from flow.errors import FlowError
from flow.graph import optim_trace
from flow.graph.tracer import flatten, tree_key, unflatten

RECOMPILE_WARNING = 8  # warn when a graph has compiled this many specialisations


class CompiledStep:
    """One traced, optimised and lowered step, specialised for one input signature."""

    def __init__(self, ir, plan, executor, log, trace_s: float, compile_s: float, optimizers) -> None:
        self.ir = ir
        self.plan = plan
        self.executor = executor
        self.log = log
        self.trace_seconds = trace_s
        self.compile_seconds = compile_s
        self.optimizers = [o for _, o in optimizers]
        self._getters = [ir.state_specs[v.id].get for v in ir.states]
        self._feeders = [ir.host_specs[v.id].feed for v in ir.hosts]
        self._effects = [e.fn for e in ir.effects]
        self._outs = ir.outputs
        self._kinds = ir.meta.get("output_kinds", {})  # leaf index -> the array kind template
        aliasing = set(plan.input_slots) | set(plan.state_slots) | set(plan.const_slots)
        self._copy_out = [isinstance(s, int) and s in aliasing for s in plan.output_slots]
        self.runs = 0

    def run(self, arrays: list):
        for opt in self.optimizers:
            optim_trace.sync(opt)
        states = [g() for g in self._getters]
        hosts = [f() for f in self._feeders]
        outs, news = self.executor.run(arrays, states, hosts)
        for (k, _), new in zip(self.plan.update_slots, news):
            dst = states[k]
            if new is not dst:
                dst[...] = new
        for fn in self._effects:
            fn()
        self.runs += 1
        return self.wrap(outs)

    def wrap(self, outs) -> list:
        res = []
        kinds = self._kinds
        for i, (v, a, cp) in enumerate(zip(self._outs, outs, self._copy_out)):
            if not hasattr(v, "dtype"):  # a literal leaf
                res.append(a)
                continue
            if v.device.type == "cpu" and a.__class__ is not np.ndarray:
                a = np.asarray(a)
            if cp:
                a = a.copy()
            if kinds and i in kinds:  # the storage of a tensor of an array kind
                a = kinds[i].with_storage(a)
            res.append(Tensor._make(a, v.dtype, v.device))
        return res


def compile_step(
    fn,
    args: tuple,
    kwargs: dict,
    *,
    name: str,
    config,
    entry_codes=(),
    modules=None,
    optimizers=(),
    after=None,
    debug: int = 0,
    grad_enabled: bool | None = None,
) -> CompiledStep:
    """Trace ``fn`` on ``args``, optimise the IR with the enabled passes, lower it and build the executor."""
    from flow.graph.executor import Executor
    from flow.graph.lowering.plan import lower
    from flow.graph.passes.pipeline import run_pipeline
    from flow.graph.tracer import trace

    t0 = time.perf_counter()
    prev = STATE.grad_enabled
    if grad_enabled is not None:
        STATE.grad_enabled = grad_enabled
    try:
        ir = trace(
            fn, args, kwargs, name=name, entry_codes=entry_codes, modules=modules, optimizers=optimizers, after=after
        )
    finally:
        STATE.grad_enabled = prev
    t1 = time.perf_counter()
    log: list = []
    ir = run_pipeline(ir, config, log, keep_text=debug >= 2)
    plan = lower(ir, config)
    exe = Executor(plan, config)
    t2 = time.perf_counter()
    step = CompiledStep(ir, plan, exe, log, t1 - t0, t2 - t0, optimizers)
    if debug:
        from flow.graph.debug import format_log

        print(format_log(name, log, step, verbose=debug >= 2), file=sys.stderr)
    return step


def _leaf_sig(t: Tensor):
    d = t._data
    if d.__class__ is np.ndarray:
        return (tuple(d.shape), t.dtype, t.device, t.requires_grad)
    # an array kind (a global tensor): its layout is part of the signature
    layout = getattr(d, "layout", None)
    extra = tuple(sorted(layout().items())) if layout is not None else ()
    return (tuple(d.shape), t.dtype, t.device, t.requires_grad, type(d), extra)


class Runner:
    """The compiled-step cache and the inspection API shared by ``nn.Graph`` and ``flow.compile``."""

    def _init_runner(self, name: str, config) -> None:
        d = self.__dict__
        d["_name"] = name
        d["config"] = config
        d["_cache"] = {}
        d["_latest"] = None
        d["_debug_level"] = 0
        d["_prefetcher"] = None
        d["_pending"] = None
        d["compiles"] = 0

    # -- what the trace depends on --------------------------------------------------------
    def _modules(self) -> dict:
        return {}

    def _optimizers(self) -> list:
        return []

    def _all_modules(self) -> list:
        tops = self._modules()
        key = tuple(map(id, tops.values()))
        cached = self.__dict__.get("_mods")
        if cached is None or cached[0] != key:
            cached = (key, [m for mm in tops.values() for m in mm.modules()])
            self.__dict__["_mods"] = cached
        return cached[1]

    def _state_key(self) -> tuple:
        mods = tuple([m.training for m in self._all_modules()])
        opts = []
        for _, opt in self._optimizers():
            for g in opt.param_groups:
                opts.append(tuple(map(id, g["params"])))
                opts.append(
                    tuple(
                        (k, v if isinstance(v, (int, float, bool, str, tuple, type(None))) else id(v))
                        for k, v in g.items()
                        if k not in ("params", "lr", "initial_lr")
                    )
                )
        return (mods, tuple(opts), STATE.grad_enabled, self.config.key())

    def _key(self, leaves, tree):
        return (tuple(_leaf_sig(t) for t in leaves), tree_key(tree), self._state_key())

    def _step_for(self, args, kwargs, leaves, tree):
        key = self._key(leaves, tree)
        step = self._cache.get(key)
        if step is None:
            step = self._compile(args, kwargs)
            self._cache[key] = step
            self.__dict__["compiles"] = self.compiles + 1
            if self.compiles == RECOMPILE_WARNING:
                self._warn_recompiles(key)
            self.__dict__["_last_key"] = key
        self.__dict__["_latest"] = step
        return step

    def _run(self, args: tuple, kwargs: dict):
        leaves: list = []
        tree = flatten((args, kwargs), leaves)
        step = self._step_for(args, kwargs, leaves, tree)
        for t in leaves:
            if t._data.__class__.__name__ == "SymbolicArray":
                raise FlowError(f"graph '{self._name}' was called with a tensor from inside a trace")
        outs = step.run([storage_of(t._data) for t in leaves])
        return unflatten(step.ir.out_tree, outs)

    def _warn_recompiles(self, key) -> None:
        import warnings

        prev = self.__dict__.get("_last_key")
        parts = (
            "the input shapes/dtypes",
            "the non-tensor arguments or the input structure",
            "module train/eval modes, grad mode, optimizer groups or hyper-parameters other than the LR, or the config",
        )
        what = [parts[i] if i < 2 else parts[2] for i in range(3) if prev is not None and prev[i] != key[i]]
        warnings.warn(
            f"graph '{self._name}' has been compiled {self.compiles} times; the last recompilation was "
            f"caused by a change of {' and '.join(what) or 'the signature'}. Each new signature traces "
            "and compiles again (see docs/graph.md, 'Specialisation and the cache')",
            stacklevel=4,
        )

    # -- prefetching ---------------------------------------------------------------------
    def _load(self, batch):
        """Host -> device copy of one batch (runs on the prefetch thread): contiguous arrays on the device."""
        leaves: list = []
        tree = flatten(batch, leaves)
        out = []
        for t in leaves:
            a = t._data
            if t.device.type == "cpu":
                a = np.ascontiguousarray(a)
            out.append(Tensor._make(a, t.dtype, t.device))
        return unflatten(tree, out)

    def prefetch(self, *inputs, **kwargs) -> None:
        """Start loading the inputs of the next call in the background; ``graph()`` (no arguments) or
        a call with these same inputs then uses them."""
        from flow.graph.dataflow import Prefetcher

        pf = Prefetcher(self._load, self.config.prefetch_depth)
        pf.submit((inputs, kwargs))
        self.__dict__["_pending"] = pf

    def _take_prefetched(self, args, kwargs):
        pf = self._pending
        if pf is None:
            return None
        self.__dict__["_pending"] = None
        (pa, pk), loaded = pf.get()
        if args or kwargs:
            if len(args) != len(pa) or any(a is not b for a, b in zip(args, pa)) or kwargs.keys() != pk.keys():
                return None
        return loaded

    def _from_iterator(self, it):
        """One step on the next batch of ``it``, with the batch after it loading in the background."""
        from flow.graph.dataflow import Prefetcher

        pf = self._prefetcher
        if pf is None or pf.source is not it:
            if pf is not None:
                pf.close()
            pf = Prefetcher(self._load, self.config.prefetch_depth)
            pf.start(it)
            self.__dict__["_prefetcher"] = pf
        try:
            _, batch = pf.get()
        except StopIteration:
            self.__dict__["_prefetcher"] = None
            raise
        if isinstance(batch, dict):
            return (), batch
        if isinstance(batch, (tuple, list)):
            return tuple(batch), {}
        return (batch,), {}

    def iterate(self, loader):
        """Run one step per batch of ``loader`` (input loading overlapped with compute); yields outputs."""
        it = iter(loader)
        while True:
            try:
                yield self(it)
            except StopIteration:
                return

    # -- inspection ---------------------------------------------------------------------------
    def debug(self, level: int = 1, v_level: int | None = None, **_):
        """Print the IR after each pass with op counts when compiling (``level >= 2``: the full IR)."""
        if v_level is not None:
            level = v_level + 1
        self.__dict__["_debug_level"] = int(level)
        return self

    def _need(self):
        if self._latest is None:
            raise FlowError(f"graph '{self._name}' has not been compiled yet: call it once first")
        return self._latest

    @property
    def ir(self):
        """The optimised IR of the last step run."""
        return self._need().ir

    @property
    def plan(self):
        return self._need().plan

    @property
    def pass_log(self) -> list:
        return self._need().log

    def memory_report(self) -> dict:
        """Peak bytes of the last step's intermediate values with and without memory planning
        (``peak_bytes``, ``peak_bytes_unplanned``, arena size, ...; see flow.graph.passes.memory)."""
        from flow.graph.passes.memory import memory_report

        return memory_report(self._need().plan)

    @property
    def compile_time(self) -> float:
        """Seconds the last compilation (trace, passes, lowering) took."""
        return self._need().compile_seconds

    @property
    def autotuned(self) -> dict:
        """node id -> {"op", "chosen", "times"} of the kernels autotuning picked."""
        return dict(self._need().executor.choices)

    def to_dot(self, path: str | None = None) -> str:
        """The IR as Graphviz DOT (written to ``path`` when given)."""
        from flow.graph.debug import save, to_dot

        s = to_dot(self.ir)
        if path is not None:
            save(s, path)
        return s

    def render(self, path: str, format: str | None = None) -> str:
        """Draw the IR into ``path`` with Graphviz's ``dot`` (svg/png/pdf from the extension; see
        :mod:`flow.graph.render`): phases coloured, fused groups as clusters, values annotated."""
        from flow.graph.render import render

        return render(self.ir, path, format)

    def to_json(self, path: str | None = None) -> str:
        """The IR as JSON (written to ``path`` when given)."""
        from flow.graph.debug import save, to_json

        s = to_json(self.ir)
        if path is not None:
            save(s, path)
        return s

    def clear_cache(self) -> None:
        """Forget every compiled step (the next call traces again)."""
        self._cache.clear()
        self.__dict__.pop("_mods", None)
        self.__dict__["_latest"] = None

    @property
    def cache_size(self) -> int:
        return len(self._cache)
