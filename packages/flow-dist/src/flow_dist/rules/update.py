"""SBP rules of the optimizer updates (sgd_update, adam_update, optimizer_update).

An update is elementwise over each parameter and its state: it runs on the local pieces as they
are, and each gradient and state must be laid out like its parameter (gradients of global
parameters are, see :meth:`flow_dist.global_array.GlobalArray.as_grad`; states are made with
``zeros_like(param)``). Nothing is converted, since the update writes into the pieces in place.
The learning rate and step count are local 0-d tensors, the same on every rank.
"""

from __future__ import annotations

from flow_dist.rules.base import RuleContext, Sig


def update(ctx: RuleContext) -> list:
    # flat slots: params[n], grads[n], then the states (lists of n, name-major), then lr/step/...
    n = ctx.list_lengths[0]
    cur = ctx.current
    ins = tuple(None if k in ctx.constants else (cur[k - n] if n <= k < 2 * n else cur[k]) for k in range(ctx.n))
    n_states = len(ctx.out_shapes) - n
    outs = tuple(cur[:n]) + tuple(cur[2 * n : 2 * n + n_states])
    return [Sig(ins, outs, note="in place: gradients like their parameters, the rest as they are")]


RULES = {"sgd_update": update, "adam_update": update, "optimizer_update": update}
