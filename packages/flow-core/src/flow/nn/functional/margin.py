"""Multi-class margin losses, as ``torch.nn.functional``: multi_margin_loss and multilabel_margin_loss."""

from __future__ import annotations

import numpy as np

from flow.errors import OpError, OpTypeError
from flow.nn.functional.loss import _check_reduction, _reduce, legacy_reduction

__all__ = ["multi_margin_loss", "multilabel_margin_loss"]


def _inputs(op, input, target):
    from flow._tensor import Tensor

    for name, t in (("input", input), ("target", target)):
        if not isinstance(t, Tensor):
            raise OpTypeError(op, f"'{name}' must be a Tensor, got {type(t).__name__}")
    if not input.dtype.is_floating_point:
        raise OpTypeError(op, f"'input' must be a floating-point tensor, got {input.dtype}")
    if target.dtype.is_floating_point or target.dtype.category == 0:
        raise OpTypeError(op, f"'target' must be an integer tensor of class indices, got {target.dtype}")
    if input.ndim not in (1, 2):
        raise OpError(op, f"expected a 1-d (C) or 2-d (N, C) 'input', got shape {tuple(input.shape)}")


def multi_margin_loss(
    input,
    target,
    p: int = 1,
    margin: float = 1.0,
    weight=None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
):
    """``sum_{j != y} max(0, margin - x[y] + x[j])^p / C`` per sample (weighted by ``weight[y]``)."""
    op = "multi_margin_loss"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(op, reduction)
    _inputs(op, input, target)
    if p not in (1, 2):
        raise OpError(op, f"only p == 1 and p == 2 are supported, got p={p!r}")
    x = input.unsqueeze(0) if input.ndim == 1 else input
    N, Cn = tuple(x.shape)
    y = target.reshape(-1)
    if y.shape[0] != N:
        raise OpError(op, f"'target' must hold {N} class indices (one per sample), got shape {tuple(target.shape)}")
    yv = y.numpy()
    if ((yv < 0) | (yv >= Cn)).any():
        raise OpError(op, f"'target' values must be class indices in [0, {Cn}), got {yv.tolist()}")
    if weight is not None and tuple(weight.shape) != (Cn,):
        raise OpError(op, f"'weight' must have shape ({Cn},) (one per class), got {tuple(weight.shape)}")
    from flow._creation import tensor

    yl = y.long().unsqueeze(1)
    z = (x - x.gather(1, yl) + margin).clamp(min=0)
    if p == 2:
        z = z * z
    others = np.ones((N, Cn))
    others[np.arange(N), yv] = 0.0  # the target class itself is not a violation
    z = z * tensor(others, dtype=x.dtype, device=x.device)
    if weight is not None:
        z = z * weight.gather(0, y.long()).unsqueeze(1)
    loss = z.sum(1) / Cn
    if input.ndim == 1:
        loss = loss.squeeze(0)
    return _reduce(loss, reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """``sum_{j in targets, k not in targets} max(0, 1 - (x[j] - x[k])) / C`` per sample.

    ``target`` has the shape of ``input`` and lists each sample's classes, ended by the first -1.
    """
    op = "multilabel_margin_loss"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(op, reduction)
    _inputs(op, input, target)
    if tuple(target.shape) != tuple(input.shape):
        raise OpError(op, f"'target' must have the shape of 'input' {tuple(input.shape)}, got {tuple(target.shape)}")
    x = input.unsqueeze(0) if input.ndim == 1 else input
    N, Cn = tuple(x.shape)
    tv = target.numpy().reshape(N, Cn)
    counts = np.zeros((N, Cn))
    for n in range(N):
        for c in tv[n]:
            if c < 0:
                break  # the list of targets ends at the first -1
            if c >= Cn:
                raise OpError(op, f"'target' values must be class indices in [0, {Cn}) or -1, got {int(c)}")
            counts[n, c] += 1
    from flow._creation import tensor

    # pair (j, k) counts once per listing of target j, for every non-target k
    pairs = counts[:, :, None] * (counts[:, None, :] == 0)
    hinge = (1.0 - x.unsqueeze(2) + x.unsqueeze(1)).clamp(min=0)
    loss = (hinge * tensor(pairs, dtype=x.dtype, device=x.device)).sum((1, 2)) / Cn
    if input.ndim == 1:
        loss = loss.squeeze(0)
    return _reduce(loss, reduction)
