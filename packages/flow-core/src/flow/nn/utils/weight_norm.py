"""Weight normalisation, the hook form (``torch.nn.utils.weight_norm`` / ``remove_weight_norm``).

``weight = g * v / ||v||``, the norm taken over every dim but ``dim`` (``dim=None``: the whole tensor).
The module keeps ``weight_g`` and ``weight_v`` as parameters and recomputes ``weight`` before each
forward. :func:`flow.nn.utils.parametrizations.weight_norm` is the parametrization form.
"""

from __future__ import annotations

from typing import TypeVar

from flow._tensor import Tensor
from flow.nn.modules.module import Module
from flow.nn.parameter import Parameter

__all__ = ["weight_norm", "remove_weight_norm", "norm_except_dim", "WeightNorm"]

T_module = TypeVar("T_module", bound=Module)


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:
    """The ``pow``-norm of ``v`` over every dim except ``dim``, keeping dims; ``dim=-1``: over all (0-d)."""
    from flow.nn.functional.normalization import vector_norm

    if dim == -1:
        return vector_norm(v, pow, None)
    if -v.ndim <= dim < -1:
        dim += v.ndim  # any other negative dim counts from the end, as in torch
    if not 0 <= dim < v.ndim:
        raise IndexError(f"norm_except_dim: dim {dim} is out of range for a {v.ndim}-d tensor")
    others = tuple(d for d in range(v.ndim) if d != dim)
    if not others:
        return v.abs() if pow != 0 else v.ne(0).to(v.dtype)
    return vector_norm(v, pow, others, True)


def weight_norm_value(v: Tensor, g: Tensor, dim: int) -> Tensor:
    """``v * (g / ||v||)`` as torch's ``_weight_norm``."""
    return v * (g / norm_except_dim(v, 2, dim))


def _dim(dim, ndim: int) -> int:
    if dim is None:
        return -1
    if not -ndim <= dim < ndim:
        raise IndexError(f"weight_norm: dim {dim} is out of range for a {ndim}-d weight")
    return dim  # torch keeps a negative dim as given: -1 means the norm over the whole tensor


class WeightNorm:
    """The forward pre-hook that recomputes ``<name>`` from ``<name>_g`` and ``<name>_v``."""

    def __init__(self, name: str, dim: int) -> None:
        self.name = name
        self.dim = dim

    def compute_weight(self, module: Module) -> Tensor:
        return weight_norm_value(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim) -> "WeightNorm":
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        weight = module._parameters.get(name)
        if not isinstance(weight, Parameter):
            raise ValueError(f"weight_norm: module '{type(module).__name__}' has no parameter named '{name}'")
        fn = WeightNorm(name, _dim(dim, weight.ndim))
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, fn.dim).detach().clone()))
        module.register_parameter(name + "_v", Parameter(weight.detach().clone()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module).detach()
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.clone()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: T_module, name: str = "weight", dim: int | None = 0) -> T_module:
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (parameters ``<name>_g`` and ``<name>_v``).

    >>> m = flow.nn.utils.weight_norm(flow.nn.Linear(20, 40))
    >>> m.weight_g.shape, m.weight_v.shape
    (flow.Size([40, 1]), flow.Size([40, 20]))
    """
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: T_module, name: str = "weight") -> T_module:
    """Turn the weight-normalised ``<name>`` back into one plain parameter (its current value)."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
