"""Lowering: an optimised :class:`~flow.graph.ir.GraphIR` becomes a :class:`Plan` the executor runs.

Each IR node becomes a :class:`Step`: the kernel resolved once (``REGISTRY.resolve_kernel`` for the
node's device type and the dtype of its first tensor input, as eager dispatch does), its
arguments as *slots* (every value of the graph has a slot; literals and attributes are baked
in), its output slots, and the slots whose last reader it is (freed right after it). Where the
backend offers several kernels for the node (``REGISTRY.kernel_entries`` with different names),
the step keeps them all as autotuning candidates.

The edges between steps are the data edges plus, for every in-place node, an edge from each
other reader of the buffer it overwrites (and of views of it) to the node. The order steps run
in comes from the dataflow scheduler (:mod:`flow.graph.dataflow`) simulating one step with a
buffer per edge: on one CPU thread that is a topological order, which the executor then runs as
straight-line code. Then the plan phases registered in
:data:`flow.graph.pass_tables.PLAN_PHASE_TABLE` run on it (memory planning's arena).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from flow.errors import FlowError
from flow.graph.ir import GraphIR, Lit, Node, Value

# ops whose kernels may return a view of their first input (an in-place write to the input is
# seen through them, so their readers must also run before the write)
ALIASING_OPS = frozenset(
    {
        "reshape",
        "expand",
        "permute",
        "basic_index",
        "diagonal",
        "split",
        "unbind",
        "contiguous",
        "select_along_dim",
        "flip",
    }
)


@dataclass
class Step:
    """One kernel call of the plan."""

    index: int
    node: Node
    kernel: Callable
    args: list  # per positional input: ("s", slot) | ("l", [slots]) | ("c", literal)
    outs: list  # output slots
    attrs: dict
    device_type: str
    dtype: Any
    candidates: list = field(default_factory=list)  # [(name, fn)] when there is a choice (autotuning)
    frees: list = field(default_factory=list)
    scalar_out: bool = False  # 0-d output on the CPU: make sure it is an ndarray
    out_kernel: Callable | None = None  # the kernel's out-variant (takes out=), when it has one


@dataclass
class Plan:
    """What the executor runs: steps in schedule order, and where inputs, states and results live."""

    name: str
    ir: GraphIR
    steps: list
    n_slots: int
    input_slots: list
    state_slots: list
    host_slots: list
    const_slots: dict  # slot -> array
    output_slots: list  # slot, or ("lit", value)
    update_slots: list  # (index into state_slots, slot of the new value)
    deps: dict  # step index -> set of step indices it waits for
    slot_names: dict = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"plan {self.name}: {len(self.steps)} steps, {self.n_slots} slots"]
        for s in self.steps:
            args = []
            for kind, a in s.args:
                args.append(
                    f"s{a}" if kind == "s" else "[" + ", ".join(f"s{x}" for x in a) + "]" if kind == "l" else repr(a)
                )
            lines.append(
                f"  {s.index:4d} {', '.join(f's{o}' for o in s.outs)} = {s.node.name}({', '.join(args)})"
                + (f"  free {s.frees}" if s.frees else "")
            )
        return "\n".join(lines)


def _first_tensor(node: Node) -> Value | None:
    for v in node.input_values():
        return v
    return None


def _kernels(node: Node, autotune: bool):
    from flow.plugins.manager import ensure_loaded
    from flow.registry import REGISTRY

    ensure_loaded()
    first = _first_tensor(node)
    if first is None:
        raise FlowError(f"graph lowering: node {node.id} ({node.name}) has no tensor input")
    dt, dtype = first.device.type, first.dtype
    kern = REGISTRY.resolve_kernel(node.op, dt, dtype)
    cands, outs = [], []
    if autotune:
        from flow.graph.pass_tables import entry_out_variant, supports_out

        dev = REGISTRY.device_types[dt]
        seen = set()
        for e in REGISTRY.kernel_entries(node.op, dt, dtype):
            if e.name in seen:
                continue
            seen.add(e.name)
            fn = e.fn(dev.xp) if e.generic else e.fn
            cands.append((e.name, fn))
            outs.append((e.name, entry_out_variant(e, dt) or (fn if supports_out(fn) else None)))
        if len(cands) < 2:
            cands = []
        elif all(fn is not None for _, fn in outs):
            # every candidate writes into a given array: the tuner runs those forms (they take out=None
            # too), so memory planning can put the step's outputs in the arena whichever kernel wins
            cands = outs
    return kern, cands, dt, dtype


def skipping_kernel(kern, node: Node):
    """The kernel of a node tagged ``skip_if`` (a value: a 1-element flag, e.g. found_inf of loss scaling),
    which comes as its last argument: when the flag is non-zero the call is skipped and the node's in-place
    outputs are its inputs as they were (an optimizer update that did not happen), otherwise ``kern`` runs.
    Only in-place nodes can be skipped: their outputs are their inputs' buffers either way."""
    if not node.inplace or len(node.inplace) != len(node.outputs):
        raise FlowError(f"graph lowering: node {node.id} ({node.name}) has skip_if but not all outputs in place")
    pos = []  # flat tensor-input index -> (argument, index in its list or None)
    for ai, a in enumerate(node.inputs):
        if a.__class__ is Value:
            pos.append((ai, None))
        elif a.__class__ is list:
            pos.extend((ai, j) for j in range(len(a)))
    where = [pos[node.inplace[k]] for k in range(len(node.outputs))]

    def skipping(*args, **attrs):
        if float(args[-1].reshape(-1)[0]):
            return tuple(args[ai] if j is None else args[ai][j] for ai, j in where)
        return kern(*args[:-1], **attrs)

    return skipping


