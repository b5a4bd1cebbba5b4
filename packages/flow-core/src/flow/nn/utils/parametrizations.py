"""Parametrizations, as ``torch.nn.utils.parametrizations``: weight_norm and spectral_norm.

Both register a parametrization module (:func:`flow.nn.utils.parametrize.register_parametrization`),
so the state dict holds torch's keys: ``parametrizations.weight.original0`` (g) and ``original1`` (v)
for weight_norm; ``parametrizations.weight.original`` and the power-iteration buffers
``parametrizations.weight.0._u`` / ``._v`` for spectral_norm.
"""

from __future__ import annotations

from typing import TypeVar

from flow._tensor import Tensor
from flow.autograd.grad_mode import no_grad
from flow.nn.modules.module import Module
from flow.nn.utils.parametrize import register_parametrization
from flow.nn.utils.spectral_norm import _check, default_dim, weight_matrix
from flow.nn.utils.weight_norm import _dim, norm_except_dim, weight_norm_value

__all__ = ["weight_norm", "spectral_norm"]

T_module = TypeVar("T_module", bound=Module)


class _WeightNorm(Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_norm_value(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor) -> tuple:
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: T_module, name: str = "weight", dim: int | None = 0) -> T_module:
    """Parametrize ``module.<name>`` as ``g * v / ||v||`` (norm over every dim but ``dim``).

    >>> m = flow.nn.utils.parametrizations.weight_norm(flow.nn.Linear(20, 40))
    >>> m.parametrizations.weight.original0.shape
    flow.Size([40, 1])
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"weight_norm: module '{type(module).__name__}' has no parameter or buffer named '{name}'")
    register_parametrization(module, name, _WeightNorm(_dim(dim, weight.ndim)), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        import flow.nn.functional as F

        super().__init__()
        ndim = weight.ndim
        if not -ndim <= dim < ndim:
            raise IndexError(f"spectral_norm: dim {dim} is out of range for a {ndim}-d weight")
        _check(n_power_iterations, eps)
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            with no_grad():
                mat = weight_matrix(weight, self.dim)
                h, w = mat.shape
                u = weight.new_empty(h).normal_(0, 1)
                v = weight.new_empty(w).normal_(0, 1)
                self.register_buffer("_u", F.normalize(u, dim=0, eps=eps))
                self.register_buffer("_v", F.normalize(v, dim=0, eps=eps))
            self._power_method(mat, 15)  # start from a good estimate, as torch

    def _power_method(self, mat: Tensor, n: int) -> None:
        import flow.nn.functional as F

        # torch's order here: u first, then v (the hook form does v first)
        with no_grad():
            for _ in range(n):
                self._u.copy_(F.normalize(mat.mv(self._v), dim=0, eps=self.eps))
                self._v.copy_(F.normalize(mat.t().mv(self._u), dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        import flow.nn.functional as F

        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        mat = weight_matrix(weight, self.dim)
        if self.training:
            self._power_method(mat.detach(), self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        return weight / u.dot(mat.mv(v))

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(
    module: T_module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> T_module:
    """Parametrize ``module.<name>`` as itself divided by its largest singular value (power iteration).

    >>> m = flow.nn.utils.parametrizations.spectral_norm(flow.nn.Linear(20, 40))
    >>> m.parametrizations.weight[0]._u.shape
    flow.Size([40])
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"spectral_norm: module '{type(module).__name__}' has no parameter or buffer named '{name}'")
    if dim is None:
        dim = default_dim(module)
    register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
