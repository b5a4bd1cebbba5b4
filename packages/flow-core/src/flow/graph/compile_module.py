"""``flow.compile(module)``: a compiled module, forward and training path, as ``torch.compile`` gives.

>>> model = flow.compile(Net())
>>> loss = F.cross_entropy(model(x), y)     # compiled forward
>>> loss.backward()                         # compiled backward; p.grad accumulates as in eager
>>> opt.step()

:class:`OptimizedModule` wraps the module (registered as ``_orig_mod``, as in PyTorch, so
``state_dict()`` keys start with ``_orig_mod.``). A call runs one of two compiled paths:

* **no gradient needed** (``flow.no_grad()``, or nothing requires grad): a
  :class:`~flow.graph.compile.CompiledFunction` over the module's call;
* **gradient needed**: the joint function ``module(*inputs)`` followed by ``flow.autograd.grad`` of
  its outputs (with grad outputs as extra inputs) is traced once per signature, optimised, and
  split by :mod:`flow.graph.partition` into a forward and a backward graph. The call runs the
  forward graph inside an autograd Function whose backward runs the backward graph, so the
  result takes part in eager autograd: ``loss.backward()`` sends gradients into the parameters'
  ``.grad`` (accumulating) and into the inputs that require grad.

Each path is specialised on the input shapes, dtypes and ``requires_grad``, the non-tensor
arguments, the ``training`` flags of the module's submodules and which parameters require grad.
"""

from __future__ import annotations

import time

from flow._tensor import Tensor
from flow.array_kinds import storage_of
from flow.autograd.function import Function
from flow.autograd.grad_mode import STATE
from flow.errors import FlowError
from flow.graph.compile import CompiledFunction
from flow.graph.compiler import RECOMPILE_WARNING, CompiledStep, _leaf_sig
from flow.graph.config import GraphConfig
from flow.graph.partition import Partition, partition
from flow.graph.tracer import active_tracer, flatten, tree_key, unflatten
from flow.nn.modules.module import Module


def _caller(mod: Module):
    """The function the inference path compiles: calling the module runs its hooks, as in eager."""

    def call(*args, **kwargs):
        return mod(*args, **kwargs)

    return call


class TrainingStep:
    """One specialisation of the training path: the compiled forward and backward graphs."""

    def __init__(self, mod: Module, args: tuple, kwargs: dict, leaves: list, config: GraphConfig, name: str) -> None:
        from flow.graph.executor import Executor
        from flow.graph.lowering.plan import lower
        from flow.graph.passes.pipeline import run_pipeline
        from flow.graph.tracer import trace

        t0 = time.perf_counter()
        in_tree = flatten((args, kwargs), [])
        self.params = [p for p in mod.parameters() if p.requires_grad]
        self.diff_inputs = [i for i, t in enumerate(leaves) if t.requires_grad and t.dtype.is_floating_point]
        modules = {"": mod}

        # a first trace of the forward alone gives the outputs' structure, metas and which of them
        # carry a gradient: the joint graph takes one grad-output input per such output
        seen: dict = {}

        def forward(*a, **k):
            out = mod(*a, **k)
            ol: list = []
            seen["tree"] = flatten(out, ol)
            seen["diff"] = [j for j, t in enumerate(ol) if t.requires_grad and t.dtype.is_floating_point]
            return out

        ir0 = trace(forward, args, kwargs, name=name, modules=modules)
        self.out_tree = seen["tree"]
        self.n_out = len(ir0.outputs)
        self.diff_outputs = seen["diff"]
        self.trainable = bool(self.diff_outputs)
        if not self.trainable:  # nothing to differentiate: the caller uses the inference path
            return
        grad_seeds = []
        for j in self.diff_outputs:
            v = ir0.outputs[j]
            grad_seeds.append(_zeros(v))
        n_in = len(leaves)
        params = self.params
        diff_inputs = self.diff_inputs
        diff_outputs = self.diff_outputs

        def joint(*flat):
            import flow

            a, k = unflatten(in_tree, flat[:n_in])
            out = mod(*a, **k)
            ol: list = []
            flatten(out, ol)
            wrt = list(params) + [flat[i] for i in diff_inputs]
            grads = flow.autograd.grad([ol[j] for j in diff_outputs], wrt, list(flat[n_in:]), allow_unused=True)
            seen["unused"] = [g is None for g in grads]
            return (*ol, *[g for g in grads if g is not None])

        ir = trace(joint, (*leaves, *grad_seeds), {}, name=name, modules=modules)
        t1 = time.perf_counter()
        self.unused = seen["unused"]
        self.log: list = []
        ir = run_pipeline(ir, config, self.log)
        self.joint_ir = ir
        part: Partition = partition(ir, n_in, self.n_out)
        part.forward.verify(metas=False)
        part.backward.verify(metas=False)
        self.partition = part
        fplan = lower(part.forward, config)
        bplan = lower(part.backward, config)
        self.forward = CompiledStep(part.forward, fplan, Executor(fplan, config), self.log, t1 - t0, 0.0, ())
        self.backward = CompiledStep(part.backward, bplan, Executor(bplan, config), [], 0.0, 0.0, ())
        self.compile_seconds = time.perf_counter() - t0
        updated = {s.id for s, _ in part.forward.updates}
        # states the backward reads that the forward updates in place are copied before the forward
        # runs, so the backward sees the values the forward read
        self._copy_states = [j for kind, j in part.saved if kind == "state" and part.forward.states[j].id in updated]
        # the tensors whose arrays the backward reads (inputs, parameters and buffers, module outputs):
        # saved with save_for_backward, so an in-place change before backward raises, as in eager
        extra = {v.id for v in part.forward.outputs[self.n_out :]}
        self._guard_outputs = [j for j, v in enumerate(part.forward.outputs[: self.n_out]) if v.id in extra]
        self._guard_inputs = [k for kind, k in part.saved if kind == "input"]
        specs = part.forward.state_specs
        self._guard_states = [
            specs[part.forward.states[k].id].tensor
            for kind, k in part.saved
            if kind == "state" and specs[part.forward.states[k].id].tensor is not None
        ]

    def run(self, leaves: list):
        """Run the forward graph as an autograd Function; returns the module's outputs."""
        outs = _CompiledModuleFunction.apply(self, *leaves, *self.params)
        if not isinstance(outs, tuple):
            outs = (outs,)
        return unflatten(self.out_tree, list(outs))


