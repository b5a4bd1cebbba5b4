"""A module's training step compiled as two separately callable halves: forward and backward.

>>> step = flow.graph.split_step.SplitStep(stage)
>>> out, saved = step.forward(x)              # compiled forward of one micro-batch
>>> ...                                       # more forwards, sends, receives
>>> (gx,) = step.backward(saved, [grad_out])  # compiled backward; p.grad accumulates, gx is x's gradient

This is what a pipeline schedule needs (1F1B runs the forward of one micro-batch, then the backward
of an earlier one): ``flow.compile(module)`` ties its backward to eager autograd, whereas here the
caller holds each micro-batch's saved activations (an opaque :class:`SavedActivations`) and starts
the backward from output gradients it got from elsewhere (the next pipeline stage).

Both halves come from one joint trace (the module's call, then ``flow.autograd.grad`` of its
differentiable outputs with respect to its trainable parameters and the inputs that require grad),
optimised by the pass pipeline and cut by :mod:`flow.graph.partition` (the same specialisation as
``flow.compile(module)``'s training path, one per input signature). :meth:`SplitStep.backward`
adds the parameters' gradients into ``.grad`` as eager ``backward()`` does and returns the inputs'
gradients. A micro-batch's saved activations can be used by one backward only.
"""

from __future__ import annotations

import numpy as np

from flow._tensor import Tensor
from flow.array_kinds import storage_of
from flow.autograd.grad_mode import STATE, no_grad
from flow.errors import FlowError
from flow.graph.compiler import RECOMPILE_WARNING, _leaf_sig
from flow.graph.config import GraphConfig
from flow.graph.tracer import active_tracer, flatten, tree_key, unflatten
from flow.nn.modules.module import Module

__all__ = ["SplitStep", "SavedActivations"]


class SavedActivations:
    """What one micro-batch's forward kept for its backward (arrays of the compiled forward)."""

    __slots__ = ("step", "arrays", "n_inputs", "used")

    def __init__(self, step, arrays: list, n_inputs: int) -> None:
        self.step = step
        self.arrays = arrays
        self.n_inputs = n_inputs
        self.used = False

    def __repr__(self) -> str:
        n = sum(int(getattr(a, "nbytes", 0)) for a in self.arrays)
        return f"<SavedActivations: {len(self.arrays)} array(s), {n} bytes{', used' if self.used else ''}>"


