"""SBP rules of the neural-network ops: losses, normalisation, embedding, convolution, pooling.

- Losses (cross_entropy, nll_loss) split the batch: ``reduction="none"`` keeps the split, ``"sum"``
  leaves partial sums, ``"mean"`` the local sum divided by the count over the whole batch (the
  non-ignored targets, or their weights), so that the result is the single-process mean.
  Cross-entropy with the classes split (vocabulary parallel logits) exchanges per-row
  log-sum-exps instead of the logits (:mod:`flow_dist.rules.vocab_loss`).
- layer_norm normalises the trailing dims: any split of a leading dim passes through; its
  backward leaves partial weight and bias gradients.
- flash_attention (and its backward) splits any leading dim of query, key and value alike (batch or
  heads: the tensor-parallel GPT splits heads).
- embedding: ids split (weight broadcast) gives the same split; weight split on the embedding dim
  gives the output split on its last dim; vocabulary parallel (weight ``S(0)``) gives partial
  sums: each rank looks up the ids in its rows and zeros the others.
- conv2d splits the batch (weight broadcast) or the output channels (weight ``S(0)``); the input
  channels split on input and weight leave partial sums (bias added once: ``P``).
- pooling and one_hot: any split of the batch or the channels.
"""

from __future__ import annotations

from flow_dist.rules import vocab_loss
from flow_dist.rules.base import B, P, RuleContext, S, Sig, same_layout


def _sized(name: str, out: int = 0):
    """A size attribute that must be the local output's size when the op runs on pieces."""

    def local_attrs(attrs, in_shapes, out_shapes):
        a = dict(attrs)
        a[name] = tuple(out_shapes[out])
        return a

    return local_attrs


def _opt(ctx: RuleContext, k: int, s):
    return None if ctx.shapes[k] is None else s


_TARGET_SLOT = {"cross_entropy": 1, "nll_loss": 1, "cross_entropy_backward": 2, "nll_loss_backward": 1}


def _count(call, inputs, attrs, weight_slot: int, like):
    """The number of targets (or their total weight) a mean loss divides by, over the whole batch:
    a 0-d tensor of ``like``'s dtype, computed with ops (so that a compiled graph holds it too)."""
    import flow

    slot = _TARGET_SLOT[call.ctx.op.name]
    target = inputs[slot]
    weight = inputs[weight_slot]
    if target.dtype.is_floating_point:  # class probabilities: every sample counts once
        n = target.numel() // target.shape[1] if target.ndim > 1 else 1
        return call.all_sum(flow.full((), float(n), dtype=like.dtype), slot=slot)
    valid = target != attrs.get("ignore_index", -100)
    if weight is None:
        local = valid.sum().to(like.dtype)
    else:
        picked = weight[flow.where(valid, target, flow.zeros_like(target))]
        local = (picked * valid.to(picked.dtype)).sum().to(like.dtype)
    return call.all_sum(local, slot=slot)


def _loss_mean(weight_slot: int, backward: bool):
    def local(call, inputs, attrs):
        a = dict(attrs)
        a["reduction"] = "sum"
        out = call.run(call.ctx.op, inputs, a)
        return out / _count(call, inputs, attrs, weight_slot, out)  # 0 / 0: nan, as one process gives

    return local


