"""Eager activation checkpointing (``flow.utils.checkpoint``), as ``torch.utils.checkpoint``.

``checkpoint(fn, *args)`` runs ``fn`` recording its autograd graph but drops the tensors that graph
saved for backward; the first gradient that needs one of them reruns ``fn`` (with the random state
it first ran with, so dropout draws the same mask) and hands the recomputed tensors to the original
graph. Gradients reach every tensor ``fn`` used, closures and parameters included, through
``backward()`` and ``flow.autograd.grad`` alike (the non-reentrant scheme).

``use_reentrant=True`` gives PyTorch's older scheme: ``fn`` runs under ``no_grad`` and its backward
reruns it and calls ``backward()``, so tensors it uses but was not passed get their gradient in
``.grad`` (``flow.autograd.grad`` cannot reach them).

>>> y = checkpoint(block, x, use_reentrant=False)
>>> y.sum().backward()
"""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack
from typing import Any, Callable

from flow.autograd.function import Function
from flow.autograd.grad_mode import STATE, enable_grad
from flow.errors import AutogradError

__all__ = ["checkpoint", "checkpoint_sequential"]


class _Recomputing(threading.local):
    def __init__(self) -> None:
        self.on = False


# While a region reruns, a checkpoint nested in it runs plainly: the outer region takes over its nodes.
_RECOMPUTING = _Recomputing()


def _has_saves(n) -> bool:
    return n.fctx is None and (n.saved_in is not None or n.saved_out is not None)


class _Record:
    """An interceptor keeping, in call order, the autograd node of every op output made under it."""

    def __init__(self) -> None:
        self.nodes: list = []
        self._seen: set = set()

    def __call__(self, op, inputs, attrs):
        from flow.interceptors import redispatch

        out = redispatch(op, inputs, attrs)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            n = getattr(t, "grad_fn", None)
            if n is not None and id(n) not in self._seen:
                self._seen.add(id(n))
                self.nodes.append(n)
        return out


def _autocast_state() -> dict | None:
    """``{device type: (enabled, dtype)}`` of flow-amp's autocast in this thread; None without flow-amp.

    Read through ``sys.modules``: flow-core does not depend on flow-amp, and autocast can only be on
    once flow-amp has been imported."""
    amp = sys.modules.get("flow_amp")
    if amp is None:
        return None
    return {dev: (amp.is_autocast_enabled(dev), amp.get_autocast_dtype(dev)) for dev in ("cpu", "cuda")}


def _enter_autocast(stack: ExitStack, state: dict | None) -> None:
    """Rerun under the autocast settings of the forward (backward usually runs outside the region),
    so the rerun casts as the forward did, as PyTorch's checkpoint does."""
    amp = sys.modules.get("flow_amp")
    if state is None or amp is None:
        return
    for dev, (on, dtype) in state.items():
        if on or amp.is_autocast_enabled(dev):
            stack.enter_context(amp.autocast(dev, dtype=dtype, enabled=on))


class _Recompute:
    """Stands in for the op of a checkpointed node: reruns the region before the first gradient."""

    __slots__ = ("_op", "_region")

    def __init__(self, op, region: "_Region") -> None:
        self._op = op
        self._region = region

    def __getattr__(self, name):
        return getattr(self._op, name)

    def grad(self, ctx, *grads):
        self._region.restore()
        return self._op.grad(ctx, *grads)


