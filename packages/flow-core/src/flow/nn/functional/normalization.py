"""Normalization functions, as ``torch.nn.functional``.

``layer_norm`` is a fused op (:mod:`flow.ops.nn_norm`); ``group_norm`` and
``instance_norm`` reuse it on reshaped inputs; ``batch_norm`` is the fused op of
:mod:`flow.ops.nn_batch_norm` for float32 / float64 and a composite for mixed precision;
``rms_norm``, ``local_response_norm`` and ``normalize`` are composites of flow ops.
Running statistics are updated in place (without autograd) in training.

Mixed precision, as PyTorch's mixed-type normalisation: a bfloat16 / float16 input may come with
float32 ``weight`` / ``bias`` (and running statistics of any floating dtype). The parameters and
running statistics are applied through ``cast_like`` (the activation's dtype), so the output keeps
the input's dtype, and a traced graph keeps doing so when the AMP pass lowers the activation of a
float32 trace: a ``mul`` by the float32 weight would promote the activation back to float32 there.
The batch statistics are computed in the input's dtype (each reduction accumulates in float32 and
rounds once): computing them from a float32 copy would keep that copy for the backward pass. The
running statistics keep their dtype and are updated in it.
"""

from __future__ import annotations

import math
import os

import numpy as np

from flow import _dtype as D
from flow._creation import constant_for
from flow.autograd import no_grad
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops.clamp_where import clamp, where
from flow.ops.conversion import cast_like
from flow.ops.nn_batch_norm import batch_norm_op
from flow.ops.nn_norm import check_param_dtype, layer_norm
from flow.ops.unary import rsqrt, sqrt

__all__ = ["layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm", "local_response_norm", "normalize"]