def _batch_loss(ctx: RuleContext, backward: bool) -> list:
    # forward: (input, target, weight); backward: (grad_output, input, target, weight) or nll's
    # (grad_output, target, weight)
    red = ctx.attr("reduction", "mean")
    name = ctx.op.name
    if not backward:
        ins_split = (S(0), S(0), _opt(ctx, 2, B))
        ins_b = (B, B, _opt(ctx, 2, B))
        weight_slot = 2
    elif name == "nll_loss_backward":
        g = S(0) if red == "none" else B
        ins_split = (g, S(0), _opt(ctx, 2, B))
        ins_b = (B, B, _opt(ctx, 2, B))
        weight_slot = 2
    else:
        g = S(0) if red == "none" else B
        ins_split = (g, S(0), S(0), _opt(ctx, 3, B))
        ins_b = (B, B, B, _opt(ctx, 3, B))
        weight_slot = 3
    sigs = [Sig(ins_b, (B,))]
    # cross-entropy's batch-split local function also takes the vocabulary-parallel path when
    # another placement axis splits the classes (the handler runs one local function for all axes)
    wrap = (lambda f: vocab_loss.dispatch(f, backward)) if name.startswith("cross_entropy") else (lambda f: f)
    if backward:
        local = _loss_mean(weight_slot, True) if red == "mean" else None
        sigs.append(Sig(ins_split, (S(0),), local=wrap(local), note="the batch split; mean over the whole batch"))
    elif red == "none":
        sigs.append(Sig(ins_split, (S(0),), local=wrap(None)))
    elif red == "sum":
        sigs.append(Sig(ins_split, (P,), local=wrap(None)))
    else:
        local = wrap(_loss_mean(weight_slot, False))
        sigs.append(Sig(ins_split, (P,), local=local, note="local sum / global count"))
    if name == "cross_entropy":
        sigs.extend(vocab_loss.forward_sigs(ctx))
    elif name == "cross_entropy_backward":
        sigs.extend(vocab_loss.backward_sigs(ctx))
    return sigs


def loss(ctx):
    return _batch_loss(ctx, backward=False)


def loss_backward(ctx):
    return _batch_loss(ctx, backward=True)


def layer_norm(ctx: RuleContext) -> list:
    lead = ctx.ndim(0) - len(ctx.attr("normalized_shape"))
    w, b = _opt(ctx, 1, B), _opt(ctx, 2, B)
    sigs = [Sig((B, w, b), (B,))]
    for d in range(lead):
        sigs.append(Sig((S(d), w, b), (S(d),)))
    return sigs


def layer_norm_backward(ctx: RuleContext) -> list:
    lead = ctx.ndim(1) - len(ctx.attr("normalized_shape"))
    w = _opt(ctx, 2, B)
    sigs = [Sig((B, B, w), (B, B, B))]
    for d in range(lead):
        sigs.append(Sig((S(d), S(d), w), (S(d), P, P)))
    sigs.append(Sig((P, B, w), (P, P, P)))
    return sigs


def flash_attention(ctx: RuleContext) -> list:
    """Any split of a leading dim (batch, heads) on query, key and value passes through to out and lse."""
    sigs = [Sig((B, B, B), (B, B))]
    for d in range(ctx.ndim(1) - 2):
        sigs.append(Sig((S(d), S(d), S(d)), (S(d), S(d))))
    return sigs


def flash_attention_backward(ctx: RuleContext) -> list:
    """(grad_out, q, k, v, out, lse, grad_lse?) split on one leading dim give (dq, dk, dv) split on it."""
    sigs = [Sig((B,) * 6 + (_opt(ctx, 6, B),), (B, B, B))]
    for d in range(ctx.ndim(1) - 2):
        sigs.append(Sig((S(d),) * 6 + (_opt(ctx, 6, S(d)),), (S(d), S(d), S(d))))
    return sigs


def _vocab_parallel(call, inputs, attrs):
    import flow

    weight, ids = inputs
    rows = call.bounds(0)[0]  # this rank's rows of the table
    inside = (ids >= rows.start) & (ids < rows.stop)
    local_ids = flow.where(inside, ids - rows.start, flow.zeros_like(ids))
    # padding_idx only shapes the gradient (embedding_backward), and may be another rank's row
    out = call.run("embedding", (weight, local_ids), dict(attrs, padding_idx=None))
    return out * inside.unsqueeze(-1).to(out.dtype)


def embedding(ctx: RuleContext) -> list:
    on = len(ctx.out_shapes[0])
    sigs = [Sig((B, B), (B,))]
    for d in range(ctx.ndim(1)):
        sigs.append(Sig((B, S(d)), (S(d),)))
    sigs.append(Sig((S(1), B), (S(on - 1),)))
    sigs.append(Sig((S(0), B), (P,), local=_vocab_parallel, note="vocabulary parallel"))
    sigs.append(Sig((P, B), (P,)))
    return sigs


