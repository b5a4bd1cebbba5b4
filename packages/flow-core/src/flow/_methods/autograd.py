"""Tensor methods for autograd: backward, detach, requires_grad_, hooks."""

from __future__ import annotations

from flow import autograd as _autograd
from flow.errors import AutogradError


def set_requires_grad(t, requires_grad, how: str = "requires_grad") -> None:
    """Set ``t.requires_grad`` with PyTorch's rules: a bool; only leaves may change the flag (as an
    attribute; ``requires_grad_(True)`` on a computed tensor is a no-op); only floating-point tensors
    may require grad (an integer tensor would otherwise silently get no gradient)."""
    if requires_grad.__class__ is not bool:
        raise AutogradError(f"{how}: expected a bool, got {type(requires_grad).__name__} {requires_grad!r}")
    if t.grad_fn is not None and (not requires_grad or how == "requires_grad"):
        raise AutogradError(
            f"{how}: only leaf tensors can change requires_grad; this tensor was computed by an "
            "op. Use .detach() for a tensor that does not require grad"
        )
    if requires_grad and not t.dtype.is_floating_point:
        raise AutogradError(
            f"{how}: only floating-point tensors can require gradients, got a tensor of dtype {t.dtype}"
        )
    t._requires_grad = requires_grad


class AutogradMethods:
    __slots__ = ()

    def backward(
        self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False, inputs=None
    ) -> None:
        """Accumulate d(self)/d(leaf) into each leaf's ``.grad`` (see :func:`flow.autograd.backward`)."""
        _autograd.backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    def detach(self):
        """A tensor sharing storage with this one, cut from the autograd graph."""
        from flow._tensor import Tensor

        t = Tensor._make(self._data, self.dtype, self.device)
        t._version = self._version
        t._base = self._base
        t._view_ver = None  # shares the storage but is no differentiable view: writes into it leave the base's history
        return t

    def detach_(self):
        self.grad_fn = None
        self._requires_grad = False
        return self

    def requires_grad_(self, requires_grad: bool = True):
        """Set whether autograd records ops on this (leaf) tensor."""
        set_requires_grad(self, bool(requires_grad), "requires_grad_()")
        return self

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf tensor during backward."""
        if not self._requires_grad:
            raise AutogradError("retain_grad() on a tensor that does not require grad")
        if self.grad_fn is None:
            return
        ext = self._extra if self._extra is not None else {}
        self._extra = ext
        if ext.get("retains_grad"):
            return
        ext["retains_grad"] = True
        import weakref

        ref = weakref.ref(self)

        def hook(g):
            t = ref()
            if t is not None:
                gd = g.detach()
                t.grad = gd.clone() if t.grad is None else t.grad + gd
            return None

        self.grad_fn.register_hook(self._out_idx, hook)

    @property
    def retains_grad(self) -> bool:
        return bool(self._extra and self._extra.get("retains_grad"))

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor replaces it."""
        if not self._requires_grad:
            raise AutogradError("cannot register a hook on a tensor that does not require grad")
        if self.grad_fn is not None:
            self.grad_fn.register_hook(self._out_idx, hook)
            hooks = self.grad_fn.out_hooks[self._out_idx]
        else:
            ext = self._extra if self._extra is not None else {}
            self._extra = ext
            hooks = ext.setdefault("hooks", [])
            hooks.append(hook)
        return _HookHandle(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        if self.grad_fn is not None:
            raise AutogradError("post-accumulate-grad hooks can only be registered on leaf tensors")
        ext = self._extra if self._extra is not None else {}
        self._extra = ext
        hooks = ext.setdefault("post_acc_hooks", [])
        hooks.append(hook)
        return _HookHandle(hooks, hook)


class _HookHandle:
    def __init__(self, hooks: list, hook) -> None:
        self._hooks = hooks
        self._hook = hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)
