"""Spectral normalisation, the hook form (``torch.nn.utils.spectral_norm`` / ``remove_spectral_norm``).

``weight = weight_orig / sigma``, ``sigma`` the largest singular value of ``weight_orig`` (as a matrix
with ``dim`` first) estimated by power iteration: in training each forward first runs
``n_power_iterations`` steps ``v = normalize(W^T u)``, ``u = normalize(W v)`` on the buffers
``weight_u``/``weight_v`` (without gradient), then ``sigma = u . (W v)``, as torch. The
parametrization form is :func:`flow.nn.utils.parametrizations.spectral_norm`.
"""

from __future__ import annotations

from typing import TypeVar

from flow._tensor import Tensor
from flow.autograd.grad_mode import no_grad
from flow.nn.modules.module import Module
from flow.nn.parameter import Parameter

__all__ = ["spectral_norm", "remove_spectral_norm", "SpectralNorm"]

T_module = TypeVar("T_module", bound=Module)


def weight_matrix(weight: Tensor, dim: int) -> Tensor:
    """``weight`` as a matrix with ``dim`` as its rows (the other dims flattened, in order)."""
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.ndim) if d != dim))
    return weight.reshape(weight.shape[0], -1)


def default_dim(module: Module) -> int:
    # a transposed convolution's weight is (in, out, ...): its output dim is 1
    from flow.nn.modules.conv import _ConvTransposeNd

    return 1 if isinstance(module, _ConvTransposeNd) else 0


def _check(n_power_iterations: int, eps: float) -> None:
    if isinstance(n_power_iterations, bool) or not isinstance(n_power_iterations, int) or n_power_iterations < 0:
        raise ValueError(
            f"Expected n_power_iterations to be a non-negative int, got n_power_iterations={n_power_iterations!r}"
        )
    if not eps > 0:
        raise ValueError(f"spectral_norm: eps must be positive, got {eps!r}")


class SpectralNorm:
    """The forward pre-hook that sets ``<name>`` to ``<name>_orig / sigma``."""

    def __init__(self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        _check(n_power_iterations, eps)
        self.name = name
        self.dim = dim
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        import flow.nn.functional as F

        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        mat = weight_matrix(weight, self.dim)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(F.normalize(mat.t().mv(u), dim=0, eps=self.eps))
                    u.copy_(F.normalize(mat.mv(v), dim=0, eps=self.eps))
                if self.n_power_iterations > 0:
                    # the buffers change again in the next forward; the graph must keep these values
                    u, v = u.clone(), v.clone()
        sigma = u.dot(mat.mv(v))
        return weight / sigma

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int, eps: float) -> "SpectralNorm":
        import flow.nn.functional as F

        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
        weight = module._parameters.get(name)
        if not isinstance(weight, Parameter):
            raise ValueError(f"spectral_norm: module '{type(module).__name__}' has no parameter named '{name}'")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        with no_grad():
            mat = weight_matrix(weight, dim)
            h, w = mat.shape
            u = F.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=eps)
            v = F.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=eps)
        del module._parameters[name]
        module.register_parameter(name + "_orig", weight)
        setattr(module, name, weight.detach())
        module.register_buffer(name + "_u", u)
        module.register_buffer(name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(
    module: T_module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> T_module:
    """Divide ``module.<name>`` by its spectral norm before every forward (parameter ``<name>_orig``,
    power-iteration buffers ``<name>_u`` and ``<name>_v``).

    >>> m = flow.nn.utils.spectral_norm(flow.nn.Linear(20, 40))
    >>> m.weight_u.shape
    flow.Size([40])
    """
    SpectralNorm.apply(module, name, n_power_iterations, default_dim(module) if dim is None else dim, eps)
    return module


def remove_spectral_norm(module: T_module, name: str = "weight") -> T_module:
    """Make the spectrally normalised ``<name>`` one plain parameter again (its current value)."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, SpectralNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"spectral_norm of '{name}' not found in {module}")
