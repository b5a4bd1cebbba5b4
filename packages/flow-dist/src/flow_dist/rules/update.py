"""SBP rules of the optimizer updates (sgd_update, adam_update, optimizer_update).

An update is elementwise over each parameter and its state: it runs on the local pieces as they
are, and each gradient and state must be laid out like its parameter (gradients of global
parameters are, see :meth:`flow_dist.global_array.GlobalArray.as_grad`; states are made with
``zeros_like(param)``). Nothing is converted, since the update writes into the pieces in place.
The learning rate and step count are local 0-d tensors, the same on every rank.

ZeRO: a parameter whose states are laid out otherwise than the parameter (split while it is
broadcast: :class:`flow_dist.zero.graph_pass.ZeroStateLayout`) is updated on its piece. Its gradient
comes laid out like the states (a reduce-scatter from a partial sum), the update runs on the
parameter's rows that the states cover, and the updated rows are all-gathered into the whole
parameter (written into its piece in place in eager mode; its new value in a traced step).
"""

from __future__ import annotations

import numpy as np

from flow_dist.rules.base import RuleContext, Sig


def _flat(inputs) -> list:
    out = []
    for x in inputs:
        out.extend(x) if x.__class__ in (list, tuple) else out.append(x)
    return out


def update(ctx: RuleContext) -> list:
    # flat slots: params[n], grads[n], then the states (lists of n, name-major), then lr/step/...
    n = ctx.list_lengths[0]
    cur = ctx.current
    n_states = len(ctx.out_shapes) - n
    # a parameter's states laid out otherwise (ZeRO): its gradient goes to the states' layout
    like = list(cur[:n])
    sharded = set()
    if n_states:
        for k in range(n):
            st = cur[2 * n + k]
            if st is not None and cur[k] is not None and st != cur[k]:
                like[k] = st
                sharded.add(k)
    ins = tuple(None if k in ctx.constants else (like[k - n] if n <= k < 2 * n else cur[k]) for k in range(ctx.n))
    outs = tuple(cur[:n]) + tuple(cur[2 * n : 2 * n + n_states])
    if not sharded:
        return [Sig(ins, outs, note="in place: gradients like their parameters, the rest as they are")]
    return [Sig(ins, outs, local=_on_pieces, note="ZeRO: the update on the states' rows, then an all-gather")]


def _on_pieces(call, inputs, attrs):
    """Run the update on the rows of each ZeRO parameter its states cover, then all-gather them."""
    from flow import array_kinds
    from flow_dist import boxing
    from flow_dist.global_array import GlobalArray

    n = len(inputs[0])
    slots = _flat(inputs)
    nd = call._nd  # the wanted layout of each slot on every placement axis
    shape = call._shapes
    pieces = {}
    for k in range(n):
        if nd[2 * n + k] != nd[k] and len(slots) > 2 * n:
            p = slots[k]
            g = GlobalArray(p._data, call.placement, nd[k], shape[k], call.coord)
            pieces[k] = array_kinds.wrap(boxing.box(g, nd[2 * n + k]).local, p.device, dtype=p.dtype)
    params = [pieces.get(k, slots[k]) for k in range(n)]
    out = list(call.run(call.ctx.op, (params,) + tuple(inputs[1:]), attrs))
    for k in pieces:
        g = GlobalArray(out[k]._data, call.placement, nd[2 * n + k], shape[k], call.coord)
        whole = boxing.box(g, nd[k]).local
        p = slots[k]
        if p._data.__class__ is np.ndarray and attrs.get("inplace"):  # eager: into the parameter's own array
            np.copyto(p._data, whole)
            out[k] = p
        else:  # traced (or not in place): the new value
            out[k] = array_kinds.wrap(whole, p.device, dtype=p.dtype)
    return out


RULES = {"sgd_update": update, "adam_update": update, "optimizer_update": update}
