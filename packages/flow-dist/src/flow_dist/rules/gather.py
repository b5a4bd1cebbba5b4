"""SBP rules of advanced indexing, lookups and the sequence losses.

- ``index`` (``x[idx]`` with integer tensors on ``dims``): a split of a dim that is not indexed
  passes through to where NumPy's placement rule puts that dim; a split of the (one) index
  tensor splits the output along the index dims; gathering is linear, so ``P -> P``.
- ``index_put`` (and its accumulating form, index's gradient): writing values at positions is
  linear in the input and the values together (duplicate positions resolve alike everywhere):
  ``(P, P, B) -> P``.
- ``searchsorted``: the looked-up values split any way, the sorted sequence whole; a batched
  (N-d) sequence splits its leading dims with the values.
- ``nonzero``: its output length depends on the data of every piece; it runs on the whole.
- ``embedding_bag``: the embedding dim of the table splits the output's; sum and mean bags are
  linear in the table (``P -> P``). Its backward likewise, and the bags' id helper runs whole.
- ``ctc_loss`` (per-sample losses) and its backward split the batch, when the targets are padded
  (2-d): log_probs along dim 1, targets and lengths along dim 0.
- ``fused_elementwise`` (made by graph fusion, which runs on the pieces of a traced global step,
  so it meets global tensors only when called directly): its program holds the whole shape, so
  it runs on the whole.
"""

from __future__ import annotations

from flow_dist.rules.base import B, P, RuleContext, S, Sig


def _index_out_dim(shape: tuple, dims: tuple, b_ndim: int, d: int) -> int:
    """Where input dim ``d`` (not indexed) lands in ``x[idx]`` (NumPy's placement rule)."""
    if dims[-1] - dims[0] == len(dims) - 1:  # adjacent: the index dims replace them in place
        return d if d < dims[0] else d - len(dims) + b_ndim
    return b_ndim + sum(1 for i in range(d) if i not in dims)


def index(ctx: RuleContext) -> list:
    dims = tuple(ctx.attr("dims"))
    k = ctx.list_lengths[0] if ctx.list_lengths else ctx.n - 1
    shape = ctx.shapes[0]
    out_ndim = len(ctx.out_shapes[0])
    b_ndim = out_ndim - (len(shape) - len(dims))
    idx_b = (B,) * k
    sigs = [Sig((B,) + idx_b, (B,)), Sig((P,) + idx_b, (P,))]
    for d in range(len(shape)):
        if d not in dims:
            sigs.append(Sig((S(d),) + idx_b, (S(_index_out_dim(shape, dims, b_ndim, d)),)))
    if k == 1:  # one index tensor: its split splits the index dims of the output
        first = dims[0] if dims[-1] - dims[0] == len(dims) - 1 else 0
        for j in range(len(ctx.shapes[1])):
            sigs.append(Sig((B, S(j)), (S(first + b_ndim - len(ctx.shapes[1]) + j),)))
    return sigs


def index_put(ctx: RuleContext) -> list:
    k = ctx.n - 2
    return [Sig((B, B) + (B,) * k, (B,)), Sig((P, P) + (B,) * k, (P,), note="linear in input and values")]


def searchsorted(ctx: RuleContext) -> list:
    seq, vals = ctx.shapes[0], ctx.shapes[1]
    sorter = None if ctx.shapes[2] is None else B
    sigs = [Sig((B, B, sorter), (B,))]
    if len(seq) == 1:
        for d in range(len(vals)):
            sigs.append(Sig((B, S(d), sorter), (S(d),)))
    else:
        for d in range(len(seq) - 1):  # batched: the leading dims go together
            sigs.append(Sig((S(d), S(d), None if sorter is None else S(d)), (S(d),)))
    return sigs


def whole(ctx: RuleContext) -> list:
    return [Sig(tuple(None if s is None else B for s in ctx.shapes), (B,) * len(ctx.out_shapes))]


def _opt(ctx: RuleContext, k: int, s):
    return None if ctx.shapes[k] is None else s


def embedding_bag(ctx: RuleContext) -> list:
    out, mx = ctx.out_shapes
    mode = ctx.attr("mode", "mean")
    rest = (B, B, _opt(ctx, 3, B))
    sigs = [Sig((B,) + rest, (B, B))]
    if len(ctx.shapes[0]) == 2:
        mx_split = S(1) if tuple(mx) == tuple(out) else B
        sigs.append(Sig((S(1),) + rest, (S(1), mx_split), note="the embedding dim"))
    if mode in ("sum", "mean"):
        sigs.append(Sig((P,) + rest, (P, B), note="a sum of rows is linear in the table"))
    return sigs


def embedding_bag_backward(ctx: RuleContext) -> list:
    # (grad_output, input, offsets, per_sample_weights, max_indices) -> grad of the table
    same_mx = tuple(ctx.shapes[4]) == tuple(ctx.shapes[0])
    ins_b = (B, B, B, _opt(ctx, 3, B), B)
    sigs = [Sig(ins_b, (B,))]
    if len(ctx.shapes[0]) == 2:
        sigs.append(Sig((S(1), B, B, _opt(ctx, 3, B), S(1) if same_mx else B), (S(1),)))
    sigs.append(Sig((P,) + ins_b[1:], (P,), note="linear in the output's gradient"))
    return sigs


def ctc_loss(ctx: RuleContext) -> list:
    sigs = [Sig((B, B, B, B), (B,))]
    if len(ctx.shapes[1]) == 2:  # padded targets: one row per sample
        sigs.append(Sig((S(1), S(0), S(0), S(0)), (S(0),), note="the batch"))
    return sigs


def ctc_loss_backward(ctx: RuleContext) -> list:
    sigs = [Sig((B, B, B, B, B), (B,))]
    if len(ctx.shapes[2]) == 2:
        sigs.append(Sig((S(0), S(1), S(0), S(0), S(0)), (S(1),), note="the batch"))
    return sigs


def fused_elementwise(ctx: RuleContext) -> list:
    # the program's shape (an attribute) is the whole tensor's: it runs on whole tensors only
    return whole(ctx)


RULES = {
    "index": index,
    "index_put": index_put,
    "searchsorted": searchsorted,
    "nonzero": whole,
    "embedding_bag": embedding_bag,
    "embedding_bag_ids": whole,
    "embedding_bag_backward": embedding_bag_backward,
    "ctc_loss": ctc_loss,
    "ctc_loss_backward": ctc_loss_backward,
    "fused_elementwise": fused_elementwise,
}