def _check(op, x, min_ndim=2):
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError(op, f"'input' must be a Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise OpTypeError(op, f"'input' must be a floating-point tensor, got {x.dtype}")
    if x.ndim < min_ndim:
        raise OpError(op, f"'input' must have at least {min_ndim} dims (N, C, ...), got shape {tuple(x.shape)}")


def _channel_shape(x) -> tuple:
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _check_vec(op, name, t, c, x):
    if t is None:
        return None
    if t.numel() != c:
        raise OpError(op, f"'{name}' must have {c} elements (one per channel), got shape {tuple(t.shape)}")
    if name in ("weight", "bias"):
        check_param_dtype(op, name, t, x)
    if not t.dtype.is_floating_point:
        raise OpTypeError(op, f"'{name}' must be a floating-point tensor, got {t.dtype}")
    return t


def _affine(y, weight, bias, shape):
    # in the activation's dtype: a float32 weight must not promote a bfloat16 activation
    if weight is not None:
        y = y * cast_like(weight.reshape(shape), y)
    if bias is not None:
        y = y + cast_like(bias.reshape(shape), y)
    return y


def _update(running, new, momentum: float) -> None:
    with no_grad():
        running.copy_(
            running * (1.0 - momentum) + new.detach().reshape(tuple(running.shape)).to(running.dtype) * momentum
        )


def batch_norm(
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """Normalise each channel (dim 1) over the batch and spatial dims.

    In training (or without running statistics) the batch statistics are used and, when given,
    ``running_mean`` / ``running_var`` are updated in place with ``momentum`` (the running variance
    is unbiased, as PyTorch). Otherwise the running statistics are used. A bfloat16 / float16 input
    may have float32 ``weight``, ``bias`` and running statistics; the output has the input's dtype.

    >>> import flow
    >>> x = flow.randn(4, 3, 5).bfloat16()
    >>> batch_norm(x, flow.zeros(3), flow.ones(3), flow.ones(3), flow.zeros(3), training=True).dtype
    flow.bfloat16
    """
    op = "batch_norm"
    _check(op, input)
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        _check_vec(op, name, t, c, input)
    for name, v in (("momentum", momentum), ("eps", eps)):  # checked before the running statistics change
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise OpTypeError(op, f"'{name}' must be a float, got {type(v).__name__} {v!r}")
    if _fused(input, running_mean, running_var, weight, bias):
        return _batch_norm_fused(input, running_mean, running_var, weight, bias, training, momentum, eps)
    cs = _channel_shape(input)
    dims = (0,) + tuple(range(2, input.ndim))
    if training or running_mean is None or running_var is None:
        n = input.numel() // max(c, 1)
        if training and n <= 1:
            raise OpError(
                op, f"expected more than 1 value per channel when training, got input size {tuple(input.shape)}"
            )
        if momentum is None:
            raise OpTypeError(op, "'momentum' must be a float (modules pass their cumulative-average factor)")
        mean = input.mean(dims, keepdim=True)
        xc = input - mean
        var = (xc * xc).mean(dims, keepdim=True)
        if training:
            if running_mean is not None:
                _update(running_mean, mean, float(momentum))
            if running_var is not None:
                _update(running_var, var * (n / max(n - 1, 1)), float(momentum))
        y = xc * rsqrt(var + eps)
    else:
        mean = cast_like(running_mean.reshape(cs), input)
        # per channel, in the running statistics' dtype: one rounding to the input's
        rstd = cast_like(rsqrt(running_var.reshape(cs) + eps), input)
        y = (input - mean) * rstd
    return _affine(y, weight, bias, cs)


def _fused(input, *vecs) -> bool:
    """The fused ``batch_norm`` op takes float32 / float64 with every vector in the input's dtype; mixed
    precision (a low-precision input, float32 parameters) keeps the composite above, as does
    ``FLOW_BATCH_NORM_COMPOSITE=1`` (kept to measure one against the other)."""
    if input.dtype not in (D.float32, D.float64) or os.environ.get("FLOW_BATCH_NORM_COMPOSITE") == "1":
        return False
    return all(t is None or t.dtype is input.dtype for t in vecs)


def _batch_norm_fused(input, running_mean, running_var, weight, bias, training, momentum, eps):
    op = "batch_norm"
    use_batch = bool(training) or running_mean is None or running_var is None
    if use_batch and momentum is None:
        raise OpTypeError(op, "'momentum' must be a float (modules pass their cumulative-average factor)")
    # the op takes (C,) vectors in the input's dtype (torch accepts any shape with C elements). cast_like
    # is a no-op here, but when the AMP pass lowers the activation of a float32 trace it casts the float32
    # parameters with it, so the op still sees one dtype
    vec = [None if t is None else cast_like(t.reshape(-1), input) for t in (weight, bias, running_mean, running_var)]
    stats = (None, None) if use_batch else (vec[2], vec[3])
    y, mean, invstd = batch_norm_op(input, vec[0], vec[1], *stats, use_batch, float(eps))
    if training and (running_mean is not None or running_var is not None):
        n = input.numel() // max(input.shape[1], 1)
        with no_grad():
            if running_mean is not None:
                _update(running_mean, mean, float(momentum))
            if running_var is not None:
                # the biased batch variance back from invstd (in float64), made unbiased as PyTorch's
                inv = invstd.detach().to(D.float64)
                _update(running_var, (1.0 / (inv * inv) - float(eps)) * (n / (n - 1)), float(momentum))
    return y


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalise groups of ``C / num_groups`` channels (with their spatial dims) per sample; a
    bfloat16 / float16 input may have float32 ``weight`` / ``bias`` (the output has its dtype)."""
    op = "group_norm"
    _check(op, input)
    n, c = input.shape[0], input.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise OpError(op, f"expected the number of channels ({c}) to be divisible by num_groups ({num_groups})")
    _check_vec(op, "weight", weight, c, input)
    _check_vec(op, "bias", bias, c, input)
    if input.numel() == 0:
        return _affine(input * 1.0, weight, bias, _channel_shape(input))
    y = layer_norm(input.reshape(n, num_groups, -1), (input.numel() // (n * num_groups),), eps=eps)
    return _affine(y.reshape(tuple(input.shape)), weight, bias, _channel_shape(input))


def instance_norm(
    input,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """Normalise each (sample, channel) over its spatial dims; running statistics as ``batch_norm``."""
    op = "instance_norm"
    _check(op, input, 3 if use_input_stats else 2)
    n, c = input.shape[0], input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        _check_vec(op, name, t, c, input)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise OpError(op, "expected running_mean and running_var when use_input_stats=False")
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    s = input.numel() // max(n * c, 1)
    if s <= 1:
        raise OpError(op, f"expected more than 1 spatial element when training, got input size {tuple(input.shape)}")
    x3 = input.reshape(n, c, s)
    if running_mean is not None or running_var is not None:
        with no_grad():
            mean = x3.mean(2)
            xc = x3 - mean.unsqueeze(2)
            var = (xc * xc).sum(2) / float(s - 1)
            if running_mean is not None:
                _update(running_mean, mean.mean(0), float(momentum))
            if running_var is not None:
                _update(running_var, var.mean(0), float(momentum))
    y = layer_norm(x3, (s,), eps=eps).reshape(tuple(input.shape))
    return _affine(y, weight, bias, _channel_shape(input))


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims (PyTorch 2.4+)."""
    op = "rms_norm"
    _check(op, input, 1)
    nshape = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
    k = len(nshape)
    if k == 0 or input.ndim < k or tuple(input.shape[input.ndim - k :]) != nshape:
        raise OpError(
            op,
            f"'normalized_shape' {nshape} must match the trailing dims of the input, got input "
            f"shape {tuple(input.shape)}",
        )
    if weight is not None and tuple(weight.shape) != nshape:
        raise OpError(op, f"'weight' must have shape {nshape}, got {tuple(weight.shape)}")
    if eps is None:
        eps = float(np.finfo(input.dtype.np if input.dtype.itemsize >= 4 else np.float32).eps)
    dims = tuple(range(input.ndim - k, input.ndim))
    y = input * rsqrt((input * input).mean(dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """Normalise over ``size`` neighbouring channels: ``x / (k + alpha * mean(x^2 over the window))^beta``."""
    from flow.ops.linalg import matmul

    op = "local_response_norm"
    _check(op, input, 3)
    if input.numel() == 0:
        return input
    c = input.shape[1]
    lo, hi = size // 2, (size - 1) // 2
    idx = np.arange(c)
    band = ((idx[:, None] >= idx[None, :] - lo) & (idx[:, None] <= idx[None, :] + hi)).astype(input.dtype.np)
    b = constant_for(input, band / float(size), dtype=input.dtype)
    perm = [0] + list(range(2, input.ndim)) + [1]
    inv = [0, input.ndim - 1] + list(range(1, input.ndim - 1))
    sq = (input * input).permute(*perm)
    div = matmul(sq, b).permute(*inv)
    return input / (div * alpha + k) ** beta


def vector_norm(x, p: float, dim, keepdim: bool = False):
    """p-norm along ``dim`` with a zero (not NaN) gradient at the origin."""
    a = x.abs()
    if p == 1:
        return a.sum(dim, keepdim=keepdim)
    if p == 2:
        s = (x * x).sum(dim, keepdim=keepdim)
        pos = s > 0
        return where(pos, sqrt(where(pos, s, 1.0)), 0.0)
    if math.isinf(p):
        try:
            from flow.ops.reduction_minmax import amax, amin
        except ImportError:
            raise OpError("norm", "p=inf needs flow.amax, which is not available") from None
        return amax(a, dim, keepdim=keepdim) if p > 0 else amin(a, dim, keepdim=keepdim)
    if p <= 0:
        raise OpError("norm", f"'p' must be positive, got {p}")
    pos_a = a > 0
    s = where(pos_a, where(pos_a, a, 1.0) ** float(p), 0.0).sum(dim, keepdim=keepdim)
    pos = s > 0
    return where(pos, where(pos, s, 1.0) ** (1.0 / p), 0.0)


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """``x / max(||x||_p, eps)`` along ``dim``."""
    op = "normalize"
    _check(op, input, 0)
    d = M.wrap_dim(op, dim, input.ndim)
    if input.ndim == 0:
        raise OpError(op, "'input' must have at least 1 dim")
    if p == 2:
        denom = sqrt(clamp((input * input).sum(d, keepdim=True), min=eps * eps))
    else:
        denom = clamp(vector_norm(input, float(p), d, keepdim=True), min=eps)
    res = input / denom
    if out is not None:
        with no_grad():
            out.copy_(res)
        return out
    return res
