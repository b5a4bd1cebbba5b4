"""Gradient clipping: ``clip_grad_norm_`` and ``clip_grad_value_``, as in ``torch.nn.utils``."""

from __future__ import annotations

import math
from typing import Iterable

from flow._tensor import Tensor
from flow.autograd.grad_mode import no_grad

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]


def _grads(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _vector_norm(t: Tensor, norm_type: float) -> Tensor:
    if t.is_sparse:  # a sparse gradient's norm is that of its coalesced values (repeated rows summed first)
        t = t.coalesce()._values()
    t = t.detach()
    if norm_type == math.inf:
        return t.abs().max()
    if norm_type == -math.inf:
        return t.abs().min()
    if norm_type == 2.0:
        return (t * t).sum().sqrt()
    if norm_type == 1.0:
        return t.abs().sum()
    if norm_type == 0:
        return (t != 0).to(t.dtype).sum()
    return (t.abs() ** norm_type).sum() ** (1.0 / norm_type)


def get_total_norm(
    tensors: Iterable[Tensor], norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None
) -> Tensor:
    """The norm of all ``tensors`` together, as if concatenated into one vector."""
    from flow._creation import zeros

    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return zeros(())
    with no_grad():
        norms = [_vector_norm(t, norm_type).to(tensors[0].device).float() for t in tensors]
        if len(norms) == 1:
            total = norms[0]
        else:
            from flow import stack

            total = _vector_norm(stack(norms), norm_type)
    if error_if_nonfinite and not math.isfinite(float(total.item())):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
            "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
            "norm anyway, set `error_if_nonfinite=False`"
        )
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach=None) -> None:
    """Scale the gradients of ``parameters`` by ``max_norm / (total_norm + 1e-6)`` when that is below 1."""
    grads = _grads(parameters)
    if not grads:
        return
    with no_grad():
        coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            # a sparse gradient is scaled through its values (every stored entry, repeats included)
            (g._values() if g.is_sparse else g).mul_(coef.to(dtype=g.dtype, device=g.device))


def clip_grad_norm_(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None
) -> Tensor:
    """Rescale gradients in place so that their total norm is at most ``max_norm``; returns the norm before.

    >>> total = flow.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    parameters = list(parameters)
    grads = _grads(parameters)
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]`` in place."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)