class _Region:
    """One checkpointed call: its function, inputs, random state and the nodes whose saves were dropped."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, rng_state, check: bool) -> None:
        self.fn, self.args, self.kwargs, self.rng_state, self.check = fn, args, kwargs, rng_state, check
        self.autocast = _autocast_state()
        self.nodes: list = []
        self.done = False

    def drop(self, nodes: list) -> None:
        # Nodes of autograd.Function calls keep their ctx: their saves are the user's to manage. A node a
        # nested checkpoint already dropped keeps that region's stand-in (either rerun restores it).
        self.nodes = [n for n in nodes if _has_saves(n)]
        for n in self.nodes:
            n.saved_in = () if n.saved_in is not None else None
            n.saved_out = () if n.saved_out is not None else None
            n.versions = []
            if not isinstance(n.op, _Recompute):
                n.op = _Recompute(n.op, self)

    def restore(self) -> None:
        if self.done:
            return
        from flow._random import get_rng_state, set_rng_state
        from flow._tensor import Tensor
        from flow.interceptors import intercept

        rec = _Record()
        now = get_rng_state() if self.rng_state is not None else None
        was = _RECOMPUTING.on
        _RECOMPUTING.on = True
        try:
            if self.rng_state is not None:
                set_rng_state(self.rng_state)
            # fresh leaves: the rerun's graph must not reach outside the region (its gradients are unused)
            args = tuple(a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in self.args)
            with ExitStack() as stack:
                _enter_autocast(stack, self.autocast)
                stack.enter_context(enable_grad())
                stack.enter_context(intercept(rec))
                self.fn(*args, **self.kwargs)
        finally:
            _RECOMPUTING.on = was
            if now is not None:
                set_rng_state(now)
        fresh = [n for n in rec.nodes if _has_saves(n)]
        same = len(fresh) == len(self.nodes)
        if same and self.check:
            same = all(a.op.name == b.op.name and a.in_meta == b.in_meta for a, b in zip(fresh, self.nodes))
        if not same:
            raise AutogradError(
                "checkpoint: recomputing the checkpointed function ran different ops than its forward "
                f"({len(fresh)} ops with saved tensors, expected {len(self.nodes)}, or other ops or shapes); the "
                "function must be deterministic given its inputs and the random state"
            )
        for old, new in zip(self.nodes, fresh):
            old.saved_in, old.saved_out, old.versions = new.saved_in, new.saved_out, new.versions
        self.done = True


class _Reentrant(Function):
    @staticmethod
    def forward(ctx, fn, preserve, *args):
        from flow._random import get_rng_state

        ctx.fn, ctx.args = fn, args
        ctx.rng_state = get_rng_state() if preserve else None
        return fn(*args)

    @staticmethod
    def backward(ctx, *grads):
        from flow import autograd
        from flow._random import get_rng_state, set_rng_state
        from flow._tensor import Tensor

        now = get_rng_state() if ctx.rng_state is not None else None
        if now is not None:
            set_rng_state(ctx.rng_state)
        try:
            args = tuple(a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in ctx.args)
            with enable_grad():
                out = ctx.fn(*args)
        finally:
            if now is not None:
                set_rng_state(now)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if pairs:
            autograd.backward(tuple(o for o, _ in pairs), tuple(g for _, g in pairs))
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in args)


def checkpoint(
    function: Callable,
    *args,
    use_reentrant: bool = False,
    preserve_rng_state: bool = True,
    determinism_check: str = "default",
    **kwargs,
) -> Any:
    """Run ``function(*args, **kwargs)`` without keeping its intermediate activations for backward.

    The gradients equal those of a plain call; the activations are recomputed when backward needs
    them. ``preserve_rng_state`` makes the recomputation draw the same random numbers as the forward.
    """
    from flow._random import get_rng_state
    from flow.interceptors import intercept

    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"checkpoint: determinism_check must be 'default' or 'none', got {determinism_check!r}")
    if use_reentrant:
        if kwargs:
            raise ValueError("checkpoint: keyword arguments are only supported with use_reentrant=False")
        return _Reentrant.apply(function, preserve_rng_state, *args)
    if not STATE.grad_enabled or _RECOMPUTING.on:
        return function(*args, **kwargs)
    region = _Region(
        function, args, kwargs, get_rng_state() if preserve_rng_state else None, determinism_check == "default"
    )
    rec = _Record()
    with intercept(rec):
        out = function(*args, **kwargs)
    region.drop(rec.nodes)
    return out


def checkpoint_sequential(
    functions, segments: int, input, use_reentrant: bool = False, preserve_rng_state: bool = True, **kwargs
):
    """Run a ``Sequential`` (or list of modules) in ``segments`` checkpointed chunks; the last runs plainly."""
    from flow.nn import Sequential

    fns = list(functions.children()) if isinstance(functions, Sequential) else list(functions)
    if not isinstance(segments, int) or segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be a positive int, got {segments!r}")
    if segments > len(fns):
        raise ValueError(f"checkpoint_sequential: {segments} segments for only {len(fns)} functions")

    def run(start: int, end: int):
        def forward(x):
            for j in range(start, end + 1):
                x = fns[j](x)
            return x

        return forward

    size = len(fns) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(
            run(start, end), input, use_reentrant=use_reentrant, preserve_rng_state=preserve_rng_state, **kwargs
        )
    return run(end + 1, len(fns) - 1)(input)
