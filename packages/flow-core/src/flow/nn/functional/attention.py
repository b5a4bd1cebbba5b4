"""Attention, as ``torch.nn.functional``: ``scaled_dot_product_attention``.

Composed of matmul, masking, softmax and dropout, so its gradient (of any
order) comes from autograd. Rows whose keys are all masked give zeros (as
PyTorch's math backend), not NaN.

Where the fused ``flash_attention`` op applies (no ``attn_mask``, ``dropout_p == 0``, float32 /
float64 on the CPU, equal leading dims after the GQA repeat) it runs instead: the same values, with
the (L, S) score matrix never formed on the CPU; its gradients of any order come from the op's.
``flow.backends.cpu.attention.enable_flash_sdp(False)`` (or ``FLOW_CPU_FLASH_ATTENTION=0``) keeps
the composite everywhere.
"""

from __future__ import annotations

import math

import numpy as np

from flow._creation import constant_for
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops.clamp_where import where
from flow.ops.linalg import matmul
from flow.ops.nn_act import softmax

__all__ = ["scaled_dot_product_attention"]


def _check(query, key, value, attn_mask, dropout_p):
    from flow._tensor import Tensor

    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise OpTypeError(op, f"'{name}' must be a Tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise OpError(op, f"'{name}' must have at least 2 dims (..., L, E), got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise OpTypeError(op, f"'{name}' must be a floating-point tensor, got {t.dtype}")
    if not (query.dtype == key.dtype == value.dtype):
        raise OpTypeError(
            op, f"query, key and value must have the same dtype, got {query.dtype}, {key.dtype} and {value.dtype}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise OpError(
            op, f"query and key must have the same embedding size, got {tuple(query.shape)} and {tuple(key.shape)}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise OpError(
            op, f"key and value must have the same sequence length, got {tuple(key.shape)} and {tuple(value.shape)}"
        )
    if not 0.0 <= float(dropout_p) <= 1.0:
        raise OpError(op, f"'dropout_p' must be in [0, 1], got {dropout_p}")
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise OpTypeError(op, f"'attn_mask' must be a Tensor, got {type(attn_mask).__name__}")
        if attn_mask.dtype.name != "bool" and attn_mask.dtype != query.dtype:
            raise OpTypeError(
                op, f"'attn_mask' must be bool or have the query's dtype {query.dtype}, got {attn_mask.dtype}"
            )
        want = (query.shape[-2], key.shape[-2])
        M.broadcast_shapes(op, tuple(attn_mask.shape), tuple(query.shape[:-2]) + want)


def _use_flash(query, key, value, attn_mask, dropout_p) -> bool:
    """Whether the fused op computes this call (the composite does everything else)."""
    from flow.backends.cpu.attention import flash_sdp_enabled

    if attn_mask is not None or dropout_p > 0 or not flash_sdp_enabled():
        return False
    if query.dtype.name not in ("float32", "float64") or getattr(query.device, "type", None) != "cpu":
        return False
    lead = tuple(query.shape[:-2])
    return lead == tuple(key.shape[:-2]) == tuple(value.shape[:-2]) and key.shape[-2] > 0


def _repeat_heads(t, groups: int):
    """(..., Hk, S, E) -> (..., Hk * groups, S, E), each head repeated ``groups`` times in a row."""
    s = tuple(t.shape)
    return t.unsqueeze(-3).expand(*(s[:-2] + (groups,) + s[-2:])).reshape(s[:-3] + (s[-3] * groups,) + s[-2:])


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
):
    """``softmax(q @ k^T * scale + mask) @ v`` over (..., L, E) query and (..., S, E) key / (..., S, Ev) value.

    ``attn_mask``: bool (True = may attend) or an additive float mask, broadcastable to (..., L, S);
    ``is_causal``: a top-left aligned lower-triangular mask; ``scale`` defaults to ``1 / sqrt(E)``;
    ``enable_gqa``: key/value heads (dim -3) are repeated to match the query's; ``dropout_p`` applies
    dropout to the attention weights.
    """

    op = "scaled_dot_product_attention"
    _check(query, key, value, attn_mask, dropout_p)
    if is_causal and attn_mask is not None:
        raise OpError(op, "an explicit attn_mask must not be given with is_causal=True")
    if enable_gqa and key.ndim >= 3:
        hq, hk = query.shape[-3], key.shape[-3]
        if hq % hk or value.shape[-3] != hk:
            raise OpError(op, f"query heads ({hq}) must be a multiple of key/value heads ({hk}, {value.shape[-3]})")
        if hq != hk:
            key, value = _repeat_heads(key, hq // hk), _repeat_heads(value, hq // hk)
    L, S = query.shape[-2], key.shape[-2]
    sc = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if _use_flash(query, key, value, attn_mask, dropout_p):
        from flow.ops.nn_attention import flash_attention

        return flash_attention(query, key, value, is_causal=bool(is_causal), scale=sc)[0]
    scores = matmul(query, key.transpose(-2, -1)) * sc
    row_ok = None  # rows with at least one key to attend to (None: all of them)
    if is_causal:  # top-left aligned: row i sees keys 0..i, so no row is fully masked
        scores = where(constant_for(scores, np.tril(np.ones((L, S), bool))), scores, -math.inf)
    elif attn_mask is not None and attn_mask.dtype.name == "bool":
        row_ok = attn_mask.sum(-1, keepdim=True) > 0
        scores = where(attn_mask | ~row_ok, scores, -math.inf)  # fully masked rows: softmax of finite scores...
    elif attn_mask is not None:
        row_ok = (attn_mask > -math.inf).sum(-1, keepdim=True) > 0
        scores = scores + where(row_ok, attn_mask, 0.0)
    attn = softmax(scores, -1)
    if row_ok is not None:
        attn = where(row_ok, attn, 0.0)  # ...then zeroed (output and gradient)
    if dropout_p > 0:
        from flow.nn.functional.dropout import dropout

        attn = dropout(attn, dropout_p, training=True)
    return matmul(attn, value)
