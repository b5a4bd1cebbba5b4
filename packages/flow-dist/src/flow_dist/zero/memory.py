"""``memory_report``: the bytes of parameters, gradients and optimizer state one rank holds."""

from __future__ import annotations

import numpy as np

from flow import nn

__all__ = ["memory_report"]


# numpy 2 moved byte_bounds into numpy.lib.array_utils
_byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds


def _intervals(arrays) -> list[tuple[int, int]]:
    out = []
    for a in arrays:
        if a is None or a.__class__ is not np.ndarray or a.size == 0:
            continue
        lo, hi = _byte_bounds(a)
        out.append((lo, hi))
    return out


def _union_bytes(spans: list[tuple[int, int]]) -> int:
    """Bytes covered by the spans: a view (a shard of a parameter, a state viewing a flat buffer)
    counts once, with what it views."""
    total, end = 0, None
    for lo, hi in sorted(spans):
        if end is None or lo >= end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total


def memory_report(model: nn.Module, optimizer) -> dict[str, int]:
    """Bytes this rank holds now: ``{"parameters", "gradients", "optimizer_state", "total"}``.

    ``optimizer`` is a :class:`~flow_dist.zero.ZeroRedundancyOptimizer` (its shards count too) or
    any flow optimizer (nothing sharded). Memory shared by several tensors counts once; the
    optimizer state is its per-element buffers (``exp_avg``, ``momentum_buffer``, ...), not the
    step counts. After a step with AdamW at ``n`` ranks, about: stage 0 (a plain optimizer) P + P
    + 2P; stage 1 P + P + 2P/n; stage 2 P + P/n + 2P/n; stage 3 P/n + P/n + 2P/n.
    """
    from flow_dist.zero.optimizer import ZeroRedundancyOptimizer

    params = list({id(p): p for p in model.parameters()}.values())
    p_arrays = [p._data for p in params]
    g_arrays = [p.grad._data if p.grad is not None else None for p in params]
    inner = optimizer
    if isinstance(optimizer, ZeroRedundancyOptimizer):
        inner = optimizer.optim
        for e in optimizer._entries:
            p_arrays.append(e.shard._data)
            g_arrays.append(e.shard.grad._data if e.shard.grad is not None else None)
    state = inner.state
    s_arrays = [t._data for p in state for t in state[p].values() if t.dim() > 0]
    report = {
        "parameters": _union_bytes(_intervals(p_arrays)),
        "gradients": _union_bytes(_intervals(g_arrays)),
        "optimizer_state": _union_bytes(_intervals(s_arrays)),
    }
    report["total"] = sum(report.values())
    return report
