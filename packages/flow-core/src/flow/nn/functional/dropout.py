"""Dropout, as ``torch.nn.functional``.

The keep mask is the op ``bernoulli_mask(input; shape, p, scale)`` (declared here): ``0`` or
``scale`` of the input's dtype and device, drawn on the host from flow's default generator (so
``flow.manual_seed`` makes it reproducible, and eager and graph mode draw the same masks in the
same order). Being an op, every interceptor sees it and a device plugin may register its own
kernel; in graph mode it is a node drawn each time the compiled step runs. The result is
``input * mask``, so the gradient comes from autograd.
"""

from __future__ import annotations

import warnings

import numpy as np

from flow.errors import OpError, OpTypeError
from flow.ops._define import defop, kernel
from flow.ops.meta import TensorMeta
from flow.registry.ops import FLOAT, Attr

__all__ = ["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"]

_SELU_ALPHA_PRIME = 1.7580993408473766  # -scale * alpha of SELU


def _check(op, input, p):
    from flow._tensor import Tensor

    if not isinstance(input, Tensor):
        raise OpTypeError(op, f"'input' must be a Tensor, got {type(input).__name__}")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        raise OpError(op, f"dropout probability has to be between 0 and 1, but got {p}")
    if not input.dtype.is_floating_point:
        raise OpTypeError(op, f"'input' must be a floating-point tensor, got {input.dtype}")


def _mask_meta(x, *, shape=(), p=0.5, scale=1.0):
    if any(s < 0 for s in shape):
        raise OpError("bernoulli_mask", f"'shape' must hold non-negative sizes, got {tuple(shape)}")
    if not 0.0 <= p <= 1.0:
        raise OpError("bernoulli_mask", f"'p' must be a probability in [0, 1], got {p}")
    return TensorMeta(tuple(int(s) for s in shape), x.dtype, x.device)


def _mask_samples():
    from flow.ops._samples import uniform
    from flow.testing import ErrorInput, SampleInput

    yield SampleInput((uniform((3, 4)),), dict(shape=(3, 4), p=0.25, scale=4.0 / 3.0), grad=False)
    yield ErrorInput((uniform((3, 4)),), dict(shape=(3, -4), p=0.25), OpError, "non-negative sizes")
    yield ErrorInput((uniform((3, 4)),), dict(shape=(3, 4), p=1.5), OpError, "'p' must be a probability")


bernoulli_mask = defop(
    "bernoulli_mask",
    ["input"],
    [Attr("shape", tuple, (), items=int), Attr("p", float, 0.5), Attr("scale", float, 1.0)],
    meta=_mask_meta,
    dtypes=FLOAT,
    save="none",
    samples=_mask_samples,
    nondeterministic=True,
    doc="dropout keep mask (0 or scale, input's dtype) drawn from the default generator",
)


@kernel(bernoulli_mask)
def _mask_kernel(xp):
    def bernoulli_mask(x, *, shape=(), p=0.5, scale=1.0):
        from flow._random import host_rng

        # float64 uniforms on the host, whatever the device: one random stream for every device and mode
        keep = host_rng(None).random(tuple(shape)) >= p
        m = keep.astype(x.dtype) * x.dtype.type(scale)
        return m if xp is np else xp.asarray(m)

    return bernoulli_mask


def _keep_mask(input, shape, p: float, scale: float):
    """The 0/``scale`` mask of ``shape`` (broadcastable to the input): the ``bernoulli_mask`` op."""
    from flow._dispatch import call

    return call(bernoulli_mask, input, shape=tuple(int(s) for s in shape), p=float(p), scale=float(scale))


def _finish(input, fn, op, inplace):
    """``fn(input)``, written into ``input`` with ``inplace=True`` (see ``flow.ops.inplace.inplace_call``)."""
    if inplace:
        from flow.ops.inplace import inplace_call

        return inplace_call(input, op + "_", fn)
    return fn(input)


def _dropout(op, input, p, training, inplace, shape):
    _check(op, input, p)
    p = float(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return _finish(input, lambda x: x * 0.0, op, inplace)
    mask = _keep_mask(input, shape, p, 1.0 / (1.0 - p))
    return _finish(input, lambda x: x * mask, op, inplace)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` (in training)."""
    return _dropout("dropout", input, p, training, inplace, tuple(input.shape) if hasattr(input, "shape") else ())


def _feature_shape(op, input, spatial: int):
    """The mask's shape: one draw per (sample, channel), with PyTorch's reading of each input rank.

    dropout1d accepts only (C, L) and (N, C, L). dropout2d and dropout3d, like PyTorch, warn on other
    ranks and go on: dropout2d then always reads the first two dims as (N, C) (so a 3-d input is
    (N, C, L), PyTorch's historical behaviour), dropout3d reads an input that is not 5-d as unbatched.
    """
    nd = input.ndim
    if nd not in (spatial + 1, spatial + 2):
        if spatial == 1 or (spatial == 2 and nd < 2):
            raise OpError(
                op,
                f"expected a {spatial + 1}-d (unbatched) or {spatial + 2}-d (batched) input, got shape "
                f"{tuple(input.shape)}",
            )
        warnings.warn(
            f"{op}: received a {nd}-d input; {op} is channel-wise dropout for {spatial + 1}-d (unbatched) or "
            f"{spatial + 2}-d (batched) inputs and other ranks are deprecated (as in PyTorch); use dropout instead",
            stacklevel=3,
        )
    if spatial == 2:
        if nd == 3:
            warnings.warn(
                "dropout2d: received a 3-d input; as in PyTorch it is read as (N, C, L) with channel-wise 1-d "
                "dropout behaviour (use dropout1d for that, or add the batch dim for a (C, H, W) input)",
                stacklevel=3,
            )
        lead = 2
    else:
        lead = 2 if nd == spatial + 2 else 1
    return tuple(input.shape[:lead]) + (1,) * (nd - lead)


def _feature(op, spatial):
    def fn(input, p: float = 0.5, training: bool = True, inplace: bool = False):
        _check(op, input, p)
        return _dropout(op, input, p, training, inplace, _feature_shape(op, input, spatial))

    fn.__name__ = op
    fn.__doc__ = f"Zero whole channels with probability ``p`` ({spatial}-d feature maps), scaling the rest."
    return fn


dropout1d = _feature("dropout1d", 1)
dropout2d = _feature("dropout2d", 2)
dropout3d = _feature("dropout3d", 3)


def _alpha(op, input, p, training, inplace, shape):
    _check(op, input, p)
    p = float(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return _finish(input, lambda x: x * 0.0, op, inplace)
    keep = _keep_mask(input, shape, p, 1.0)  # 0/1 of the input's dtype: the same op as dropout's
    a = 1.0 / ((_SELU_ALPHA_PRIME**2 * p + 1.0) * (1.0 - p)) ** 0.5
    mul = keep * a
    add = (keep - 1.0) * (_SELU_ALPHA_PRIME * a) + _SELU_ALPHA_PRIME * a * p
    return _finish(input, lambda x: x * mul + add, op, inplace)


def alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False):
    """Dropout that keeps SELU's self-normalising mean and variance."""
    return _alpha("alpha_dropout", input, p, training, inplace, tuple(input.shape))


def feature_alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False):
    """Alpha dropout of whole channels."""
    _check("feature_alpha_dropout", input, p)
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    return _alpha("feature_alpha_dropout", input, p, training, inplace, shape)
