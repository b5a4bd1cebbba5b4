"""Cross-entropy over a vocabulary split across ranks (Megatron's vocabulary-parallel loss).

A vocabulary-parallel output layer leaves the logits ``(N, V)`` split on the classes (``S(1)``).
Gathering them would send ``N V`` values per step; instead each rank takes the log-sum-exp of its
columns and the logit of the targets that fall among them, and the ranks exchange those two
``N``-vectors (an all-reduce of ``N x pieces`` log-sum-exps and one of ``N`` logits): the loss is
then whole on every rank of the split axis. Its backward is the softmax of the local columns
(with the global log-sum-exp) minus the targets' one-hot, split as the logits are.

Only class-index targets without class weights or label smoothing take this path; the rule
offers the signature only then. The handler runs one local function for every placement axis, so
:func:`dispatch` wraps the batch-split signatures' local function (the mean over the whole batch)
to take the vocabulary path when the logits' pieces are split on the classes.
"""

from __future__ import annotations

from flow_dist.errors import GlobalTensorError
from flow_dist.rules.base import B, RuleContext, S, Sig

__all__ = ["forward_sigs", "backward_sigs", "dispatch"]


def _offered(ctx: RuleContext, x: int, t: int, w: int) -> bool:
    return (
        ctx.shapes[x] is not None
        and len(ctx.shapes[x]) == 2
        and len(ctx.shapes[t]) == 1
        and ctx.shapes[w] is None
        and ctx.attr("label_smoothing", 0.0) == 0
        and ctx.shapes[x][1] % ctx.axis_size == 0
    )


def forward_sigs(ctx: RuleContext) -> list:
    """``cross_entropy(input, target, weight)``: ``(S(1), B, -) -> B``, the loss whole on the axis."""
    if not _offered(ctx, 0, 1, 2):
        return []
    return [Sig((S(1), B, None), (B,), local=dispatch(None, False), note="vocabulary parallel")]


def backward_sigs(ctx: RuleContext) -> list:
    """``cross_entropy_backward(grad, input, target, weight)``: ``(B, S(1), B, -) -> S(1)``."""
    if not _offered(ctx, 1, 2, 3):
        return []
    return [Sig((B, S(1), B, None), (S(1),), local=dispatch(None, True), note="vocabulary parallel")]


def _columns(call, slot: int, x):
    """This piece's columns of the logits, and ``(pieces, index)``: how many pieces the classes are
    in and which this is (the rule offers the split only where they divide evenly)."""
    cols = call.bounds(slot)[1]
    k, v = x.shape[1], call.ctx.shapes[slot][1]
    if k == 0 or v % k or cols.start % k:
        raise GlobalTensorError(
            f"cross_entropy: a vocabulary split into uneven pieces ({k} of {v} classes here) is not supported"
        )
    return cols, v // k, cols.start // k


def _lse(call, slot: int, x, pieces: int, index: int):
    """The log-sum-exp of each row over every rank's columns: each rank's own, exchanged as a
    one-hot row and summed (exact, and stable however far apart the pieces' values are)."""
    import flow

    mine = (flow.arange(pieces) == index).to(x.dtype)
    every = call.all_sum(x.logsumexp(dim=1).unsqueeze(1) * mine, slot=slot, dims=(1,))
    return every.logsumexp(dim=1)


def _local_targets(t, cols):
    import flow

    inside = (t >= cols.start) & (t < cols.stop)
    return inside, flow.where(inside, t - cols.start, flow.zeros_like(t))


def _count(call, valid, slot: int, like):
    """The non-ignored targets over the whole batch (summed over the axes that split it)."""
    return call.all_sum(valid.sum().to(like.dtype), slot=slot)


def _forward(call, inputs, attrs):
    x, t = inputs[0], inputs[1]
    cols, pieces, index = _columns(call, 0, x)
    lse = _lse(call, 0, x, pieces, index)
    inside, lt = _local_targets(t, cols)
    picked = call.all_sum(x.gather(1, lt.unsqueeze(1)).squeeze(1) * inside.to(x.dtype), slot=0, dims=(1,))
    valid = t != attrs.get("ignore_index", -100)
    rows = (lse - picked) * valid.to(x.dtype)
    red = attrs.get("reduction", "mean")
    if red == "none":
        return rows
    if red == "sum":
        return rows.sum()
    return rows.sum() / _count(call, valid, 1, rows)


def _backward(call, inputs, attrs):
    import flow

    g, x, t = inputs[0], inputs[1], inputs[2]
    cols, pieces, index = _columns(call, 1, x)
    lse = _lse(call, 1, x, pieces, index)
    inside, lt = _local_targets(t, cols)
    valid = (t != attrs.get("ignore_index", -100)).to(x.dtype)
    hot = flow.zeros_like(x).scatter(1, lt.unsqueeze(1), inside.to(x.dtype).unsqueeze(1))
    d = ((x - lse.unsqueeze(1)).exp() - hot) * valid.unsqueeze(1)
    red = attrs.get("reduction", "mean")
    if red == "none":
        return d * g.unsqueeze(1)
    if red == "sum":
        return d * g
    return d * (g / _count(call, valid, 2, x))


def dispatch(local, backward: bool):
    """A local function of a cross-entropy signature: the vocabulary-parallel path when the logits'
    pieces hold only some of the classes, else ``local`` (or the op as called)."""
    slot = 1 if backward else 0

    def run(call, inputs, attrs):
        x = inputs[slot]
        if x.ndim == 2 and x.shape[1] != call.ctx.shapes[slot][1]:
            return (_backward if backward else _forward)(call, inputs, attrs)
        if local is not None:
            return local(call, inputs, attrs)
        return call.run(call.ctx.op, inputs, attrs)

    return run
