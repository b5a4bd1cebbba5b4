"""Utilities for modules: gradient clipping, parameter/vector conversion."""

from flow.nn.utils import parametrizations, parametrize, rnn
from flow.nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm
from flow.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from flow.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm
from flow.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "get_total_norm",
    "parameters_to_vector",
    "vector_to_parameters",
    "parametrizations",
    "parametrize",
    "rnn",
    "spectral_norm",
    "remove_spectral_norm",
    "weight_norm",
    "remove_weight_norm",
]