def _zeros(v) -> Tensor:
    """Zeros of value ``v``'s shape, dtype and device (a grad output example, or a missing one)."""
    from flow._creation import zeros

    return zeros(v.shape, dtype=v.dtype, device=v.device)


def run_forward(step, arrays: list) -> tuple[list, list]:
    """Run the forward graph of a partitioned ``step`` on input ``arrays``: ``(outputs, saved)``, the
    outputs as arrays (the module's first, then the values kept for backward) and the arrays the
    backward graph reads (``step.partition.saved``). CompiledStep.run without wrapping anything as
    Tensors; states the forward updates in place are saved as they were before it."""
    fs = step.forward
    states = [g() for g in fs._getters]
    before = {j: states[j].copy() for j in step._copy_states}
    outs, news = fs.executor.run(arrays, states, [f() for f in fs._feeders])
    for (k, _), new in zip(fs.plan.update_slots, news):
        if new is not states[k]:
            states[k][...] = new
    for fn in fs._effects:
        fn()
    fs.runs += 1
    n_out = step.n_out
    saved = []
    for kind, k in step.partition.saved:
        if kind == "out":
            saved.append(outs[n_out + k])
        elif kind == "input":
            saved.append(arrays[k])
        else:
            saved.append(before.get(k, states[k]))
    return outs, saved


class _CompiledModuleFunction(Function):
    """Forward: the forward graph; backward: the backward graph on what the forward saved."""

    @staticmethod
    def forward(ctx, step: TrainingStep, *tensors):
        n_leaves = len(tensors) - len(step.params)
        arrays = [storage_of(t._data) for t in tensors[:n_leaves]]
        outs, saved = run_forward(step, arrays)
        fs, n_out = step.forward, step.n_out
        ctx.step = step
        ctx.saved_arrays = saved
        ctx.n_leaves = n_leaves
        outs = tuple(fs.wrap(outs[:n_out]))
        ctx.save_for_backward(
            *[tensors[k] for k in step._guard_inputs], *step._guard_states, *[outs[j] for j in step._guard_outputs]
        )
        non_diff = [o for j, o in enumerate(outs) if j not in step.diff_outputs]
        if non_diff:
            ctx.mark_non_differentiable(*non_diff)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        import numpy as np

        step: TrainingStep = ctx.step
        ctx.saved_tensors  # noqa: B018  (raises if one was modified in place since the forward)
        seeds = []
        for j in step.diff_outputs:
            g = grads[j] if j < len(grads) else None
            if g is None:
                v = step.partition.forward.outputs[j]
                seeds.append(storage_of(_zeros(v)._data))
            else:
                seeds.append(np.ascontiguousarray(storage_of(g._data)))
        res = step.backward.run([*ctx.saved_arrays, *seeds])
        it = iter(res)
        got = [None if unused else next(it) for unused in step.unused]
        n_p = len(step.params)
        per_leaf: list = [None] * ctx.n_leaves
        for i, g in zip(step.diff_inputs, got[n_p:]):
            per_leaf[i] = g
        return (None, *per_leaf, *got[:n_p])


