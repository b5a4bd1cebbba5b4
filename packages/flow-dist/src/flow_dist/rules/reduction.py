"""SBP rules of reductions, scans and the ops normalised along one dim.

A reduction keeps the split of a dim it does not reduce (renumbered when ``keepdim`` is false).
A sum over a split dim leaves each rank the sum of its piece: a partial sum, ``S(reduced) -> P``;
a mean becomes the local sum divided by the whole count (not the piece's). Sums and means are
linear, so ``P -> P``. Max, min, prod, norms, variances and the rest have no partial form: only
the kept dims may be split. Scans (cumsum), sorts, top-k and softmax-like ops work along one dim,
which must be whole: any other split passes through.
"""

from __future__ import annotations

from flow_dist.rules.base import B, P, RuleContext, S, Sig, _dims


def _reduce(ctx: RuleContext, linear: bool, mean: bool = False) -> list:
    nd = ctx.ndim(0)
    if nd == 0:
        return [Sig((B,), (B,) * len(ctx.out_shapes))] + ([Sig((P,), (P,))] if linear else [])
    dims = _dims(ctx.attr("dim"), nd)
    keep = ctx.attr("keepdim", False)
    n_out = len(ctx.out_shapes)
    sigs = [Sig((B,), (B,) * n_out)]
    for d in range(nd):
        if d in dims:
            continue
        od = d if keep else d - sum(1 for r in dims if r < d)
        sigs.append(Sig((S(d),), (S(od),) * n_out))
    if linear:
        count = 1
        for d in dims:
            count *= ctx.shapes[0][d]
        local = _mean_as_partial(count) if mean else None
        for d in dims:
            sigs.append(Sig((S(d),), (P,), local=local, note="sum of the local piece"))
        sigs.append(Sig((P,), (P,)))
    return sigs


def _mean_as_partial(count: int):
    def local(call, inputs, attrs):
        s = call.run("sum", inputs, attrs)
        return call.run("mul", (s, 1.0 / count if count else float("nan")), {})

    return local


def sum_rule(ctx):
    return _reduce(ctx, linear=True)


def mean_rule(ctx):
    return _reduce(ctx, linear=True, mean=True)


def other_reduction(ctx):
    return _reduce(ctx, linear=False)


def along_dim(ctx: RuleContext) -> list:
    """Ops working along ``dim`` (every tensor argument of the same shape): any other split."""
    nd = ctx.ndim(0)
    if nd == 0:
        return [Sig(tuple(None if s is None else B for s in ctx.shapes), (B,) * len(ctx.out_shapes))]
    dim = ctx.attr("dim", -1) % nd
    n_out = len(ctx.out_shapes)
    tensors = [s is not None for s in ctx.shapes]
    sigs = [Sig(tuple(B if t else None for t in tensors), (B,) * n_out)]
    for d in range(nd):
        if d != dim:
            sigs.append(Sig(tuple(S(d) if t else None for t in tensors), (S(d),) * n_out))
    return sigs


def softmax_backward(ctx: RuleContext) -> list:
    """``g * y - y * sum(g * y)`` is linear in the gradient ``g``: ``(P, B) -> P`` too."""
    return along_dim(ctx) + [Sig((P, B), (P,))]


def cumsum(ctx: RuleContext) -> list:
    return along_dim(ctx) + [Sig((P,), (P,))]


def _indexed_reduce(ctx: RuleContext) -> list:
    """max_dim / min_dim / median / mode / kthvalue and argmax / argmin (dim=None: whole)."""
    if ctx.attr("dim", -1) is None:
        return [Sig((B,), (B,) * len(ctx.out_shapes))]
    return _reduce(ctx, linear=False)


RULES = {
    "sum": sum_rule,
    "mean": mean_rule,
    **{n: other_reduction for n in ("amax", "amin", "prod", "all", "any", "logsumexp", "norm", "std", "var")},
    **{
        n: _indexed_reduce
        for n in ("argmax", "argmin", "max_dim", "min_dim", "median", "nanmedian", "mode", "kthvalue")
    },
    "cumsum": cumsum,
    "cumprod": along_dim,
    "sort": along_dim,
    "topk": along_dim,
    "softmax": along_dim,
    "log_softmax": along_dim,
    "softmax_backward": softmax_backward,
    "log_softmax_backward": softmax_backward,
}
