"""``flow.autograd.Function``: user-defined ops with their own forward and backward.

>>> class Exp(flow.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         y = x.exp()
...         ctx.save_for_backward(y)
...         return y
...     @staticmethod
...     def backward(ctx, g):
...         (y,) = ctx.saved_tensors
...         return g * y
>>> Exp.apply(flow.randn(3, requires_grad=True))
"""

from __future__ import annotations

from flow.autograd.grad_mode import STATE, no_grad
from flow.autograd.node import Node, _freed_error
from flow.errors import AutogradError


class FunctionCtx:
    """The ``ctx`` given to a Function's forward and backward."""

    def __init__(self) -> None:
        self._saved = ()
        self._released = False
        self.needs_input_grad: tuple = ()
        self.materialize_grads = True
        self._versions: list = []

    def save_for_backward(self, *tensors) -> None:
        self._saved = tensors
        self._versions = [(t._version, t._version[0]) for t in tensors if t is not None]

    @property
    def saved_tensors(self) -> tuple:
        if self._released:
            raise _freed_error()
        for ver, v in self._versions:
            if ver[0] != v:
                raise AutogradError("a tensor saved with save_for_backward was modified by an in-place operation")
        return self._saved

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value

    def mark_dirty(self, *tensors) -> None:
        pass

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_diff = tensors

    def _release(self) -> None:
        self._released = True
        self._saved = ()


class _FunctionOp:
    """Stands in for an OpDef in the autograd graph of a Function call."""

    __slots__ = ("name", "fn_cls", "save", "has_variadic")

    def __init__(self, fn_cls) -> None:
        self.name = fn_cls.__name__
        self.fn_cls = fn_cls
        self.save = "none"
        self.has_variadic = False

    def grad(self, node: Node, *grads):
        ctx = node.fctx
        if ctx._released:
            raise _freed_error()
        out = self.fn_cls.backward(ctx, *grads)
        if not isinstance(out, tuple):
            out = (out,)
        n_in = len(node.next)
        if len(out) > n_in and all(g is None for g in out[n_in:]):
            out = out[:n_in]
        if len(out) != n_in:
            raise AutogradError(f"{self.name}.backward returned {len(out)} gradients, expected {n_in}")
        return out


class Function:
    """Base class of custom autograd functions; call with ``MyFunction.apply(*args)``."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("Function subclasses must implement forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("Function subclasses must implement backward(ctx, ...)")

    @classmethod
    def apply(cls, *args, **kwargs):
        from flow._tensor import Tensor

        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        with no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        if STATE.grad_enabled and any(ctx.needs_input_grad):
            op = cls.__dict__.get("_flow_op")
            if op is None:
                op = _FunctionOp(cls)
                cls._flow_op = op
            tensor_outs = []
            for o in outs:
                if isinstance(o, Tensor):
                    if any(o is a for a in args):  # returning an input: make a fresh alias
                        o = o.detach()
                    tensor_outs.append(o)
            non_diff = set(id(t) for t in getattr(ctx, "_non_diff", ()))
            node = Node.record(op, args, {}, tuple(tensor_outs))
            node.fctx = ctx
            for t in tensor_outs:
                if id(t) in non_diff:
                    t._requires_grad = False
                    t.grad_fn = None
            outs = tuple(tensor_outs) if len(tensor_outs) == len(outs) else outs
        return outs[0] if single else outs
