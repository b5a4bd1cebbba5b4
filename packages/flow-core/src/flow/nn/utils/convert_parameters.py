"""Flattening parameters into one vector and back (``parameters_to_vector``, ``vector_to_parameters``)."""

from __future__ import annotations

from typing import Iterable

from flow._tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_same_device(param: Tensor, device):
    if device is None:
        return param.device
    if param.device != device:
        raise TypeError(
            f"Found two parameters on different devices, this is currently not supported ({device} and {param.device})"
        )
    return device


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All parameters flattened and concatenated into one 1-d tensor (differentiable).

    >>> vec = flow.nn.utils.parameters_to_vector(model.parameters())
    """
    from flow import cat

    device = None
    vec = []
    for p in parameters:
        device = _check_same_device(p, device)
        vec.append(p.reshape(-1))
    return cat(vec)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-d ``vec`` into ``parameters`` (their ``.data`` becomes a view of ``vec``)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected vec to be a Tensor, but got: {type(vec).__name__}")
    if vec.ndim != 1:
        raise ValueError(f"expected a 1-d vector, got shape {tuple(vec.shape)}")
    device = None
    pointer = 0
    for p in parameters:
        device = _check_same_device(p, device)
        n = p.numel()
        if pointer + n > vec.numel():
            raise ValueError(f"vector of length {vec.numel()} is too short for the parameters")
        p.data = vec[pointer : pointer + n].view(tuple(p.shape)).data  # shares storage with vec, as torch
        pointer += n
