"""Dead-code elimination: drop nodes whose outputs nothing reads."""

from __future__ import annotations


def dce(ir, config=None):
    """Remove nodes no output, state update or side-effecting node depends on; forget unused inputs.

    Nodes with side effects (in-place optimizer updates, RNG draws) always stay, so the random
    stream and the state updates are those of eager mode.
    """
    live = {v.id for v in ir.live_roots()}
    keep = []
    for n in reversed(ir.nodes):
        if n.has_side_effects or any(o.id in live for o in n.outputs):
            keep.append(n)
            live.update(v.id for v in n.input_values())
    keep.reverse()
    ir.nodes = keep
    ir.prune_unused_inputs()
    return ir
