"""SBP rules of matmul, linear and einsum.

For ``a @ b`` with ``a`` (n, k) and ``b`` (k, m), the five signatures: rows of ``a`` split give
rows of the output (``S(0) x B -> S(0)``), columns of ``b`` split give columns
(``B x S(1) -> S(1)``), the contracted dim split on both leaves partial sums
(``S(1) x S(0) -> P``), and a partial operand times a broadcast one is partial
(``P x B -> P``, ``B x P -> P``); plus ``B x B -> B``. Batch dims split on both operands (or
broadcast on the one that lacks them) give split batches. ``linear(x, W, b)`` is ``x @ W.T + b``:
column-parallel ``B x S(0) x S(0) -> S(-1)``, row-parallel ``S(-1) x S(1) x P -> P`` (the bias is
added once: P keeps it on one rank). einsum: a letter split in every operand that has it is split
in the output when kept and gives partial sums when summed over.
"""

from __future__ import annotations

from flow_dist.rules.base import B, P, RuleContext, S, Sig


def matmul(ctx: RuleContext) -> list:
    an, bn = ctx.ndim(0), ctx.ndim(1)
    out = ctx.out_shapes[0]
    on = len(out)
    sigs = [Sig((B, B), (B,))]
    a_k = an - 1
    b_k = bn - 2 if bn >= 2 else 0
    if an >= 2:  # rows of a
        sigs.append(Sig((S(an - 2), B), (S(on - 2 if bn >= 2 else on - 1),)))
    if bn >= 2:  # columns of b
        sigs.append(Sig((B, S(bn - 1)), (S(on - 1),)))
    sigs.append(Sig((S(a_k), S(b_k)), (P,)))
    sigs.append(Sig((P, B), (P,)))
    sigs.append(Sig((B, P), (P,)))
    n_batch = on - (2 if an >= 2 and bn >= 2 else 1 if max(an, bn) >= 2 else 0)
    for d in range(n_batch):
        ins = []
        for nd, shape in ((an, ctx.shapes[0]), (bn, ctx.shapes[1])):
            mats = 2 if nd >= 2 else 1
            dk = d - (n_batch - (nd - mats))
            ins.append(S(dk) if dk >= 0 and shape[dk] == out[d] else B)
        sigs.append(Sig(tuple(ins), (S(d),)))
    return sigs


def linear(ctx: RuleContext) -> list:
    xn = ctx.ndim(0)
    has_b = ctx.shapes[2] is not None
    bias = (lambda s: s) if has_b else (lambda s: None)
    on = len(ctx.out_shapes[0])
    sigs = [Sig((B, B, bias(B)), (B,))]
    for d in range(xn - 1):  # data parallel: the batch dims
        sigs.append(Sig((S(d), B, bias(B)), (S(d),)))
    sigs.append(Sig((B, S(0), bias(S(0))), (S(on - 1),)))  # column parallel
    sigs.append(Sig((S(xn - 1), S(1), bias(P)), (P,)))  # row parallel
    sigs.append(Sig((P, B, bias(P)), (P,)))
    return sigs


def einsum(ctx: RuleContext) -> list:
    eq = ctx.attr("equation", "").replace(" ", "")
    n = ctx.n
    sigs = [Sig((B,) * n, (B,))]
    if "->" not in eq or "." in eq:
        return sigs  # implicit output or ellipsis: broadcast only
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != n:
        return sigs
    letters = sorted(set(lhs.replace(",", "")))
    for c in letters:
        ins = []
        for t in terms:
            if c in t:
                if t.count(c) > 1:
                    break  # a diagonal: no split of it
                ins.append(S(t.index(c)))
            else:
                ins.append(B)
        else:
            sizes = {shape[t.index(c)] for t, shape in zip(terms, ctx.shapes) if c in t}
            if len(sizes) == 1:  # not a broadcast letter (size 1 in one operand)
                sigs.append(Sig(tuple(ins), (S(rhs.index(c)),) if c in rhs else (P,)))
    for k in range(n):
        sigs.append(Sig(tuple(P if j == k else B for j in range(n)), (P,)))
    return sigs


RULES = {"matmul": matmul, "linear": linear, "einsum": einsum}
