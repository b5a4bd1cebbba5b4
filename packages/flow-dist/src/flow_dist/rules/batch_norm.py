"""SBP rules of the fused batch norm: ``batch_norm`` and its gradient ``batch_norm_backward``.

- Broadcast: everything ``B``.
- Channel split: the input (and grad_output) ``S(1)``, every per-channel vector (weight, bias,
  running and saved statistics, their cotangents) ``S(0)``; each rank normalises its channels.
- A split of any other dim (the batch, ``S(0)``, is data parallelism): in evaluation the statistics
  are the running ones, so each piece is normalised as it is (the backward's weight and bias
  gradients are then partial sums over the pieces). In training the statistics are of the whole
  tensor, as one process on the whole batch computes them (synchronised batch norm): the local
  function sums each channel over the local piece and all-reduces the sums (a partial sum boxed to
  broadcast, so a compiled graph holds the collective too), then normalises locally; the saved
  statistics come out broadcast. Its backward all-reduces the per-channel sums of ``grad_output``
  and ``grad_output * (x - mean)``, the two reductions the input gradient needs; the weight and
  bias gradients are those sums, so they come out broadcast.
- Partial grad_output (backward only): every output is linear in ``grad_output`` and the
  statistics' cotangents together, so partial sums of them give partial sums of every gradient.

The forward's mean and variance take two all-reduces (the sum, then the sum of squared deviations
from the global mean) rather than one of sums and sums of squares: ``E[x^2] - E[x]^2`` loses the
digits of a channel whose mean is large against its spread, and the result would then differ from
the single-process kernel's two-pass statistics. Local sums are in float64, as the kernels'.
"""

from __future__ import annotations

from flow_dist.rules.base import B, P, RuleContext, S, Sig


def _opt(ctx: RuleContext, k: int, s):
    return None if ctx.shapes[k] is None else s


def _others(ndim: int) -> tuple:
    """The dims a channel is normalised over: every dim but the channels (1)."""
    return (0,) + tuple(range(2, ndim))


def _count(shape: tuple) -> float:
    n = 1
    for k, s in enumerate(shape):
        if k != 1:
            n *= int(s)
    return float(n)


def _sync_forward(call, inputs, attrs):
    """Training on pieces split along non-channel dims: global statistics, local normalisation."""
    import flow

    x, w, b = inputs[:3]
    eps = float(attrs.get("eps", 1e-5))
    dims = _others(x.ndim)
    cs = (x.shape[1],) + (1,) * (x.ndim - 2)
    m = _count(call.ctx.shapes[0])
    xf = x.to(flow.float64)
    mean = call.all_sum(xf.sum(dims), 0, dims=dims) * (1.0 / m)
    xc = xf - mean.reshape(cs)
    var = call.all_sum((xc * xc).sum(dims), 0, dims=dims) * (1.0 / m)
    invstd = 1.0 / (var + eps).sqrt()
    y = xc * invstd.reshape(cs)
    if w is not None:
        y = y * w.to(flow.float64).reshape(cs)
    if b is not None:
        y = y + b.to(flow.float64).reshape(cs)
    return y.to(x.dtype), mean.to(x.dtype), invstd.to(x.dtype)


def _sync_backward(call, inputs, attrs):
    """The training gradient on pieces split along non-channel dims: the input gradient's two
    per-channel reductions all-reduced (one collective of both), the rest local."""
    import flow

    g, x, w, mean, invstd, gm, gi = inputs
    f = flow.float64
    dims = _others(x.ndim)
    c = x.shape[1]
    cs = (c,) + (1,) * (x.ndim - 2)
    m = _count(call.ctx.shapes[1])
    gf, r = g.to(f), invstd.to(f).reshape(cs)
    xc = x.to(f) - mean.to(f).reshape(cs)
    sums = call.all_sum(flow.cat([gf.sum(dims), (gf * xc).sum(dims)]), 1, dims=dims)
    sg, sgx = sums[:c], sums[c:]
    a = r if w is None else r * w.to(f).reshape(cs)
    dx = a * (gf - sg.reshape(cs) * (1.0 / m) - xc * (r * r * sgx.reshape(cs) * (1.0 / m)))
    if gm is not None:
        dx = dx + gm.to(f).reshape(cs) * (1.0 / m)
    if gi is not None:
        dx = dx - xc * (gi.to(f).reshape(cs) * r * r * r * (1.0 / m))
    return dx.to(x.dtype), (sgx * invstd.to(f)).to(x.dtype), sg.to(x.dtype)


def batch_norm(ctx: RuleContext) -> list:
    # (input, weight, bias, running_mean, running_var) -> (out, save_mean, save_invstd)
    vecs = range(1, 5)
    sigs = [Sig((B,) + tuple(_opt(ctx, k, B) for k in vecs), (B, B, B))]
    sigs.append(Sig((S(1),) + tuple(_opt(ctx, k, S(0)) for k in vecs), (S(1), S(0), S(0)), note="channels"))
    training = ctx.attr("training", True)
    for d in _others(ctx.ndim(0)):
        ins = (S(d),) + tuple(_opt(ctx, k, B) for k in vecs)
        if training:
            sigs.append(Sig(ins, (S(d), B, B), local=_sync_forward, note="statistics all-reduced over the pieces"))
        else:
            sigs.append(Sig(ins, (S(d), B, B), note="running statistics"))
    return sigs


def batch_norm_backward(ctx: RuleContext) -> list:
    # (grad_output, input, weight, save_mean, save_invstd, grad_mean, grad_invstd)
    #   -> (grad_input, grad_weight, grad_bias)
    vecs = range(2, 7)
    sigs = [Sig((B, B) + tuple(_opt(ctx, k, B) for k in vecs), (B, B, B))]
    sigs.append(Sig((S(1), S(1)) + tuple(_opt(ctx, k, S(0)) for k in vecs), (S(1), S(0), S(0)), note="channels"))
    training = ctx.attr("training", True)
    for d in _others(ctx.ndim(1)):
        ins = (S(d), S(d)) + tuple(_opt(ctx, k, B) for k in vecs)
        if training:
            sigs.append(Sig(ins, (S(d), B, B), local=_sync_backward, note="per-channel sums all-reduced"))
        else:  # dx = grad_output * invstd * weight: local; the weight and bias gradients sum over pieces
            sigs.append(Sig(ins, (S(d), P, P), note="running statistics"))
    # linear in (grad_output, grad_mean, grad_invstd) jointly: the cotangents must be partial too
    sigs.append(Sig((P, B, _opt(ctx, 2, B), B, B, _opt(ctx, 5, P), _opt(ctx, 6, P)), (P, P, P)))
    return sigs


RULES = {"batch_norm": batch_norm, "batch_norm_backward": batch_norm_backward}
