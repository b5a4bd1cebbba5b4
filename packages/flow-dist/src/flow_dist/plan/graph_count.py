"""What a compiled graph on global tensors communicates: its ``sbp_boxing`` nodes and gradient buckets.

The simulator's DP model counts the gradient all-reduce only; a step on global tensors also boxes its
loss (the mean cross-entropy's partial sums are all-reduced inside the graph) and the caller reads
the loss back (one more all-reduce when it is still a partial sum). :func:`graph_collectives` counts
the communicating conversions a compiled graph holds, so a prediction can charge what actually runs.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from flow_dist.boxing import OP_NAME as BOXING
from flow_dist.grad_buckets import START as BUCKET
from flow_dist.sbp import Broadcast, PartialSum, Split

__all__ = ["GraphCollectives", "graph_collectives"]


@dataclass
class GraphCollectives:
    """``counts[kind]`` of the communicating ``sbp_boxing`` nodes (``"P->B"``: an all-reduce, ``"S->B"``:
    an all-gather, ...), ``nbytes[kind]`` their inputs' local bytes, ``small`` how many of them move at
    most ``small_limit`` bytes (a loss, a scalar: each costs one collective's latency and nothing
    else), ``buckets`` the gradient buckets' all-reduces (``sbp_all_reduce_start``)."""

    counts: Counter = field(default_factory=Counter)
    nbytes: Counter = field(default_factory=Counter)
    small: int = 0
    buckets: int = 0

    def total(self) -> int:
        return sum(self.counts.values()) + self.buckets


def _kind(node) -> str | None:
    """``"P->B"`` etc. for a conversion that sends bytes; None for a local one (B->S, B->P, S->P)."""
    axis = node.attrs["axis"]
    frm, to = node.attrs["sbp"][axis], node.attrs["to"]
    if node.attrs["placement"].hierarchy[axis] == 1 or frm == to:
        return None
    if not isinstance(to, (Broadcast, Split)):
        return None
    if isinstance(frm, PartialSum):
        return "P->B" if isinstance(to, Broadcast) else "P->S"
    if isinstance(frm, Split):
        return "S->B" if isinstance(to, Broadcast) else "S->S"
    return None


def graph_collectives(ir, small_limit: int = 1024) -> GraphCollectives:
    """Count the collectives ``ir`` (a compiled graph's optimised IR: ``graph.ir``) runs per step."""
    if not hasattr(ir, "nodes"):
        raise TypeError(f"graph_collectives: expected a graph IR (nn.Graph.ir), got {type(ir).__name__}")
    out = GraphCollectives()
    for node in ir.nodes:
        if node.name == BUCKET:
            out.buckets += 1
        elif node.name == BOXING:
            kind = _kind(node)
            if kind is None:
                continue
            x = next(node.input_values())
            nb = math.prod(int(d) for d in x.shape) * x.dtype.itemsize
            out.counts[kind] += 1
            out.nbytes[kind] += nb
            out.small += nb <= small_limit
    return out
