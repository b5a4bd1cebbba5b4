"""Reverse-mode automatic differentiation (``flow.autograd``)."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from flow.autograd import engine, functional
from flow.autograd.engine import queue_callback, run_backward
from flow.autograd.function import Function, FunctionCtx
from flow.autograd.grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from flow.errors import AutogradError

__all__ = [
    "backward",
    "grad",
    "Function",
    "FunctionCtx",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "inference_mode",
    "queue_callback",
    "functional",
    "capture_backward",
    "BackwardCall",
]


_CREATION = []


def _creation():
    """``flow._creation`` (imported on first use: it imports the Tensor class, which imports this)."""
    if not _CREATION:
        from flow import _creation

        _CREATION.append(_creation)
    return _CREATION[0]


class _SeedScale(threading.local):
    """A transform of backward()'s seeds, per thread: graph mode's loss scaling (``nn.Graph.set_grad_scaler``)
    multiplies them by the scale while ``build`` is traced. None (the default) costs one attribute read."""

    def __init__(self) -> None:
        self.fn = None


SEED_SCALE = _SeedScale()


@contextmanager
def seed_transform(fn):
    """While active in this thread, ``backward()`` starts from ``fn(seed)`` instead of each seed."""
    prev = SEED_SCALE.fn
    SEED_SCALE.fn = fn
    try:
        yield
    finally:
        SEED_SCALE.fn = prev


class BackwardCall:
    """One ``backward()`` call that :func:`capture_backward` recorded instead of running."""

    __slots__ = ("tensors", "grad_tensors", "retain_graph", "create_graph", "inputs")

    def __init__(self, tensors, grad_tensors, retain_graph, create_graph, inputs) -> None:
        self.tensors, self.grad_tensors, self.inputs = tensors, grad_tensors, inputs
        self.retain_graph, self.create_graph = retain_graph, create_graph

    def __repr__(self) -> str:
        return f"BackwardCall(tensors={len(self.tensors)}, grad_tensors={self.grad_tensors!r}, inputs={self.inputs!r})"


class _Capture(threading.local):
    """The list :func:`capture_backward` fills, per thread (None: backward() runs)."""

    def __init__(self) -> None:
        self.calls = None


CAPTURE = _Capture()


@contextmanager
def capture_backward():
    """While active in this thread, ``backward()`` (and ``Tensor.backward()``) does not run: each call
    is appended to the yielded list as a :class:`BackwardCall` (its tensors, gradients and options).

    For code that compiles a forward apart from its backward around a function that calls
    ``loss.backward()`` itself, e.g. a pipeline stage tracing the last part of ``nn.Graph.build``::

        with flow.autograd.capture_backward() as calls:
            graph.build(*inputs)
        (loss,) = calls[0].tensors
    """
    prev = CAPTURE.calls
    calls: list = []
    CAPTURE.calls = calls
    try:
        yield calls
    finally:
        CAPTURE.calls = prev


def _seed(t, g):
    """The gradient backward starts from: ones for a one-element output, else the given one."""
    if g is None:
        if t.numel() != 1:
            raise AutogradError(
                f"grad can be implicitly created only for scalar outputs; got a tensor of shape {tuple(t.shape)}. "
                "Pass gradient= with the same shape"
            )
        return _creation().ones_like(t)
    if not isinstance(g, engine.Tensor):
        from flow._creation import tensor

        g = tensor(g, dtype=t.dtype, device=t.device)
    if tuple(g._data.shape) != tuple(t._data.shape):
        raise AutogradError(f"gradient has shape {tuple(g.shape)} but the output has shape {tuple(t.shape)}")
    if g.device is not t.device:
        raise AutogradError(f"gradient is on device '{g.device}' but the output is on '{t.device}'")
    if g.dtype is not t.dtype and t.dtype.is_floating_point:
        g = g.to(t.dtype)
    return g


def backward(
    tensors, grad_tensors=None, retain_graph: bool | None = None, create_graph: bool = False, inputs=None
) -> None:
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the leaves they depend on."""
    Tensor = engine.Tensor
    if CAPTURE.calls is not None:  # capture_backward(): record the call instead of running it
        single = isinstance(tensors, Tensor)
        CAPTURE.calls.append(
            BackwardCall(
                (tensors,) if single else tuple(tensors),
                (grad_tensors,) if single else grad_tensors,
                retain_graph,
                create_graph,
                inputs,
            )
        )
        return
    if isinstance(tensors, Tensor):
        tensors = (tensors,)
        grad_tensors = (grad_tensors,)
    elif grad_tensors is None:
        grad_tensors = (None,) * len(tensors)
    elif isinstance(grad_tensors, Tensor):
        grad_tensors = (grad_tensors,)
    if retain_graph is None:
        retain_graph = create_graph
    seeds = [_seed(t, g) for t, g in zip(tensors, grad_tensors)]
    if SEED_SCALE.fn is not None:
        seeds = [SEED_SCALE.fn(s) for s in seeds]
    if inputs is not None:
        if isinstance(inputs, Tensor):
            inputs = (inputs,)
        inputs = tuple(inputs)
        if not inputs:
            raise AutogradError("backward: 'inputs' must not be empty")
    run_backward(tensors, seeds, retain_graph, create_graph, inputs=inputs, allow_unused=True, accumulate=True)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
    materialize_grads: bool = False,
) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs``, returned (not stored in ``.grad``)."""
    from flow._tensor import Tensor

    single_in = isinstance(inputs, Tensor)
    if isinstance(outputs, Tensor):
        outputs = (outputs,)
    if single_in:
        inputs = (inputs,)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = (grad_outputs,) * len(outputs) if grad_outputs is None else (grad_outputs,)
    if retain_graph is None:
        retain_graph = create_graph
    seeds = [_seed(t, g) for t, g in zip(outputs, grad_outputs)]
    res = run_backward(
        outputs,
        seeds,
        retain_graph,
        create_graph,
        inputs=list(inputs),
        allow_unused=allow_unused or materialize_grads,
        accumulate=False,
    )
    if materialize_grads:
        from flow._creation import zeros_like

        res = tuple(zeros_like(i) if r is None else r for r, i in zip(res, inputs))
    return res