def _step_out_kernel(node: Node, kern, cands: list, flag, dt: str, dtype):
    """The step's out-variant: the dispatch kernel's, or with autotuning candidates the first candidate
    when all of them take ``out=`` (see :func:`_kernels`); None for a skipped (``skip_if``) step."""
    from flow.graph.pass_tables import out_kernel, supports_out

    if flag is not None:
        return None
    if cands:
        return cands[0][1] if all(supports_out(fn) for _, fn in cands) else None
    return out_kernel(node.op, dt, dtype, kern)


def dependencies(ir: GraphIR) -> dict[int, set[int]]:
    """node id -> ids of the nodes it must run after (data edges and in-place anti-dependencies)."""
    deps: dict[int, set[int]] = {n.id: set() for n in ir.nodes}
    readers: dict[int, list[Node]] = {}
    for n in ir.nodes:
        for v in n.input_values():
            if v.producer is not None and v.producer.id in deps:
                deps[n.id].add(v.producer.id)
            readers.setdefault(v.id, []).append(n)
        flag = n.tags.get("skip_if")
        if flag is not None and flag.producer is not None and flag.producer.id in deps:
            deps[n.id].add(flag.producer.id)
    for n in ir.nodes:
        if not n.inplace:
            continue
        flat = list(n.input_values())
        for idx in set(n.inplace.values()):
            target = flat[idx]
            stack, seen = [target], {target.id}
            while stack:
                v = stack.pop()
                for r in readers.get(v.id, ()):
                    if r is n:
                        continue
                    deps[n.id].add(r.id)
                    if r.name in ALIASING_OPS:
                        for o in r.outputs:
                            if o.id not in seen:
                                seen.add(o.id)
                                stack.append(o)
    prev = None  # random draws keep their program order (the generator's stream is that of eager mode)
    for n in ir.nodes:
        if getattr(n.op, "nondeterministic", False):
            if prev is not None:
                deps[n.id].add(prev.id)
            prev = n
    prev = None  # collectives keep their program order: every process issues them alike
    for n in ir.nodes:
        if getattr(n.op, "collective", False):
            if prev is not None:
                deps[n.id].add(prev.id)
            prev = n
    for n in ir.nodes:
        deps[n.id].discard(n.id)
    return deps


