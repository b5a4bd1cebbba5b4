"""Embedding lookups, as ``torch.nn.functional`` (``one_hot`` lives elsewhere)."""

from __future__ import annotations

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import nn_sparse as _S

__all__ = ["embedding", "embedding_bag"]


def _tensor(op, name, v):
    from flow._tensor import Tensor

    if not isinstance(v, Tensor):
        raise OpTypeError(op, f"'{name}' must be a Tensor, got {type(v).__name__}")


def _padding(op, padding_idx, v):
    if padding_idx is None:
        return None
    p = int(padding_idx)
    if not -v <= p < v:
        raise OpError(op, f"'padding_idx' must be within the number of embeddings ({v}), got {padding_idx}")
    return p + v if p < 0 else p


def _renorm_(op, weight, indices, max_norm, norm_type) -> None:
    """Rescale (in place, without autograd) the rows of ``weight`` used by ``indices`` to norm <= max_norm.

    Everything is validated before the first write: a bad index must not leave the weights half
    renormalised."""
    from flow.registry import get_device_type

    for name, v in (("max_norm", max_norm), ("norm_type", norm_type)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise OpTypeError(op, f"'{name}' must be a number, got {type(v).__name__} {v!r}")
        if not float(v) > 0:
            raise OpError(op, f"'{name}' must be positive, got {v}")
    max_norm, norm_type = float(max_norm), float(norm_type)
    if indices.dtype.is_floating_point or indices.dtype.name == "bool":
        raise OpTypeError(op, f"'input' (the indices) must be an integer tensor, got {indices.dtype}")
    xp = get_device_type(weight.device.type).xp
    rows = np.unique(np.asarray(indices.numpy_host()).reshape(-1))
    if rows.size == 0:
        return
    n = weight.shape[0]
    if rows[0] < 0 or rows[-1] >= n:
        bad = rows[0] if rows[0] < 0 else rows[-1]
        raise OpIndexError(op, f"index {int(bad)} is out of range for 'weight' with {n} rows (num_embeddings)")
    a = weight._data
    r = xp.asarray(rows)
    sel = a[r]
    norms = (xp.abs(sel.astype(xp.float64)) ** norm_type).sum(1) ** (1.0 / norm_type)
    scale = xp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    a[r] = (sel * scale[:, None]).astype(a.dtype)
    weight._version[0] += 1


def embedding(
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
):
    """Rows of ``weight`` at the indices in ``input``; ``padding_idx``'s row gets no gradient.

    ``max_norm`` renormalises the looked-up rows of ``weight`` in place first (as PyTorch);
    ``scale_grad_by_freq`` divides each row's gradient by its frequency in ``input``. ``sparse=True``
    makes ``weight``'s gradient a hybrid sparse COO tensor holding one row per lookup (uncoalesced).
    """
    _tensor("embedding", "input", input)
    _tensor("embedding", "weight", weight)
    if weight.ndim != 2:
        raise OpError(
            "embedding", f"'weight' must be 2-d (num_embeddings, embedding_dim), got shape {tuple(weight.shape)}"
        )
    pad = _padding("embedding", padding_idx, weight.shape[0])
    if sparse and scale_grad_by_freq:  # PyTorch refuses it too (in the backward)
        raise OpError("embedding", "scale_grad_by_freq is not supported with sparse gradients (sparse=True)")
    if max_norm is not None:
        _renorm_("embedding", weight, input, max_norm, norm_type)
    return call(
        _S.EMBEDDING, weight, input, padding_idx=pad, scale_grad_by_freq=bool(scale_grad_by_freq), sparse=bool(sparse)
    )


def embedding_bag(
    input,
    weight,
    offsets=None,
    max_norm=None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights=None,
    include_last_offset: bool = False,
    padding_idx=None,
):
    """Sums, means or maxima of bags of embeddings without materialising the per-index rows' gradient.

    ``input`` is 2-d (fixed-length bags, ``offsets`` None) or 1-d with ``offsets`` giving each bag's start
    (``include_last_offset``: one more offset, the end of the last bag). ``per_sample_weights``
    (mode 'sum' only) weighs each index; ``padding_idx`` entries are left out of their bag (and of the
    'mean' count). Empty bags give zeros. ``sparse=True`` (modes 'sum' and 'mean') makes ``weight``'s
    gradient a hybrid sparse COO tensor with one row per index taking part.
    """
    import flow

    op = "embedding_bag"
    _tensor(op, "input", input)
    _tensor(op, "weight", weight)
    if weight.ndim != 2:
        raise OpError(op, f"'weight' must be 2-d (num_embeddings, embedding_dim), got shape {tuple(weight.shape)}")
    if mode not in _S.MODES:
        raise OpError(op, f"'mode' must be one of {_S.MODES}, got {mode!r}")
    if scale_grad_by_freq:
        raise OpError(op, "scale_grad_by_freq is not supported")
    if per_sample_weights is not None and mode != "sum":
        raise OpError(op, f"'per_sample_weights' is only supported for mode='sum', got mode={mode!r}")
    if sparse and mode == "max":
        raise OpError(op, "mode='max' does not support sparse gradients (sparse=True), as in PyTorch")
    if input.ndim == 2:
        if offsets is not None:
            raise OpError(op, "'offsets' must be None when 'input' is 2-d (each row is a bag)")
        b, n = input.shape
        offsets = flow.tensor(np.arange(b, dtype=np.int64) * n, device=input.device)
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
        include_last_offset = False
    elif input.ndim == 1:
        if offsets is None:
            raise OpError(op, "'offsets' is required when 'input' is 1-d")
        if offsets.ndim != 1:
            raise OpError(op, f"'offsets' must be 1-d, got shape {tuple(offsets.shape)}")
    else:
        raise OpError(op, f"'input' must be 1-d or 2-d, got shape {tuple(input.shape)}")
    pad = _padding(op, padding_idx, weight.shape[0])
    if max_norm is not None:
        _renorm_("embedding_bag", weight, input, max_norm, norm_type)
    out, _ = call(
        _S.EMBEDDING_BAG,
        weight,
        input,
        offsets,
        per_sample_weights,
        mode=mode,
        padding_idx=pad,
        include_last_offset=bool(include_last_offset),
        sparse=bool(sparse),
    )
    return out
