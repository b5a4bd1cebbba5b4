"""``flow.softmax``, ``flow.conv2d``, ``flow.batch_norm`` ...: the neural-network functions PyTorch also has at
top level, with the top-level signatures (which differ from ``torch.nn.functional``'s for ``batch_norm``,
``embedding``, ``layer_norm`` and ``dropout``). Each forwards to :mod:`flow.nn.functional`.
"""

from __future__ import annotations

from flow.errors import OpTypeError

__all__ = [
    "softmax",
    "log_softmax",
    "conv1d",
    "conv2d",
    "layer_norm",
    "batch_norm",
    "embedding",
    "dropout",
    "cosine_similarity",
]


def softmax(input, dim: int, dtype=None):
    """``torch.softmax(input, dim, dtype=None)``: softmax over ``dim`` (``dtype`` casts the input first)."""
    from flow.ops.nn_act import softmax as _softmax

    return _softmax(input, dim, dtype=dtype)


def log_softmax(input, dim: int, dtype=None):
    """``torch.log_softmax(input, dim, dtype=None)``: log of the softmax over ``dim``, computed stably."""
    from flow.ops.nn_act import log_softmax as _log_softmax

    return _log_softmax(input, dim, dtype=dtype)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """``torch.conv1d``: as :func:`flow.nn.functional.conv1d`."""
    from flow.nn.functional import conv1d as _conv1d

    return _conv1d(input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """``torch.conv2d``: as :func:`flow.nn.functional.conv2d`."""
    from flow.nn.functional import conv2d as _conv2d

    return _conv2d(input, weight, bias, stride, padding, dilation, groups)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5, cudnn_enable: bool = True):
    """``torch.layer_norm``: ``cudnn_enable`` is accepted and has no effect (there is no cuDNN path here)."""
    from flow.ops.nn_norm import layer_norm as _layer_norm

    return _layer_norm(input, normalized_shape, weight, bias, eps)


def batch_norm(
    input,
    weight,
    bias,
    running_mean,
    running_var,
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool = True,
):
    """``torch.batch_norm``: the parameters come before the running statistics (the reverse of
    :func:`flow.nn.functional.batch_norm`); ``cudnn_enabled`` has no effect."""
    from flow.nn.functional import batch_norm as _batch_norm

    return _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def embedding(weight, input, padding_idx: int = -1, scale_grad_by_freq: bool = False, sparse: bool = False):
    """``torch.embedding(weight, indices, ...)``: ``weight`` first, and ``padding_idx=-1`` means none.

    >>> flow.embedding(flow.eye(3), flow.tensor([2, 0]))
    tensor([[0., 0., 1.],
            [1., 0., 0.]])
    """
    from flow.nn.functional import embedding as _embedding

    if isinstance(padding_idx, bool) or not isinstance(padding_idx, int):
        raise OpTypeError("embedding", f"'padding_idx' must be an int, got {type(padding_idx).__name__}")
    pad = None if padding_idx < 0 else padding_idx
    return _embedding(input, weight, padding_idx=pad, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def dropout(input, p: float, train: bool):
    """``torch.dropout(input, p, train)``: zero elements with probability ``p`` while ``train``."""
    from flow.nn.functional import dropout as _dropout

    return _dropout(input, p, train)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """``torch.cosine_similarity``: the cosine of the angle between ``x1`` and ``x2`` along ``dim`` (broadcasts)."""
    from flow.nn.functional import cosine_similarity as _cos

    return _cos(x1, x2, dim, eps)
