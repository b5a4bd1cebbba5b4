"""Loss functions, as ``torch.nn.functional``.

``cross_entropy`` (class indices) and ``nll_loss`` are fused ops
(:mod:`flow.ops.nn_loss`); the others are composites of flow ops, so their
gradients come from autograd.
"""

from __future__ import annotations

import math
import warnings

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops import nn_loss as _L
from flow.ops.clamp_where import clamp, where
from flow.ops.composite import composite
from flow.ops.nn_act import log_softmax
from flow.ops.nn_bce import binary_cross_entropy as _bce
from flow.ops.unary import exp, log, relu, softplus

__all__ = [
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "margin_ranking_loss",
    "soft_margin_loss",
    "hinge_embedding_loss",
    "poisson_nll_loss",
    "gaussian_nll_loss",
    "cosine_embedding_loss",
    "triplet_margin_loss",
    "multilabel_soft_margin_loss",
    "cosine_similarity",
    "pairwise_distance",
    "ctc_loss",
]


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's mapping of the deprecated ``size_average`` / ``reduce`` flags to ``reduction``."""
    if size_average is None and reduce is None:
        return reduction
    warnings.warn(
        "size_average and reduce args will be deprecated, please use reduction='mean'/'sum'/'none' instead.",
        stacklevel=3,
    )
    sa = True if size_average is None else size_average
    rd = True if reduce is None else reduce
    return "mean" if sa and rd else "sum" if rd else "none"


def _tensor(op, name, v):
    from flow._tensor import Tensor

    if not isinstance(v, Tensor):
        raise OpTypeError(op, f"'{name}' must be a Tensor, got {type(v).__name__}")


def _check_reduction(op, reduction, allowed=("none", "mean", "sum")):
    if reduction not in allowed:
        raise OpError(op, f"'reduction' must be one of {allowed}, got {reduction!r}")


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _float(op, name, t):
    if not t.dtype.is_floating_point:
        raise OpTypeError(op, f"'{name}' must be a floating-point tensor, got {t.dtype}")


