"""The ``amp`` graph pass: mixed precision for a traced step (``graph.config.enable_amp(True, dtype=...)``).

A traced step is a list of nodes in execution order: the forward, its backward (in primitive ops:
a linear's input gradient is a ``matmul``) and the optimizer updates. The pass walks it once, in
order, and gives each node the dtypes eager :func:`flow.autocast` would give the same op call,
using the same colour table (:mod:`flow_amp.colors`):

* ``allow`` nodes (matmul, linear, conv2d ...) read their floating inputs in the low-precision
  dtype, so they run low and their outputs are low;
* ``deny`` nodes (losses, ``prod``, the optimizer updates and loss-scaling ops) read float32: the
  loss is computed in float32, gradients reach the optimizer in float32 and the master weights
  and optimizer states never leave float32;
* ``infer`` nodes (``layer_norm``) read their other floating inputs (weights) in the dtype of
  the first (the activation);
* ``promote`` nodes, and ``clear`` nodes whose floating inputs disagree, read the widest dtype
  among their inputs (eager type promotion); other ``clear`` nodes run in whatever arrives, which
  is how the low-precision region grows from the allow nodes through elementwise ops, reshapes
  and reductions until a deny node or a float32 operand stops it.

A cast is inserted only where a value crosses a colour boundary, and one cast per (value, dtype)
serves every reader: a weight read by the forward ``linear`` and by the backward ``matmul`` is cast
once per step (eager autocast's weight cache). Casting back what a cast widened reuses the
original value (``cast(cast(x: bf16 -> f32) -> bf16)`` is ``x``), so cast pairs that cancel never
appear; a cast of a value to its own dtype is never made. In-place destinations (the parameters an
optimizer update writes) are never cast. Each node's output metas are re-inferred as the walk
reaches it, so later decisions see the new dtypes; states whose new value came out in another
dtype get a cast back before the update (a buffer keeps its dtype). float64 and integer tensors
are left alone, as in eager autocast.

The pass records what it did: the outputs of each node whose colour is not ``clear`` carry
``attrs["amp"]`` = that colour (the IR dump prints it as ``{amp=allow}``), casts it made carry
``{amp=cast}``, the nodes ``tags["amp"]``, and ``ir.meta["amp"]`` the counts (``print(graph)``
shows them on its ``amp:`` line).
"""

from __future__ import annotations

from flow import _dtype as D
from flow.errors import FlowError
from flow.graph.ir import Value
from flow.graph.meta_check import node_metas
from flow_amp import colors as C

__all__ = ["amp_pass", "register_pass", "PASS_NAME"]

PASS_NAME = "amp"

# The pass decides the dtypes every later pass works with: it runs first, so constant folding folds
# casts of constants, CSE/DCE clean up after it, recomputation copies cast nodes, and fusion and
# memory planning see the final dtypes.
_BEFORE = (
    "constant_folding",
    "simplify",
    "cse",
    "dce",
    "activation_checkpointing",
    "fusion",
    "memory_planning",
    "gradient_buckets",
)


def register_pass(registry) -> None:
    registry.register_pass(PASS_NAME, amp_pass, before=_BEFORE)


def _low_dtype(config):
    opts = getattr(config, "amp", None) or {}
    dt = opts.get("dtype")
    if dt is None:
        return D.bfloat16
    dt = D.as_dtype(dt)
    if dt not in (D.bfloat16, D.float16):
        raise FlowError(f"graph config enable_amp: dtype must be flow.bfloat16 or flow.float16, got {dt}")
    return dt


def _eligible(v) -> bool:
    return v.__class__ is Value and v.dtype.is_floating_point and v.dtype is not D.float64


def _device_type(node) -> str:
    for v in node.input_values():
        dev = v.device
        if dev is not None:
            return getattr(dev, "type", str(dev).split(":")[0])
    for o in node.outputs:
        if o.device is not None:
            return getattr(o.device, "type", str(o.device).split(":")[0])
    return "cpu"


class _Caster:
    """Makes (and reuses) the casts of values: one per (value, dtype)."""

    def __init__(self, ir) -> None:
        self.ir = ir
        self.made: dict[tuple[int, object], Value] = {}
        self.count = 0

    def __call__(self, v: Value, dt, before) -> Value:
        if v.dtype is dt:
            return v
        hit = self.made.get((v.id, dt))
        if hit is not None:
            return hit
        p = v.producer
        # v = cast(u) that widened u (u is exact in v's dtype): casting v back to u's dtype gives u
        if p is not None and p.name == "cast":
            (u,) = list(p.input_values())
            if u.dtype is dt and u.dtype.itemsize < v.dtype.itemsize:
                self.made[(v.id, dt)] = u
                return u
        node = self.ir.emit("cast", [v], {"dtype": dt.name}, before=before, scope=before.scope if before else "")
        node.loc = before.loc if before is not None else None
        node.tags["amp"] = "cast"
        node.outputs[0].attrs["amp"] = "cast"
        if before is not None and "phase" in before.tags:
            node.tags["phase"] = before.tags["phase"]
        out = node.outputs[0]
        self.made[(v.id, dt)] = out
        self.count += 1
        return out