class SplitStep:
    """``module``'s training step as a compiled forward and a compiled backward (see the module docs).

    ``config`` is the graph config of both halves (passes, fusion, memory planning); ``name`` names
    the traced graphs. :attr:`compiles` counts the specialisations (one per input signature,
    train/eval flags and trainable parameters)."""

    def __init__(self, module: Module, config: GraphConfig | None = None, name: str | None = None) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"SplitStep: expected a flow.nn.Module, got {type(module).__name__}")
        if config is not None and not isinstance(config, GraphConfig):
            raise TypeError(f"SplitStep: config must be a flow.graph.GraphConfig, got {type(config).__name__}")
        self.module = module
        self.config = config or GraphConfig()
        self.name = name or type(module).__name__
        self._steps: dict = {}
        self.latest = None  # the TrainingStep of the last forward

    @property
    def compiles(self) -> int:
        return len(self._steps)

    def _structure(self) -> tuple:
        # what the trace depends on besides the inputs: train/eval flags, which parameters train
        key = [m.training for m in self.module.modules()]
        key += [(id(p), p.requires_grad, tuple(p.shape)) for p in self.module.parameters()]
        return tuple(key)

    def _step_for(self, args: tuple, kwargs: dict, leaves: list):
        from flow.graph.compile_module import TrainingStep

        key = (tuple(_leaf_sig(t) for t in leaves), tree_key(flatten((args, kwargs), [])), self._structure())
        key += (self.config.key(),)
        step = self._steps.get(key)
        if step is None:
            step = TrainingStep(self.module, args, kwargs, leaves, self.config, self.name)
            if not step.trainable:
                raise FlowError(
                    f"SplitStep '{self.name}': no output of the module requires grad (no trainable parameter "
                    "and no input that requires grad reaches it), so there is no backward to compile"
                )
            self._steps[key] = step
            if len(self._steps) == RECOMPILE_WARNING:
                import warnings

                warnings.warn(
                    f"SplitStep '{self.name}' has compiled {len(self._steps)} specialisations "
                    "(input shapes/dtypes, train/eval modes, requires_grad); see docs/graph.md",
                    stacklevel=3,
                )
        self.latest = step
        return step

    def forward(self, *args, **kwargs) -> tuple:
        """Run the compiled forward on one micro-batch: ``(outputs, saved)``, the module's outputs
        (as it returns them, without autograd history) and the activations :meth:`backward` needs."""
        if active_tracer() is not None:
            raise FlowError(f"SplitStep '{self.name}': forward cannot run inside a graph's trace")
        leaves: list = []
        flatten((args, kwargs), leaves)
        with _grad_on():
            step = self._step_for(args, kwargs, leaves)
        from flow.graph.compile_module import run_forward

        arrays = [storage_of(t._data) for t in leaves]
        outs, saved = run_forward(step, arrays)
        fs, n_out = step.forward, step.n_out
        return unflatten(step.out_tree, fs.wrap(outs[:n_out])), SavedActivations(step, saved, len(leaves))

    def backward(self, saved: SavedActivations, grad_outputs, *, accumulate: bool = True) -> list:
        """Run the compiled backward of the micro-batch ``saved`` came from, seeded with
        ``grad_outputs`` (one per differentiable output, in output order; None means zeros).

        The parameters' gradients are added into their ``.grad`` (set where it is None; with
        ``accumulate=False`` replaced instead); returns the gradient of each tensor input of the
        forward (None for an input that does not require grad)."""
        if not isinstance(saved, SavedActivations) or saved.step not in self._steps.values():
            raise FlowError(f"SplitStep '{self.name}'.backward: saved must come from this step's forward")
        if saved.used:
            raise FlowError(f"SplitStep '{self.name}'.backward: these saved activations were already used")
        step = saved.step
        grads = list(grad_outputs) if isinstance(grad_outputs, (list, tuple)) else [grad_outputs]
        if len(grads) != len(step.diff_outputs):
            raise FlowError(
                f"SplitStep '{self.name}'.backward: expected {len(step.diff_outputs)} output gradient(s) "
                f"(one per differentiable output), got {len(grads)}"
            )
        seeds = []
        for j, g in zip(step.diff_outputs, grads):
            v = step.partition.forward.outputs[j]
            if g is None:
                seeds.append(np.zeros(v.shape, dtype=v.dtype.np))
                continue
            if not isinstance(g, Tensor):
                raise TypeError(f"SplitStep '{self.name}'.backward: output gradients must be tensors or None")
            if tuple(g.shape) != tuple(v.shape) or g.dtype != v.dtype:
                raise FlowError(
                    f"SplitStep '{self.name}'.backward: the gradient of output {j} must have shape "
                    f"{tuple(v.shape)} and dtype {v.dtype}, got {tuple(g.shape)} {g.dtype}"
                )
            seeds.append(np.ascontiguousarray(storage_of(g._data)))
        res = step.backward.run([*saved.arrays, *seeds])
        saved.used = True
        saved.arrays = []  # free the activations
        it = iter(res)
        got = [None if unused else next(it) for unused in step.unused]
        n_p = len(step.params)
        with no_grad():
            for p, g in zip(step.params, got[:n_p]):
                if g is None:
                    continue
                if p.grad is None or not accumulate:
                    p.grad = g
                else:
                    p.grad = p.grad + g
        per_leaf: list = [None] * saved.n_inputs
        for i, g in zip(step.diff_inputs, got[n_p:]):
            per_leaf[i] = g
        return per_leaf


class _grad_on:
    """Tracing the joint graph needs grad mode on, whatever the caller's mode."""

    def __enter__(self):
        self.prev = STATE.grad_enabled
        STATE.grad_enabled = True

    def __exit__(self, *exc):
        STATE.grad_enabled = self.prev