def embedding_backward(ctx: RuleContext) -> list:
    gn = ctx.ndim(0)
    sigs = [Sig((B, B), (B,))]
    if not ctx.attr("scale_grad_by_freq", False):  # frequencies are of the whole batch
        for d in range(ctx.ndim(1)):
            sigs.append(Sig((S(d), S(d)), (P,)))
    sigs.append(Sig((S(gn - 1), B), (S(1),)))
    sigs.append(Sig((P, B), (P,)))
    return sigs


def conv2d(ctx: RuleContext) -> list:
    b = _opt(ctx, 2, B)
    sigs = [Sig((B, B, b), (B,)), Sig((S(0), B, b), (S(0),))]
    if ctx.attr("groups", 1) == 1:
        sigs.append(Sig((B, S(0), _opt(ctx, 2, S(0))), (S(1),)))
        sigs.append(Sig((S(1), S(1), _opt(ctx, 2, P)), (P,)))
    sigs.append(Sig((P, B, _opt(ctx, 2, P)), (P,)))
    return sigs


def conv2d_backward_input(ctx: RuleContext) -> list:
    # input_size / weight_size are spatial (H, W): the same for every piece of a batch or channel split
    sigs = [Sig((B, B), (B,)), Sig((S(0), B), (S(0),))]
    if ctx.attr("groups", 1) == 1:
        sigs.append(Sig((S(1), S(0)), (P,)))
        sigs.append(Sig((B, S(1)), (S(1),)))
    sigs.append(Sig((P, B), (P,)))
    return sigs


def conv2d_backward_weight(ctx: RuleContext) -> list:
    sigs = [Sig((B, B), (B,)), Sig((S(0), S(0)), (P,))]
    if ctx.attr("groups", 1) == 1:
        sigs.append(Sig((S(1), B), (S(0),)))
        sigs.append(Sig((B, S(1)), (S(1),)))
    sigs.append(Sig((P, B), (P,)))
    return sigs


def batch_or_channel(ctx: RuleContext, partial: bool = False) -> list:
    """Pooling-like ops on (N, C, ...): split N or C on every tensor argument (their size
    attributes are spatial, the same for every piece)."""
    la = None
    n_out = len(ctx.out_shapes)
    sigs = [Sig(tuple(_opt(ctx, k, B) for k in range(ctx.n)), (B,) * n_out)]
    for d in (0, 1):
        if ctx.ndim(0) > d:
            sigs.append(Sig(tuple(_opt(ctx, k, S(d)) for k in range(ctx.n)), (S(d),) * n_out, local_attrs=la))
    if partial:
        sigs.append(Sig((P,) + tuple(_opt(ctx, k, B) for k in range(1, ctx.n)), (P,) * n_out))
    return sigs


def bernoulli_mask(ctx: RuleContext) -> list:
    la = _sized("shape")
    return [Sig((s.ins[0],), s.outs, local_attrs=la) for s in same_layout(ctx, partial=False)]


RULES = {
    "cross_entropy": loss,
    "nll_loss": loss,
    "cross_entropy_backward": loss_backward,
    "nll_loss_backward": loss_backward,
    "layer_norm": layer_norm,
    "layer_norm_backward": layer_norm_backward,
    "flash_attention": flash_attention,
    "flash_attention_backward": flash_attention_backward,
    "embedding": embedding,
    "embedding_backward": embedding_backward,
    "conv2d": conv2d,
    "conv2d_backward_input": conv2d_backward_input,
    "conv2d_backward_weight": conv2d_backward_weight,
    "avg_pool2d": batch_or_channel,
    "max_pool2d": batch_or_channel,
    "adaptive_max_pool2d": batch_or_channel,
    "avg_pool2d_backward": lambda ctx: batch_or_channel(ctx, partial=True),
    "max_pool2d_backward": lambda ctx: batch_or_channel(ctx, partial=True),
    "max_pool2d_gather": batch_or_channel,
    "max_unpool2d": lambda ctx: batch_or_channel(ctx, partial=True),
    "one_hot": lambda ctx: same_layout(ctx, partial=False),
    "bernoulli_mask": bernoulli_mask,
}
