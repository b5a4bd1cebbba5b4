"""``flow.nn.Parameter``: a tensor that a :class:`~flow.nn.Module` registers as a learnable parameter."""

from __future__ import annotations

from flow._tensor import Tensor

__all__ = ["Parameter", "Buffer"]


class Parameter(Tensor):
    """A Tensor that is a module parameter; shares storage with ``data``.

    Assigning a Parameter as a module attribute registers it in ``module.parameters()``.

    >>> p = flow.nn.Parameter(flow.zeros(3))
    >>> p.requires_grad, p.is_leaf
    (True, True)
    """

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            from flow._creation import empty

            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: data must be a Tensor, got {type(data).__name__}")
        p = cls._make(data._data, data.dtype, data.device)
        p._version = data._version
        p._base = data._base
        p._view_ver = None  # a leaf of its own, not a differentiable view of the storage it shares
        if requires_grad:
            if not data.dtype.is_floating_point:
                raise RuntimeError(
                    f"Parameter: only floating-point tensors can require gradients, got {data.dtype}"
                    "; pass requires_grad=False"
                )
            p.requires_grad = True
        return p

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        pass  # everything happens in __new__; Tensor.__init__ must not run again

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        res = type(self)(self.data.clone(), self.requires_grad)
        if self.grad is not None:
            res.grad = self.grad.detach().clone()
        if self.__dict__:
            import copy

            res.__dict__.update(copy.deepcopy(self.__dict__, memo))
        memo[id(self)] = res
        return res

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (Tensor.__reduce_ex__(self.detach(), protocol), self.requires_grad))


def _rebuild_parameter(reduced, requires_grad: bool) -> Parameter:
    fn, args = reduced
    return Parameter(fn(*args).detach(), requires_grad)


class Buffer(Tensor):
    """Marks a tensor to register as a module buffer (``torch.nn.Buffer``): ``self.b = Buffer(t)``.

    Assigning it to a module attribute registers ``data`` as a buffer (a plain Tensor).
    """

    __slots__ = ()

    def __new__(cls, data: Tensor, *, persistent: bool = True):
        if not isinstance(data, Tensor):
            raise TypeError(f"Buffer: data must be a Tensor, got {type(data).__name__}")
        b = cls._make(data._data, data.dtype, data.device)
        b._version = data._version
        b.requires_grad = data.requires_grad
        b.__dict__["persistent"] = persistent
        return b

    def __init__(self, data: Tensor, *, persistent: bool = True) -> None:
        pass