class OptimizedModule(Module):
    """A module compiled by ``flow.compile(module)``; behaves as the module it wraps.

    The original module is the submodule ``_orig_mod`` (as in PyTorch): ``state_dict()`` keys carry
    the ``_orig_mod.`` prefix and ``load_state_dict`` takes such keys (load a plain state dict into
    ``compiled._orig_mod``). Attributes the wrapper does not have are looked up on the original
    module; ``train()``, ``eval()``, ``to()`` and ``parameters()`` reach it as its submodule.
    """

    def __init__(self, mod: Module, config: GraphConfig | None = None, name: str | None = None) -> None:
        super().__init__()
        self._orig_mod = mod
        d = self.__dict__
        d["_compile_name"] = name or type(mod).__name__
        d["_compile_config"] = config or GraphConfig()
        d["_inference"] = CompiledFunction(_caller(mod), d["_compile_config"], d["_compile_name"])
        d["_training_steps"] = {}
        d["_latest_training"] = None

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            mods = self.__dict__.get("_modules")
            orig = mods.get("_orig_mod") if mods is not None else None
            if orig is None:
                raise
            return getattr(orig, name)

    @property
    def compiles(self) -> int:
        """How many specialisations both paths have compiled."""
        return self._inference.compiles + len(self._training_steps)

    @property
    def training_step(self) -> TrainingStep:
        """The training-path specialisation of the last call that needed gradients."""
        if self._latest_training is None:
            raise FlowError("flow.compile(module): no call has run the training path yet")
        return self._latest_training

    def _structure(self) -> tuple:
        """The training flags, parameters (identity, requires_grad, shape) and buffers of every
        submodule, and whether a parameter requires grad; a walk of the module dicts, since this
        runs on every call (``named_modules`` costs about a fifth of a small model's call)."""
        key: list = []
        any_grad = False
        stack = [self._orig_mod]
        while stack:
            m = stack.pop()
            d = m.__dict__
            key.append(m.training)
            for p in d["_parameters"].values():
                if p is None:
                    key.append(None)
                else:
                    rg = p._requires_grad
                    any_grad = any_grad or rg
                    key.append((id(p), rg, p._data.shape))
            key.extend(id(b) for b in d["_buffers"].values())
            stack.extend(c for c in d["_modules"].values() if c is not None)
        return tuple(key), any_grad

    def forward(self, *args, **kwargs):
        mod = self._orig_mod
        if active_tracer() is not None:  # inside another graph's trace: inline the module
            return mod(*args, **kwargs)
        leaves: list = []
        tree = flatten((args, kwargs), leaves)
        needs_grad = STATE.grad_enabled
        if needs_grad:
            structure, any_grad = self._structure()
            needs_grad = any_grad or any(t._requires_grad for t in leaves)
        if not needs_grad:
            return self._inference(*args, **kwargs)
        key = (tuple(_leaf_sig(t) for t in leaves), tree_key(tree), structure, self._compile_config.key())
        steps = self._training_steps
        step = steps.get(key)
        if step is None:
            step = steps[key] = TrainingStep(mod, args, kwargs, leaves, self._compile_config, self._compile_name)
            if len(steps) == RECOMPILE_WARNING:
                import warnings

                warnings.warn(
                    f"flow.compile(module) '{self._compile_name}' has compiled {len(steps)} training "
                    "specialisations (input shapes/dtypes, train/eval modes, requires_grad); see docs/graph.md",
                    stacklevel=3,
                )
        self.__dict__["_latest_training"] = step
        if not step.trainable:
            return self._inference(*args, **kwargs)
        return step.run(leaves)

    def clear_cache(self) -> None:
        """Forget every compiled specialisation (the next call traces again)."""
        self._inference.clear_cache()
        self._training_steps.clear()
        self.__dict__["_latest_training"] = None


def compile_module(
    mod: Module,
    *,
    config: GraphConfig | None = None,
    name: str | None = None,
    disable: bool = False,
) -> Module:
    """``flow.compile(module)``: an :class:`OptimizedModule` (``mod`` itself when ``disable``)."""
    if not isinstance(mod, Module):
        raise TypeError(f"compile_module: expected a flow.nn.Module, got {type(mod).__name__}")
    if disable:
        return mod
    return OptimizedModule(mod, config, name)
