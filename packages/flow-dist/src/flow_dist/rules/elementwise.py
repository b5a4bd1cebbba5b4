"""SBP rules of elementwise ops (every op declared ``elementwise``, and ``where``).

Broadcasting: an output split along ``d`` needs each input split along the dim aligned with ``d``
when the input has it at full length, and broadcast where the input has it at length 1 or not at
all (numbers and local 0-d constants are the same everywhere). Partial sums pass only through
functions linear in the partial input: ``P + P -> P`` and ``P - P -> P`` (a number added would be
added once per rank, so not with numbers), ``P * B -> P`` and ``B * P -> P``, ``P / B -> P``,
``-P -> P``, and the backward ops linear in the incoming gradient (``gelu_backward(P, B) -> P``).
"""

from __future__ import annotations

from flow_dist.rules.base import B, P, RuleContext, S, Sig

# how partial sums pass through: "all" (every tensor P), "one" (any one P, the rest B), "first"
PARTIAL = {
    "add": "all",
    "sub": "all",
    "neg": "all",
    "mul": "one",
    "div": "first",
    "gelu_backward": "first",
    "silu_backward": "first",
}


def broadcasting(ctx: RuleContext) -> list:
    out = ctx.out_shapes[0]
    r = len(out)
    n_out = len(ctx.out_shapes)
    sigs = [Sig(tuple(None if s is None else B for s in ctx.shapes), (B,) * n_out)]
    for d in range(r):
        ins = []
        for shape in ctx.shapes:
            if shape is None:
                ins.append(None)
                continue
            dk = d - (r - len(shape))
            ins.append(S(dk) if dk >= 0 and shape[dk] == out[d] else B)
        sigs.append(Sig(tuple(ins), (S(d),) * n_out))
    how = PARTIAL.get(ctx.op.name)
    tensors = [k for k, s in enumerate(ctx.shapes) if s is not None]
    if how == "all" and not ctx.has_scalars and not ctx.constants:
        sigs.append(Sig(tuple(P if s is not None else None for s in ctx.shapes), (P,) * n_out))
    elif how == "one" or (how == "all" and len(tensors) == 1 and not ctx.has_scalars):
        for k in tensors:
            if k in ctx.constants:
                continue
            ins = tuple(None if s is None else (P if j == k else B) for j, s in enumerate(ctx.shapes))
            sigs.append(Sig(ins, (P,) * n_out))
    elif how == "first" and tensors and tensors[0] not in ctx.constants:
        k = tensors[0]
        ins = tuple(None if s is None else (P if j == k else B) for j, s in enumerate(ctx.shapes))
        sigs.append(Sig(ins, (P,) * n_out))
    return sigs


def rules(registry) -> dict:
    out = {name: broadcasting for name, op in registry.ops.items() if op.elementwise}
    out["where"] = broadcasting
    out["binary_cross_entropy"] = broadcasting  # elementwise, no reduction (the functional reduces)
    return out
