"""``flow.hardshrink``, ``flow.pixel_shuffle``, ``flow.max_pool2d`` ...: neural-network functions PyTorch
also has at top level, where the top-level signature is :mod:`flow.nn.functional`'s (or differs only
as noted). Each forwards there; :mod:`flow.ops.nn_toplevel` holds the ones whose signatures differ more.
"""

from __future__ import annotations

from typing import Sequence

__all__ = [
    "hardshrink",
    "selu",
    "celu",
    "threshold",
    "prelu",
    "pixel_shuffle",
    "pixel_unshuffle",
    "avg_pool1d",
    "adaptive_avg_pool1d",
    "adaptive_max_pool1d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "pairwise_distance",
]


def _F():
    import flow.nn.functional as F

    return F


def hardshrink(input, lambd: float = 0.5):
    """``torch.hardshrink``: as :func:`flow.nn.functional.hardshrink`."""
    return _F().hardshrink(input, lambd)


def selu(input):
    """``torch.selu``: as :func:`flow.nn.functional.selu` (the top level has no ``inplace``)."""
    return _F().selu(input)


def celu(input, alpha: float = 1.0):
    """``torch.celu``: as :func:`flow.nn.functional.celu` (the top level has no ``inplace``)."""
    return _F().celu(input, alpha)


def threshold(input, threshold: float, value: float):
    """``torch.threshold``: ``value`` where ``input <= threshold``, else ``input``."""
    return _F().threshold(input, threshold, value)


def prelu(input, weight):
    """``torch.prelu``: as :func:`flow.nn.functional.prelu`."""
    return _F().prelu(input, weight)


def pixel_shuffle(input, upscale_factor: int):
    """``torch.pixel_shuffle``: as :func:`flow.nn.functional.pixel_shuffle`."""
    return _F().pixel_shuffle(input, upscale_factor)


def pixel_unshuffle(input, downscale_factor: int):
    """``torch.pixel_unshuffle``: as :func:`flow.nn.functional.pixel_unshuffle`."""
    return _F().pixel_unshuffle(input, downscale_factor)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
    """``torch.avg_pool1d``: as :func:`flow.nn.functional.avg_pool1d`."""
    return _F().avg_pool1d(input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def adaptive_avg_pool1d(input, output_size):
    """``torch.adaptive_avg_pool1d``: as :func:`flow.nn.functional.adaptive_avg_pool1d`."""
    return _F().adaptive_avg_pool1d(input, output_size)


def adaptive_max_pool1d(input, output_size):
    """``torch.adaptive_max_pool1d``: ``(values, indices)``, always both (the functional form returns
    the indices only when asked)."""
    return _F().adaptive_max_pool1d(input, output_size, return_indices=True)


def _stride(stride):
    # the top-level pools take stride=() for "the kernel size", the functional ones stride=None
    return None if stride is None or (isinstance(stride, Sequence) and len(stride) == 0) else stride


def max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode: bool = False):
    """``torch.max_pool1d``: as :func:`flow.nn.functional.max_pool1d`, values only."""
    return _F().max_pool1d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def max_pool2d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode: bool = False):
    """``torch.max_pool2d``: as :func:`flow.nn.functional.max_pool2d`, values only."""
    return _F().max_pool2d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def max_pool3d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode: bool = False):
    """``torch.max_pool3d``: as :func:`flow.nn.functional.max_pool3d`, values only."""
    return _F().max_pool3d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """``torch.conv3d``: as :func:`flow.nn.functional.conv3d`."""
    return _F().conv3d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1):
    """``torch.conv_transpose1d``: as :func:`flow.nn.functional.conv_transpose1d`."""
    return _F().conv_transpose1d(input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1):
    """``torch.conv_transpose2d``: as :func:`flow.nn.functional.conv_transpose2d`."""
    return _F().conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """``torch.pairwise_distance``: as :func:`flow.nn.functional.pairwise_distance`."""
    return _F().pairwise_distance(x1, x2, p, eps, keepdim)
