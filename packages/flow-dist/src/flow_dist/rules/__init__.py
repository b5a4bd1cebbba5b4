"""The SBP rule table: for each op, the SBP signatures it can run with on global tensors.

flow-dist declares the rule table ``"sbp"``; any plugin (a third-party op package) fills it in its
``flow_register_rules`` hook::

    from flow_dist.rules import B, P, S, Sig

    def my_rule(ctx):                       # ctx: RuleContext of one call, one placement axis
        sigs = [Sig((B,), (B,))]
        for d in range(ctx.ndim(0)):        # any split of the input gives the same split
            sigs.append(Sig((S(d),), (S(d),)))
        return sigs

    registry.register_rule("sbp", "my_op", my_rule)

A rule is a function of a :class:`RuleContext` (the logical shapes of the call's tensors, its
attributes, the size of the placement axis) returning candidate :class:`Sig`\\ s: one SBP per
tensor argument (lists of tensors flattened in order, ``None`` for an absent optional tensor) and
one per output. A candidate may also be a plain ``(inputs, outputs)`` pair, and an SBP the string
``"S(d)"``, ``"B"`` or ``"P"``, so that an op package can write its rules without importing
flow-dist (see examples/third_party_op_plugin).

A rule is asked once per placement axis; the handler picks, per axis, the candidate whose input
conversions send the fewest bytes (:func:`flow_dist.boxing.cost`), preferring fewer
conversions, then the earlier candidate. A signature may say how the op runs on the local pieces
when that differs from running it as called (``local_attrs``: the attributes to use, such as a
reshape's local shape; ``local``: a function computing the local outputs, such as a mean over a
split dim that becomes a partial sum divided by the global count).

An op without a rule still runs: its inputs are boxed to broadcast and it runs on the whole, with
a one-time warning naming the op.
"""

from __future__ import annotations

from flow_dist.rules import batch_norm, elementwise, gather, linalg, nn, reduction, shape, update
from flow_dist.rules.base import TABLE, B, P, RuleContext, S, Sig, as_sig, same_layout

__all__ = ["TABLE", "Sig", "RuleContext", "S", "B", "P", "as_sig", "same_layout", "rule_for", "core_rules"]


def rule_for(name: str):
    """The rule registered for op ``name`` in the ``"sbp"`` table, or None."""
    from flow.registry import REGISTRY

    table = REGISTRY.tables.get(TABLE)
    return None if table is None else table.get(name)


def core_rules(registry) -> dict:
    """``{op name: rule}`` for flow-core's ops (what flow-dist's plugin registers); every op
    declared elementwise gets the broadcasting rule."""
    out: dict = elementwise.rules(registry)
    for mod in (reduction, linalg, nn, shape, update, gather, batch_norm):
        out.update(mod.RULES)
    return out
