"""Activation checkpointing: recompute a block's forward activations in the backward pass.

Enabled for the graph blocks with ``graph.<block>.activation_checkpointing = True`` (stored in
``config.blocks``; the pass is on when any block has it). Runs after ``cse``/``dce`` (which would
merge the recomputation back into the forward) and before ``fusion`` and ``memory_planning``.

For each checkpointed block, a *segment* is the set of forward nodes (``tags["phase"] ==
"forward"``, ``scope`` equal to the block name or inside it) made during one call of the block
(the tracer records module calls in ``ir.meta["module_calls"]``). A block that is never called
itself (a ``ModuleList`` such as ``model.blocks``) gives one segment per call of each child
(``model.blocks.0``, ``model.blocks.1``, ...), each recomputed on its own. For a segment:

1. the values it defines that backward nodes read are the *saved activations*, except its outputs
   (values forward nodes after it read: the next layer keeps them as its input anyway);
2. the nodes needed to compute them again from the segment's inputs (values from outside it:
   the block input, parameters, constants) are cloned, in order, right before the first backward
   node that reads any of them (tagged ``phase: backward``, ``recompute_of: <original id>``);
3. backward readers are rewired to the clones, so the originals die after the forward pass.

Random draws (dropout masks) and nodes with side effects are never cloned: their outputs are kept,
so recomputation gives exactly the forward values. The lowering scheduler runs nodes in program
order where data allows, so the clones run just before they are needed.
"""

from __future__ import annotations

from flow.graph.ir import Lit, Value, inherit_attrs


def _in_scope(scope: str, name: str) -> bool:
    return scope == name or scope.startswith(name + ".")


def _segments(ir, names: list) -> list:
    """(block, forward nodes) per call of each block; a block never called itself (a ``ModuleList``)
    gives one segment per call of each of its children. Calls come from the tracer
    (``ir.meta["module_calls"]``: name and the range of node ids made during the call)."""
    fwd = [n for n in ir.nodes if n.tags.get("phase", "forward") == "forward"]
    calls = [c for c in ir.meta.get("module_calls", ()) if c[2] is not None]
    segs = []
    for name in names:
        nodes = [n for n in fwd if _in_scope(n.scope, name)]
        if not nodes:
            continue
        if not ir.meta.get("module_calls"):
            segs.append((name, nodes))
            continue
        spans = [(a, b) for c, a, b in calls if c == name]
        if not spans:
            depth = name.count(".") + 1
            spans = [(a, b) for c, a, b in calls if _in_scope(c, name) and c.count(".") == depth]
        for a, b in spans:
            seg = [n for n in nodes if a <= n.id < b]
            if seg:
                segs.append((name, seg))
    return segs


def _blocks(config) -> list:
    names = sorted(name for name, b in getattr(config, "blocks", {}).items() if b.activation_checkpointing)
    # a block inside a checkpointed block is part of the outer segment
    return [n for n in names if not any(n != o and _in_scope(n, o) for o in names)]


def _clone_inputs(n, mapping: dict) -> list:
    out = []
    for a in n.inputs:
        if a.__class__ is Value:
            out.append(mapping.get(a.id, a))
        elif a.__class__ is list:
            out.append([mapping.get(v.id, v) for v in a])
        else:
            out.append(a if isinstance(a, Lit) else Lit(a))
    return out


def _checkpoint(ir, name: str, seg: list) -> int:
    """Recompute one segment in backward; returns the number of cloned nodes."""
    seg_ids = {n.id for n in seg}
    defined = {o.id: n for n in seg for o in n.outputs}
    pos = {n.id: i for i, n in enumerate(ir.nodes)}
    readers = []  # backward nodes reading activations of the segment
    needed = set()
    for n in ir.nodes:
        if n.tags.get("phase") != "backward" or n.id in seg_ids:
            continue
        hit = [v.id for v in n.input_values() if v.id in defined]
        if hit:
            readers.append(n)
            needed.update(hit)
    if not needed:
        return 0
    # kept, never recomputed: random draws and side effects, and the segment's outputs (read by forward
    # nodes after it: they stay alive as the next layer's saved input anyway)
    keep = {vid for vid, n in defined.items() if n.has_side_effects}
    users = ir.users()
    for vid in defined:
        if any(u.id not in seg_ids and u.tags.get("phase", "forward") == "forward" for u in users.get(vid, ())):
            keep.add(vid)
    needed -= keep
    todo, clone_ids = list(needed), set()
    while todo:
        vid = todo.pop()
        n = defined[vid]
        if n.id in clone_ids:
            continue
        clone_ids.add(n.id)
        for v in n.input_values():
            if v.id in defined and v.id not in keep:
                todo.append(v.id)
    if not clone_ids:
        return 0
    first = min(readers, key=lambda r: pos[r.id])
    mapping: dict = {}
    clones = []
    for n in seg:
        if n.id not in clone_ids:
            continue
        tags = dict(n.tags)
        tags.update(phase="backward", recompute_of=n.id)
        c = ir.make_node(
            n.op, _clone_inputs(n, mapping), dict(n.attrs), [o.meta for o in n.outputs], n.loc, n.scope, tags
        )
        for o, co in zip(n.outputs, c.outputs):
            mapping[o.id] = co
            inherit_attrs(o, co)  # a recomputed value is the same value (its SBP, its AMP dtype)
        clones.append(c)
    at = pos[first.id]
    ir.nodes[at:at] = clones
    for r in readers:
        r.map_inputs(lambda v: mapping.get(v.id, v))
    return len(clones)


def activation_checkpointing(ir, config=None):
    """Recompute the forward activations of checkpointed blocks in backward (see the module docstring)."""
    names = _blocks(config)
    total, segs = 0, 0
    for name, seg in _segments(ir, names):
        k = _checkpoint(ir, name, seg)
        if k:
            total += k
            segs += 1
    ir.meta.setdefault("pass_notes", {})["activation_checkpointing"] = (
        f"{segs} segments of {', '.join(names) or 'no block'}: {total} nodes recomputed in backward"
    )
    return ir


def register(registry) -> None:
    registry.register_pass(
        "activation_checkpointing",
        activation_checkpointing,
        after=("constant_folding", "simplify", "cse", "dce", "amp"),
        before=("fusion", "memory_planning"),
    )