def lower(ir: GraphIR, config=None) -> Plan:
    """Resolve kernels, assign slots, schedule, compute liveness."""
    from flow.graph.dataflow import schedule

    autotune = bool(getattr(config, "autotune", True))
    slot_of: dict[int, int] = {}
    names: dict[int, str] = {}

    def slot(v: Value) -> int:
        s = slot_of.get(v.id)
        if s is None:
            s = slot_of[v.id] = len(slot_of)
            if v.name:
                names[s] = v.name
        return s

    input_slots = [slot(v) for v in ir.inputs]
    state_slots = [slot(v) for v in ir.states]
    host_slots = [slot(v) for v in ir.hosts]
    const_slots: dict[int, Any] = {}
    consts_by_id: dict[int, Value] = {}
    for n in ir.nodes:
        for v in n.input_values():
            if v.kind == "const":
                consts_by_id[v.id] = v
    for v in ir.outputs:
        if isinstance(v, Value) and v.kind == "const":
            consts_by_id[v.id] = v
    for _, new in ir.updates:
        if new.kind == "const":
            consts_by_id[new.id] = new
    for vid, v in consts_by_id.items():
        const_slots[slot(v)] = ir.constants[vid]

    deps_by_node = dependencies(ir)
    order = schedule(ir.nodes, deps_by_node)
    pos = {nid: i for i, nid in enumerate(order)}
    by_id = {n.id: n for n in ir.nodes}
    steps = []
    for i, nid in enumerate(order):
        n = by_id[nid]
        kern, cands, dt, dtype = _kernels(n, autotune)
        args = []
        for a in n.inputs:
            if a.__class__ is Value:
                args.append(("s", slot(a)))
            elif a.__class__ is list:
                args.append(("l", [slot(v) for v in a]))
            else:
                args.append(("c", a.value if isinstance(a, Lit) else a))
        outs = [slot(o) for o in n.outputs]
        scalar = dt == "cpu" and len(n.outputs) == 1 and n.outputs[0].ndim == 0
        flag = n.tags.get("skip_if")
        if flag is not None:  # read last, so input indices (in-place map, memory planning) stay as they are
            args.append(("s", slot(flag)))
            kern, cands = skipping_kernel(kern, n), []
        steps.append(
            Step(
                i,
                n,
                kern,
                args,
                outs,
                dict(n.attrs),
                dt,
                dtype,
                cands,
                scalar_out=scalar,
                out_kernel=_step_out_kernel(n, kern, cands, flag, dt, dtype),
            )
        )
    deps = {pos[nid]: {pos[d] for d in ds} for nid, ds in deps_by_node.items()}
    output_slots = [slot(v) if isinstance(v, Value) else ("lit", v.value) for v in ir.outputs]
    state_index = {v.id: k for k, v in enumerate(ir.states)}
    update_slots = [(state_index[s.id], slot(new)) for s, new in ir.updates]
    keep = {s for s in output_slots if isinstance(s, int)} | {s for _, s in update_slots}
    last: dict[int, int] = {}
    for st in steps:
        for kind, a in st.args:
            if kind == "s":
                last[a] = st.index
            elif kind == "l":
                for x in a:
                    last[x] = st.index
        for o in st.outs:
            last.setdefault(o, st.index)
    for s, i in last.items():
        if s not in keep and s not in const_slots:
            steps[i].frees.append(s)
    for st in steps:
        st.frees.sort()
    plan = Plan(
        ir.name,
        ir,
        steps,
        len(slot_of),
        input_slots,
        state_slots,
        host_slots,
        const_slots,
        output_slots,
        update_slots,
        deps,
        names,
    )
    from flow.graph.pass_tables import plan_phases

    for _, phase in plan_phases():  # work on the scheduled plan (memory planning's arena, ...)
        if phase.applies(plan):
            phase.run(plan, config)
    return plan