def _pair(op, input, target, reduction, size_average=None, reduce=None):
    """Check a regression loss's arguments; warn (as PyTorch) when target broadcasts to another shape."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    _check_reduction(op, reduction)
    if tuple(input.shape) != tuple(target.shape):
        M.broadcast_shapes(op, tuple(input.shape), tuple(target.shape))
        warnings.warn(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.",
            stacklevel=3,
        )
    return reduction


def _weighted(op, loss, weight, input, reduction, mean_by_weight: bool):
    if weight is None:
        return _reduce(loss, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise OpError(op, f"'weight' must have the input's shape {tuple(input.shape)}, got {tuple(weight.shape)}")
    loss = loss * weight
    if reduction == "mean" and mean_by_weight:
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction)


# -- classification ---------------------------------------------------------------------------------------
@composite("cross_entropy")
def cross_entropy(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    """Cross entropy between logits ``input`` (class dim 1, or 0 for 1-d) and class indices or class
    probabilities ``target``; ``weight`` per class, ``label_smoothing`` in [0, 1]."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _tensor("cross_entropy", "input", input)
    _tensor("cross_entropy", "target", target)
    _check_reduction("cross_entropy", reduction)
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise OpError("cross_entropy", f"'label_smoothing' must be in [0, 1], got {label_smoothing}")
    if not target.dtype.is_floating_point:
        return _L.cross_entropy_indices(input, target, weight, ignore_index, reduction, label_smoothing)
    # class probabilities
    _float("cross_entropy", "input", input)
    if tuple(target.shape) != tuple(input.shape):
        raise OpError(
            "cross_entropy",
            f"probability 'target' must have the input's shape {tuple(input.shape)}, got {tuple(target.shape)}",
        )
    cdim = 0 if input.ndim == 1 else 1
    c = input.shape[cdim]
    logp = log_softmax(input, cdim)
    if label_smoothing > 0:
        target = target * (1.0 - label_smoothing) + label_smoothing / c
    prod = logp * target
    if weight is not None:
        if tuple(weight.shape) != (c,):
            raise OpError("cross_entropy", f"'weight' must have shape ({c},), got {tuple(weight.shape)}")
        prod = prod * weight.reshape((c,) + (1,) * (input.ndim - 1 - cdim))
    loss = -prod.sum(cdim)
    if reduction == "mean":
        return loss.sum() / float(input.numel() // c if c else 0)
    return _reduce(loss, reduction)


def nll_loss(
    input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None, reduction: str = "mean"
):
    """Negative log-likelihood of class indices ``target`` given log-probabilities ``input``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _tensor("nll_loss", "input", input)
    _tensor("nll_loss", "target", target)
    _check_reduction("nll_loss", reduction)
    return call(_L.NLL_LOSS, input, target, weight, ignore_index=int(ignore_index), reduction=reduction)


def _check_unit_interval(op, t):
    from flow.autograd import no_grad

    with no_grad():
        bad = int(((t < 0) | (t > 1)).sum().item()) > 0
    if bad:
        raise OpError(op, "all elements of 'input' should be between 0 and 1")


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    """``-w (t log x + (1 - t) log(1 - x))`` for probabilities ``input`` (logs clamped at -100)."""
    op = "binary_cross_entropy"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    _check_reduction(op, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise OpError(op, f"'target' must have the input's shape {tuple(input.shape)}, got {tuple(target.shape)}")
    _float(op, "input", input)
    _check_unit_interval(op, input)
    if target.dtype is not input.dtype:
        target = target.to(input.dtype)
    loss = _bce(input, target)  # PyTorch's clamped forward and backward (finite at 0 and 1)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@composite("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(
    input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None
):
    """Sigmoid + binary cross entropy in one stable formula; ``pos_weight`` weighs positives per class."""
    op = "binary_cross_entropy_with_logits"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    _check_reduction(op, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise OpError(op, f"'target' must have the input's shape {tuple(input.shape)}, got {tuple(target.shape)}")
    _float(op, "input", input)
    sp = softplus(-input)  # log(1 + exp(-x)), stable
    if pos_weight is not None:
        M.broadcast_shapes(op, tuple(pos_weight.shape), tuple(input.shape))
        loss = (1.0 - target) * input + (1.0 + (pos_weight - 1.0) * target) * sp
    else:
        loss = (1.0 - target) * input + sp
    if weight is not None:
        M.broadcast_shapes(op, tuple(weight.shape), tuple(input.shape))
        loss = loss * weight
    return _reduce(loss, reduction)


def _xlogy_self(t):
    pos = t > 0
    return where(pos, t * log(where(pos, t, 1.0)), 0.0)


@composite("kl_div")
def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    """KL divergence with ``input`` log-probabilities; ``reduction='batchmean'`` matches the math definition."""
    op = "kl_div"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    _check_reduction(op, reduction, ("none", "mean", "sum", "batchmean"))
    M.broadcast_shapes(op, tuple(input.shape), tuple(target.shape))
    if reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support size."
            "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
            "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
            stacklevel=2,
        )
    if log_target:
        loss = exp(target) * (target - input)
    else:
        loss = _xlogy_self(target) - target * input
    if reduction == "batchmean":
        return loss.sum() / float(input.shape[0]) if input.ndim else loss.sum()
    return _reduce(loss, reduction)


# -- regression ----------------------------------------------------------------------------------------------
@composite("mse_loss")
def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean squared error; ``weight`` (input's shape) gives a weighted mean."""
    reduction = _pair("mse_loss", input, target, reduction, size_average, reduce)
    d = input - target
    return _weighted("mse_loss", d * d, weight, input, reduction, True)


@composite("l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean absolute error; ``weight`` (input's shape) gives a weighted mean."""
    reduction = _pair("l1_loss", input, target, reduction, size_average, reduce)
    return _weighted("l1_loss", (input - target).abs(), weight, input, reduction, True)


@composite("smooth_l1_loss")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    """``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``."""
    reduction = _pair("smooth_l1_loss", input, target, reduction, size_average, reduce)
    if beta < 0:
        raise OpError("smooth_l1_loss", f"'beta' must be non-negative, got {beta}")
    a = (input - target).abs()
    if beta == 0:
        return _reduce(a, reduction)
    return _reduce(where(a < beta, a * a * (0.5 / beta), a - 0.5 * beta), reduction)


@composite("huber_loss")
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """``0.5 d^2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``."""
    reduction = _pair("huber_loss", input, target, reduction)
    if delta <= 0:
        raise OpError("huber_loss", f"'delta' must be positive, got {delta}")
    a = (input - target).abs()
    loss = where(a < delta, a * a * 0.5, (a - 0.5 * delta) * delta)
    return _weighted("huber_loss", loss, weight, input, reduction, False)


@composite("poisson_nll_loss")
def poisson_nll_loss(
    input,
    target,
    log_input: bool = True,
    full: bool = False,
    size_average=None,
    eps: float = 1e-8,
    reduce=None,
    reduction: str = "mean",
):
    """Poisson negative log-likelihood (Stirling term with ``full=True``)."""
    reduction = _pair("poisson_nll_loss", input, target, reduction, size_average, reduce)
    loss = exp(input) - target * input if log_input else input - target * log(input + eps)
    if full:
        t = target
        safe = where(t > 1, t, 1.0)
        st = safe * log(safe) - safe + 0.5 * log(safe * (2 * math.pi))
        loss = loss + where(t > 1, st, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
    """Gaussian negative log-likelihood with (broadcastable) variance ``var``."""
    op = "gaussian_nll_loss"
    reduction = _pair(op, input, target, reduction)
    from flow._tensor import Tensor

    if not isinstance(var, Tensor):
        import flow

        var = flow.full(tuple(input.shape), float(var), dtype=input.dtype, device=input.device)
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (var.ndim == input.ndim and sum(1 for a, b in zip(input.shape, var.shape) if a != b) == 1):
            raise OpError(op, f"'var' has incorrect shape {tuple(var.shape)} for input {tuple(input.shape)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from flow.autograd import no_grad

        with no_grad():
            if int((var < 0).sum().item()) > 0:
                raise OpError(op, "'var' has negative entries")
    var = clamp(var, min=eps)  # PyTorch clamps without a gradient through the clamp: same away from eps
    d = input - target
    loss = (log(var) + d * d / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


# -- margin / embedding losses ---------------------------------------------------------------------------------
@composite("margin_ranking_loss")
def margin_ranking_loss(
    input1, input2, target, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"
):
    """``max(0, -y (x1 - x2) + margin)``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("margin_ranking_loss", reduction)
    M.broadcast_shapes("margin_ranking_loss", tuple(input1.shape), tuple(input2.shape), tuple(target.shape))
    return _reduce(relu(-target * (input1 - input2) + margin), reduction)


@composite("soft_margin_loss")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """``log(1 + exp(-y x))``."""
    reduction = _pair("soft_margin_loss", input, target, reduction, size_average, reduce)
    return _reduce(softplus(-target * input), reduction)


@composite("hinge_embedding_loss")
def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean"):
    """``x`` where ``y == 1``, ``max(0, margin - x)`` where ``y == -1``."""
    reduction = _pair("hinge_embedding_loss", input, target, reduction, size_average, reduce)
    zeros = input * 0.0
    pos = where(target == 1, input, zeros)
    neg = where(target == -1, relu(margin - input), zeros)
    return _reduce(pos + neg, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    """Per-class binary logistic loss averaged over classes."""
    reduction = _pair("multilabel_soft_margin_loss", input, target, reduction, size_average, reduce)
    loss = -(target * -softplus(-input) + (1.0 - target) * -softplus(input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss.mean(input.ndim - 1), reduction)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (each norm clamped to ``eps``)."""
    _tensor("cosine_similarity", "x1", x1)
    _tensor("cosine_similarity", "x2", x2)
    shape = M.broadcast_shapes("cosine_similarity", tuple(x1.shape), tuple(x2.shape))
    x1, x2 = x1.expand(*shape), x2.expand(*shape)
    d = M.wrap_dim("cosine_similarity", dim, len(shape))
    n1 = _safe_l2(x1, d, eps)
    n2 = _safe_l2(x2, d, eps)
    return ((x1 / n1) * (x2 / n2)).sum(d)


def _safe_l2(x, dim, eps):
    """``max(||x||_2, eps)`` along ``dim`` (keepdim), with a finite gradient at zero."""
    from flow.ops.unary import sqrt

    return sqrt(clamp((x * x).sum(dim, keepdim=True), min=eps * eps))


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """``||x1 - x2 + eps||_p`` over the last dim."""
    _tensor("pairwise_distance", "x1", x1)
    _tensor("pairwise_distance", "x2", x2)
    M.broadcast_shapes("pairwise_distance", tuple(x1.shape), tuple(x2.shape))
    nd = max(x1.ndim, x2.ndim)
    from flow.nn.functional.normalization import vector_norm

    return vector_norm(x1 - x2 + eps, p, max(nd - 1, 0), keepdim)


@composite("cosine_embedding_loss")
def cosine_embedding_loss(
    input1, input2, target, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"
):
    """``1 - cos`` for ``y == 1``, ``max(0, cos - margin)`` for ``y == -1``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("cosine_embedding_loss", reduction)
    eps = 1e-12
    d = input1.ndim - 1
    prod = (input1 * input2).sum(d)
    m1 = (input1 * input1).sum(d) + eps
    m2 = (input2 * input2).sum(d) + eps
    from flow.ops.unary import sqrt

    cos = prod / sqrt(m1 * m2)
    zeros = cos * 0.0
    loss = where(target == 1, 1.0 - cos, zeros) + where(target == -1, relu(cos - margin), zeros)
    return _reduce(loss, reduction)


@composite("triplet_margin_loss")
def triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with pairwise distances."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("triplet_margin_loss", reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        from flow.ops.arith import minimum

        d_neg = minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(relu(d_pos - d_neg + margin), reduction)


def ctc_loss(
    log_probs,
    targets,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
):
    """Connectionist temporal classification loss (see :mod:`flow.ops.nn_ctc`)."""
    from flow.ops.nn_ctc import ctc_loss as _ctc

    return _ctc(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
