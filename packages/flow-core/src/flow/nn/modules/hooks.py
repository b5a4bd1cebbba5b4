"""Forward-hook handles and the global module hooks (``register_module_forward_*_hook``)."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Callable

__all__ = ["RemovableHandle", "register_module_forward_pre_hook", "register_module_forward_hook"]

# Hooks that run around every module's forward (``register_module_forward_*_hook``).
_GLOBAL_PRE_HOOKS: OrderedDict = OrderedDict()
_GLOBAL_HOOKS: OrderedDict = OrderedDict()


class RemovableHandle:
    """Returned by the ``register_*_hook`` methods; ``handle.remove()`` takes the hook off again."""

    _next_id = itertools.count()

    def __init__(self, hooks: dict, *extra: dict) -> None:
        self.id = next(RemovableHandle._next_id)
        self._dicts = (hooks,) + extra

    def remove(self) -> None:
        for d in self._dicts:
            d.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def register_module_forward_pre_hook(hook: Callable) -> RemovableHandle:
    """Run ``hook(module, args)`` before the forward of every module (a global pre-hook)."""
    h = RemovableHandle(_GLOBAL_PRE_HOOKS)
    _GLOBAL_PRE_HOOKS[h.id] = hook
    return h


def register_module_forward_hook(hook: Callable) -> RemovableHandle:
    """Run ``hook(module, args, output)`` after the forward of every module (a global hook)."""
    h = RemovableHandle(_GLOBAL_HOOKS)
    _GLOBAL_HOOKS[h.id] = hook
    return h


# -- full backward hooks (``Module.register_full_backward_hook`` / ``..._pre_hook``) ------------------
def _identity_function():
    # built on first use: flow.autograd imports the tensor machinery, which imports nn lazily
    from flow.autograd import Function

    class BackwardHookFunction(Function):
        """Identity on its tensors; its backward hands their gradients to ``callback`` (which may replace them)."""

        @staticmethod
        def forward(ctx, callback, *tensors):
            ctx.callback, ctx.flags = callback, tuple(t.requires_grad for t in tensors)
            ctx.like = tuple((tuple(t.shape), t.dtype, t.device) for t in tensors)
            outs = tuple(t.detach() for t in tensors)
            ctx.mark_non_differentiable(*[o for o, f in zip(outs, ctx.flags) if not f])
            return outs

        @staticmethod
        def backward(ctx, *grads):
            from flow._creation import zeros

            # torch hands the hooks zeros (not None) for tensors that take no gradient
            grads = tuple(
                zeros(*shape, dtype=dt, device=dev) if g is None else g for g, (shape, dt, dev) in zip(grads, ctx.like)
            )
            out = ctx.callback(grads)
            return (None,) + tuple(g if f else None for g, f in zip(out, ctx.flags))

    return BackwardHookFunction


_FN: list = []


def _apply_identity(callback: Callable, tensors: list) -> tuple:
    if not _FN:
        _FN.append(_identity_function())
    return _FN[0].apply(callback, *tensors)


class BackwardHook:
    """One module call's backward hooks, as torch's ``BackwardHook``.

    The call's tensor arguments and its tensor outputs go through identity autograd functions. When the
    gradients of the outputs arrive, the backward pre-hooks run (``hook(module, grad_output)``, which may
    return a replacement); when those of the inputs arrive, the backward hooks run
    (``hook(module, grad_input, grad_output)``, which may return a replacement grad_input). Without an
    input that requires grad the hooks run at the output stage with ``grad_input`` all None.
    """

    def __init__(self, module, hooks: list, pre_hooks: list) -> None:
        self.module = module
        self.hooks = hooks
        self.pre_hooks = pre_hooks
        self.grad_outputs = None
        self.n_inputs = 0
        self.input_index: list | None = None

    def setup_input_hook(self, args: tuple) -> tuple:
        from flow._tensor import Tensor
        from flow.autograd.grad_mode import is_grad_enabled

        self.n_inputs = len(args)
        index = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        if not is_grad_enabled() or not any(args[i].requires_grad for i in index):
            return args
        self.input_index = index
        wrapped = _apply_identity(self._input_grads, [args[i] for i in index])
        out = list(args)
        for i, t in zip(index, wrapped):
            out[i] = t
        return tuple(out)

    def setup_output_hook(self, result):
        from flow._tensor import Tensor
        from flow.autograd.grad_mode import is_grad_enabled

        single = isinstance(result, Tensor)
        outs = (result,) if single else result
        if not isinstance(outs, tuple) or not is_grad_enabled():
            return result
        index = [i for i, o in enumerate(outs) if isinstance(o, Tensor)]
        if not any(outs[i].requires_grad for i in index):
            return result
        self.n_outputs = len(outs)
        wrapped = _apply_identity(self._output_grads, [outs[i] for i in index])
        new = list(outs)
        for i, t in zip(index, wrapped):
            new[i] = t
        return new[0] if single else tuple(new)

    def _output_grads(self, grads: tuple) -> tuple:
        for hook in self.pre_hooks:
            r = hook(self.module, grads)
            if r is not None:
                r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
                if len(r) != len(grads):
                    raise RuntimeError(
                        f"Backward pre hook returned an invalid number of grad_output, got {len(r)}, "
                        f"but expected {len(grads)}"
                    )
                grads = r
        self.grad_outputs = grads
        if self.input_index is None:
            grad_inputs = (None,) * self.n_inputs
            for hook in self.hooks:
                r = hook(self.module, grad_inputs, self.grad_outputs)
                if r is not None and not all(g is None for g in r):
                    raise RuntimeError(
                        "Backward hook for Modules where no input requires gradient should always return None "
                        "or None for all gradients."
                    )
            self.grad_outputs = None
        return grads

    def _input_grads(self, grads: tuple) -> tuple:
        grad_input = [None] * self.n_inputs
        for i, g in zip(self.input_index, grads):
            grad_input[i] = g
        grad_input = tuple(grad_input)
        for hook in self.hooks:
            r = hook(self.module, grad_input, self.grad_outputs)
            if r is not None:
                r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
                if len(r) != len(grad_input):
                    raise RuntimeError(
                        f"Backward hook returned an invalid number of grad_input, got {len(r)}, "
                        f"but expected {len(grad_input)}"
                    )
                grad_input = r
        self.grad_outputs = None
        return tuple(grad_input[i] for i in self.input_index)