def _target(node, color: str, floats: list, low):
    if color == C.ALLOW:
        return low
    if color == C.DENY:
        return D.float32
    dtypes = {v.dtype for v in floats}
    if len(dtypes) < 2:
        return None
    if color == C.INFER:  # the weights follow the activation (the first floating input)
        return floats[0].dtype
    if color == C.CLEAR and _accepts(node):
        # as in eager autocast, a clear op gets its inputs as they come and promotes them itself
        return None
    # promote, or a clear op that wants one dtype (a backward op meeting a float32 gradient and a
    # low-precision activation, which eager autocast never passes it): the widest dtype
    return max(dtypes, key=lambda d: d.itemsize)


def _accepts(node) -> bool:
    try:
        node_metas(node)
    except FlowError:
        return False
    return True


def amp_pass(ir, config):
    """Colour the step's nodes with the AMP table and insert the casts autocast would make."""
    from flow.registry import REGISTRY

    low = _low_dtype(config)
    table = REGISTRY.tables.get(C.TABLE)
    rules = {}  # (op name, device type) -> colour
    caster = _Caster(ir)
    colours = {C.ALLOW: 0, C.DENY: 0, C.PROMOTE: 0, C.INFER: 0}
    for node in list(ir.nodes):
        if node.tags.get("amp") == "cast":
            continue
        key = (node.name, _device_type(node))
        color = rules.get(key)
        if color is None:
            rule = table.get(node.name) if table is not None else None
            if rule is not None:
                C.check_rule(node.name, rule)
            color = rules[key] = C.color_of(rule, key[1])
        color = C.call_color(node.name, color, (), node.attrs)  # einsum: low only when it contracts
        flat = list(node.input_values())
        dests = set(node.inplace.values())
        floats = [v for v in flat if _eligible(v)]
        if dests:
            # an update writes into its destination's buffer: it computes in that dtype, whatever
            # the colour says, and only the other operands are cast to it
            dest = next((flat[i] for i in sorted(dests) if _eligible(flat[i])), None)
            target = dest.dtype if dest is not None else None
        elif node.name == "cast":
            target = None  # the user's own casts stay as written
        else:
            target = _target(node, color, floats, low)
        if color in colours:
            node.tags["amp"] = color
            colours[color] += 1
            for o in node.outputs:
                o.attrs["amp"] = color
        if target is not None and any(v.dtype is not target for v in floats):
            pos = {"i": 0}

            def conv(v, node=node, target=target, pos=pos, dests=dests):
                i = pos["i"]
                pos["i"] += 1
                if i in dests or not _eligible(v) or v.dtype is target:
                    return v
                return caster(v, target, node)

            node.map_inputs(conv)
        _reinfer(node)
    updates_cast = _cast_updates(ir, caster)
    ir.meta["amp"] = {
        "dtype": low.name,
        "casts": caster.count,
        "allow": colours[C.ALLOW],
        "deny": colours[C.DENY],
        "promote": colours[C.PROMOTE],
        "infer": colours[C.INFER],
        "state_casts": updates_cast,
    }
    notes = ir.meta.setdefault("pass_notes", {})
    notes["amp"] = (
        f"{low.name}: {colours[C.ALLOW]} allow, {colours[C.DENY]} deny, {colours[C.PROMOTE]} promote, "
        f"{colours[C.INFER]} infer nodes; "
        f"{caster.count} casts inserted"
    )
    return ir


def _reinfer(node) -> None:
    for o, m in zip(node.outputs, node_metas(node)):
        o.shape, o.dtype = tuple(m.shape), m.dtype
        if m.device is not None:
            o.device = m.device


def _cast_updates(ir, caster) -> int:
    """A state keeps its dtype: a new value that came out in another dtype is cast back."""
    n = 0
    new_updates = []
    for s, new in ir.updates:
        if new.__class__ is Value and new.dtype is not s.dtype and _eligible(new):
            after = new.producer
            node = ir.emit("cast", [new], {"dtype": s.dtype.name}, after=after) if after is not None else None
            if node is None:
                raise FlowError(f"amp pass: state {s.name or s.id} is updated with a graph input of another dtype")
            node.tags["amp"] = "cast"
            node.outputs[0].attrs["amp"] = "cast"
            node.loc = after.loc
            new = node.outputs[0]
            caster.count += 1
            n += 1
        new_updates.append((s, new))
    ir.updates = new_updates
    return n
