"""Pieces shared by the recommendation models: MLPs and sparse-feature lookup."""

from __future__ import annotations

import flow
import flow.nn.functional as F
from flow import nn


def mlp(sizes: tuple, last_activation: bool = True) -> nn.Sequential:
    """``Linear -> ReLU`` for each consecutive pair of ``sizes`` (no ReLU after the last unless asked)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def lookup(tables: nn.ModuleList, sparse) -> list[flow.Tensor]:
    """Pool each table's ids into one vector per sample.

    ``sparse`` is either an int64 tensor ``(B, num_tables)`` (one id per table) or
    ``(B, num_tables, bag)`` (fixed-size bags), or a sequence with one entry per table: a tensor
    ``(B,)`` / ``(B, bag)`` of ids, or an ``(indices, offsets)`` pair in EmbeddingBag's 1-D form.
    """
    if isinstance(sparse, flow.Tensor):
        if sparse.ndim not in (2, 3) or sparse.shape[1] != len(tables):
            raise ValueError(
                f"sparse features must be (batch, {len(tables)}) or (batch, {len(tables)}, bag) ids, "
                f"got shape {tuple(sparse.shape)}"
            )
        cols = [sparse[:, t] for t in range(len(tables))]
    else:
        cols = list(sparse)
        if len(cols) != len(tables):
            raise ValueError(f"expected sparse features for {len(tables)} tables, got {len(cols)}")
    out = []
    for table, col in zip(tables, cols):
        if isinstance(col, (tuple, list)):
            out.append(table(col[0], col[1]))
        else:
            out.append(table(col.reshape(col.shape[0], -1)))
    return out


def bce_loss(logits: flow.Tensor, target: flow.Tensor) -> flow.Tensor:
    """Binary cross-entropy on click logits ``(B, 1)`` or ``(B,)`` against 0/1 labels."""
    return F.binary_cross_entropy_with_logits(logits.reshape(-1), target.reshape(-1).to(logits.dtype))
