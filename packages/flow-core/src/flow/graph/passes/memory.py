"""Memory planning: liveness, in-place reuse and one preallocated arena per compiled step.

The pass ``memory_planning`` (last in the pipeline) works in two parts:

1. **In-place reuse** (on the IR): an elementwise node whose kernel takes ``out=`` (NumPy ufuncs,
   ``fused_elementwise``, kernels declared with an out-variant) writes its output into the buffer
   of an input when that input has the output's shape and dtype, is a fresh buffer made by a node
   of the step (not a graph input, state, constant or view, nor the output of an in-place node), is
   not returned or written to a state, and this node is its last reader, also through views of it
   (in program order). The node gets ``inplace = {out: in}`` (lowering then orders every other
   reader first) and ``tags["out_inplace"]``; the executor passes the input as ``out=``.
2. **The arenas** (the plan phase ``memory_arena``, on the lowered plan, so they always match the
   schedule and the plan's outputs): liveness over the plan's slots, where a view
   (``ALIASING_OPS``: reshape, permute, expand, ...) or an in-place result shares its base buffer,
   whose lifetime extends over every use of them; then every value a kernel can write with
   ``out=`` gets an offset in one ``uint8`` buffer per device, by greedy best-fit over lifetime
   intervals (largest first, 64-byte aligned). Values returned to the caller or written to
   states, 0-d values, the outputs of kernels without ``out=`` and values on devices without an
   :class:`~flow.graph.pass_tables.ArenaRule` stay outside and are accounted for separately.

Both parts run for every device type that registered an ``ArenaRule`` (the CPU does); out-variants
are declared with the kernels (``register_kernel(..., out=)``), see :mod:`flow.graph.pass_tables`.

:func:`memory_report` gives the peak bytes of intermediate values with and without planning (the
executor without planning frees each value after its last reader; views keep their base alive).
The arena belongs to the executor: one compiled step must not run on two threads at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flow.graph.lowering.plan import ALIASING_OPS
from flow.graph.pass_tables import arena_rule, out_kernel
from flow.graph.pass_tables import supports_out as _supports_out

ALIGN = 64


def supports_out(kernel) -> bool:
    return _supports_out(kernel)


def out_variant(step):
    """The kernel of a plan step that takes ``out=`` (declared with the kernel), or None."""
    return getattr(step, "out_kernel", None)


def _nbytes(v) -> int:
    return v.numel() * np.dtype(v.dtype.np).itemsize


# -- liveness --------------------------------------------------------------------------------------
def liveness(steps: list, roots=(), end: int | None = None) -> tuple[dict, dict, dict]:
    """Liveness of values over a sequence of steps.

    ``steps``: ``(input ids, output ids, alias)`` per step, ``alias`` mapping an output id to the
    input id whose buffer it shares (a view, an in-place result). Returns ``(base, defined, last)``:
    the base buffer of every value, the step defining each base, and the last step using each base
    (over all values sharing it; ``roots`` are used at ``end``, default ``len(steps)``).
    """
    base: dict = {}
    defined: dict = {}
    last: dict = {}
    for i, (ins, outs, alias) in enumerate(steps):
        for v in ins:
            b = base.get(v, v)
            last[b] = i
        for o in outs:
            if o in alias:
                base[o] = base.get(alias[o], alias[o])
                b = base[o]
                last[b] = max(last.get(b, i), i)
            else:
                base[o] = o
                defined[o] = i
                last.setdefault(o, i)
    stop = len(steps) if end is None else end
    for r in roots:
        last[base.get(r, r)] = stop
    return base, defined, last


def ir_steps(ir) -> list:
    steps = []
    for n in ir.nodes:
        flat = list(n.input_values())
        alias = {}
        if n.name in ALIASING_OPS and flat:
            for o in n.outputs:
                alias[o.id] = flat[0].id
        for j, i in n.inplace.items():
            if j < len(n.outputs) and i < len(flat):
                alias[n.outputs[j].id] = flat[i].id
        steps.append(([v.id for v in flat], [o.id for o in n.outputs], alias))
    return steps


# -- the allocator ----------------------------------------------------------------------------------
def allocate(intervals: list, alignment: int = ALIGN) -> tuple[list, int]:
    """Offsets for ``(first step, last step, bytes)`` intervals such that two values live at the same
    time never overlap, and the arena size. Greedy interval colouring: values are placed one by one,
    each in the smallest gap that fits among the values it overlaps in time (best fit); this is
    done for a few placement orders (largest first, earliest first, longest-lived first) and the
    smallest arena wins. Offsets are multiples of ``alignment``."""

    def up(n):
        return (n + alignment - 1) // alignment * alignment

    sizes = [up(max(int(size), 1)) for _, _, size in intervals]
    orders = [
        sorted(range(len(intervals)), key=lambda i: (-sizes[i], intervals[i][0], i)),
        sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -sizes[i], i)),
        sorted(range(len(intervals)), key=lambda i: (-(intervals[i][1] - intervals[i][0] + 1) * sizes[i], i)),
    ]
    best = None
    for order in orders:
        offsets, total = _place(intervals, sizes, order, up)
        if best is None or total < best[1]:
            best = (offsets, total)
    return best if best is not None else ([], 0)


def _place(intervals, sizes, order, up) -> tuple[list, int]:
    placed: list = []  # (start, end, offset, size)
    offsets = [0] * len(intervals)
    total = 0
    for i in order:
        s, e, _ = intervals[i]
        size = sizes[i]
        busy = sorted((o, o + sz) for ps, pe, o, sz in placed if not (pe < s or e < ps))
        best, best_gap, cur = None, None, 0
        for lo, hi in busy:
            gap = lo - cur
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cur, gap
            cur = max(cur, up(hi))
        off = best if best is not None else cur
        offsets[i] = off
        placed.append((s, e, off, size))
        total = max(total, off + size)
    return offsets, total


# -- the pass: in-place reuse -----------------------------------------------------------------------
_FRESH = {"matmul", "linear", "fused_elementwise"}


def _fresh(node) -> bool:
    """The node's outputs are new buffers (not views of, or writes into, its inputs)."""
    if node.inplace or node.name in ALIASING_OPS or node.name == "cast":  # cast may return its input
        return False
    return node.name in _FRESH or bool(getattr(node.op, "elementwise", False))


def _kernel(node):
    from flow.registry import REGISTRY

    first = next(iter(node.input_values()), None)
    if first is None:
        return None
    try:
        k = REGISTRY.resolve_kernel(node.op, first.device.type, first.dtype)
        cands = [e for e in REGISTRY.kernel_entries(node.op, first.device.type, first.dtype)]
    except Exception:
        return None
    if len({e.name for e in cands}) > 1:  # autotuned: every candidate would need out=
        return None
    return out_kernel(node.op, first.device.type, first.dtype, k)


def _inplace_device(v) -> bool:
    rule = arena_rule(v.device.type)
    return rule is not None and rule.inplace


def memory_planning(ir, config=None):
    """In-place reuse on the IR; the arena follows as a plan phase (see the module docstring)."""
    steps = ir_steps(ir)
    roots = [v.id for v in ir.live_roots()]
    base, _, last = liveness(steps, roots)
    held = {base.get(r, r) for r in roots}  # buffers the caller or a state keeps
    views = {o for _, outs, alias in steps for o in outs if o in alias}
    values = {o.id: o for n in ir.nodes for o in n.outputs}
    parent: dict = {}  # buffer merged into another by an in-place write

    def find(b):
        while b in parent:
            b = parent[b]
        return b

    reused = 0
    for i, n in enumerate(ir.nodes):
        elementwise = getattr(n.op, "elementwise", False) or n.name == "fused_elementwise"
        if n.inplace or n.has_side_effects or not elementwise:
            continue
        if not all(_inplace_device(o) for o in n.outputs):
            continue
        k = _kernel(n)
        if k is None or (len(n.outputs) > 1 and not getattr(k, "supports_out", False)):
            continue
        flat = list(n.input_values())
        taken, choice = set(), {}
        for j, o in enumerate(n.outputs):
            for idx, v in enumerate(flat):
                if v.id in taken or v.id in views or v.shape != o.shape or v.dtype is not o.dtype or v.ndim == 0:
                    continue
                r = find(base.get(v.id, v.id))
                rv = values.get(r)
                if rv is None or r in held or last.get(r) != i or rv.producer is None or not _fresh(rv.producer):
                    continue
                if sum(1 for w in flat if w.id == v.id) > 1 and not isinstance(k, np.ufunc):
                    continue
                taken.add(v.id)
                choice[j] = idx
                ro = base.get(o.id, o.id)
                parent[ro] = r
                last[r] = max(last[r], last.get(ro, i))
                if ro in held:
                    held.add(r)
                break
        if choice:
            n.inplace = dict(choice)
            n.tags["out_inplace"] = dict(choice)
            reused += len(choice)
    opts = getattr(config, "options", None) or {}
    ir.meta["memory_planning"] = {
        "alignment": int(opts.get("memory_planning.alignment", ALIGN)),
        "inplace": reused,
        "slack": float(opts.get("memory_planning.slack", 0.02)),
    }
    ir.meta.setdefault("pass_notes", {})["memory_planning"] = f"{reused} outputs written in place of a dead input"
    return ir


# -- the arena (on the plan) ------------------------------------------------------------------------
@dataclass
class MemoryPlan:
    """Where each planned value lives: arena offsets, and the ``out=`` argument of each step.

    One arena per device (``arenas``: device name -> bytes, allocated by the device's
    :class:`~flow.graph.pass_tables.ArenaRule` when the executor binds the plan)."""

    arena_bytes: int  # all arenas together
    alignment: int
    slots: dict  # slot -> (device name, offset, shape, numpy dtype)
    out_args: dict  # step index -> [code for each output or None]
    report: dict = field(default_factory=dict)
    arenas: dict = field(default_factory=dict)  # device name -> bytes
    devices: dict = field(default_factory=dict)  # device name -> device type name
    buffers: dict = field(default_factory=dict)  # device name -> the arena array, once bound

    @property
    def arena(self):
        """The arena array when the plan has one (one device), else None."""
        return next(iter(self.buffers.values())) if len(self.buffers) == 1 else None

    def bind(self, env: dict) -> None:
        """Allocate the arenas and put a view for each planned slot into the executor's globals."""
        rules = {d: arena_rule(t) for d, t in self.devices.items()}
        self.buffers = {d: rules[d].allocate(n, self.alignment) for d, n in self.arenas.items()}
        for s, (d, off, shape, dt) in self.slots.items():
            env[f"_b{s}"] = rules[d].view(self.buffers[d], off, shape, dt)

    def out_arg(self, index: int) -> str | None:
        outs = self.out_args.get(index)
        if not outs:
            return None
        if len(outs) == 1:
            return outs[0]
        return "(" + ", ".join(o or "None" for o in outs) + ",)"


def _plan_steps(plan):
    steps = []
    for st in plan.steps:
        ins = []
        for kind, a in st.args:
            if kind == "s":
                ins.append(a)
            elif kind == "l":
                ins.extend(a)
        alias = {}
        n = st.node
        if n.name in ALIASING_OPS and ins:
            for o in st.outs:
                alias[o] = ins[0]
        for j, i in n.inplace.items():
            if j < len(st.outs) and i < len(ins):
                alias[st.outs[j]] = ins[i]
        steps.append((ins, list(st.outs), alias))
    return steps


def _roots(plan) -> list:
    return [s for s in plan.output_slots if isinstance(s, int)] + [s for _, s in plan.update_slots]


def plan_memory(plan, config=None) -> None:
    """Plan phase: liveness over the plan's slots, then arena offsets for the values kernels can
    write with ``out=``; sets ``plan.memory`` (a :class:`MemoryPlan`)."""
    info = plan.ir.meta.get("memory_planning") or {}
    align = int(info.get("alignment", ALIGN))
    steps = _plan_steps(plan)
    roots = _roots(plan)
    base, defined, last = liveness(steps, roots)
    root_bases = {base.get(r, r) for r in roots}
    slot_value = {}
    for st in plan.steps:
        for o, v in zip(st.outs, st.node.outputs):
            slot_value[o] = v
    cands, out_args = [], {}
    for st in plan.steps:
        n = st.node
        kern = out_variant(st)  # with autotuning candidates: set only when every candidate takes out=
        args = [None] * len(st.outs)
        if kern is not None:
            for j, i in n.tags.get("out_inplace", {}).items():
                args[j] = f"v{steps[st.index][0][i]}"
        multi_ok = getattr(kern, "supports_out", False)
        for j, s in enumerate(st.outs):
            v = slot_value.get(s)
            if args[j] is not None or kern is None or v is None or (len(st.outs) > 1 and not multi_ok):
                continue
            if base.get(s) != s or s in root_bases or v.ndim == 0 or v.numel() == 0:
                continue
            if arena_rule(v.device.type) is None:  # the device has no arena (flow.graph.pass_tables)
                continue
            if np.dtype(v.dtype.np).kind not in "biuf" or st.scalar_out:
                continue
            cands.append((s, defined[s], last.get(s, defined[s]), _nbytes(v), st, j, v))
        out_args[st.index] = args
    # Values outside the arena (kernels without out=) are allocated as the step runs, so the peak is
    # arena + the outside peak, and a smaller arena can give a lower sum. Try all candidates, the
    # larger half and quarter of them, and none; keep the biggest arena whose peak is within
    # ``slack`` (2%) of the lowest (an arena saves the allocations, page faults, of every step).
    slack = float(info.get("slack", 0.02))
    by_size = sorted(cands, key=lambda c: -c[3])
    tries = []
    for frac in (1.0, 0.5, 0.25, 0.0):
        chosen = by_size[: int(round(len(by_size) * frac))]
        offsets, arenas, size = _allocate_by_device(chosen, align)
        tries.append((size + _simulate(plan, steps, base, last, {c[0] for c in chosen}), chosen, offsets, arenas, size))
    low = min(t[0] for t in tries)
    _, cands, offsets, arenas, size = next(t for t in tries if t[0] <= low * (1 + slack))
    slots, devices = {}, {}
    for (s, _, _, _, st, j, v), off in zip(cands, offsets):
        slots[s] = (str(v.device), off, tuple(v.shape), np.dtype(v.dtype.np))
        devices[str(v.device)] = v.device.type
        out_args[st.index][j] = f"_b{s}"
    for st in plan.steps:
        if any(a is not None for a in out_args.get(st.index, ())) and not supports_out(st.kernel):
            st.kernel = out_variant(st)
    out_args = {i: a for i, a in out_args.items() if any(x is not None for x in a)}
    mp = MemoryPlan(size, align, slots, out_args, arenas=arenas, devices=devices)
    plan.memory = mp
    mp.report = memory_report(plan)


def _allocate_by_device(chosen: list, align: int) -> tuple[list, dict, int]:
    """Offsets of the chosen values in one arena per device; their sizes; the total."""
    by_dev: dict = {}
    for k, c in enumerate(chosen):
        by_dev.setdefault(str(c[6].device), []).append(k)
    offsets = [0] * len(chosen)
    arenas = {}
    for dev, ks in by_dev.items():
        offs, size = allocate([chosen[k][1:4] for k in ks], align)
        for k, off in zip(ks, offs):
            offsets[k] = off
        arenas[dev] = size
    return offsets, arenas, sum(arenas.values())


def plan_phase():
    """The arena as a plan phase: it runs on plans whose IR went through ``memory_planning``."""
    from flow.graph.pass_tables import PlanPhase

    return PlanPhase(
        plan_memory,
        lambda plan: "memory_planning" in plan.ir.meta,
        order=100,
        doc="memory planning's arena: offsets and out= arguments",
    )


def _simulate(plan, steps, base, last, skip: set) -> int:
    """Peak bytes of buffers allocated by the steps (outside ``skip``), freed after their last use."""
    live, peak = 0, 0
    sizes = {}
    for st in plan.steps:
        for o, v in zip(st.outs, st.node.outputs):
            sizes[o] = _nbytes(v)
    dying: dict = {}
    for b, i in last.items():
        dying.setdefault(i, []).append(b)
    allocated = set()
    for i, (_, outs, alias) in enumerate(steps):
        for o in outs:
            if o in alias or base.get(o) != o or o in skip:
                continue
            live += sizes.get(o, 0)
            allocated.add(o)
        peak = max(peak, live)
        for b in dying.get(i, ()):
            if b in allocated:
                live -= sizes.get(b, 0)
                allocated.discard(b)
    return peak


def memory_report(plan) -> dict:
    """Peak bytes of the step's intermediate values, with and without memory planning."""
    steps = _plan_steps(plan)
    roots = _roots(plan)
    # without planning: the executor frees each value after its last reader; views (and the
    # in-place optimizer updates) share their input's buffer; no in-place reuse
    plain = []
    for (ins, outs, alias), st in zip(steps, plan.steps):
        keep = {o: a for o, a in alias.items() if not st.node.tags.get("out_inplace") or st.node.name in ALIASING_OPS}
        plain.append((ins, outs, keep))
    base0, _, last0 = liveness(plain, roots)
    unplanned = _simulate(plan, plain, base0, last0, set())
    mem = getattr(plan, "memory", None)
    rep = {"peak_bytes_unplanned": unplanned}
    if mem is None:
        rep.update(peak_bytes=unplanned, planned=False)
        return rep
    base, _, last = liveness(steps, roots)
    outside = _simulate(plan, steps, base, last, set(mem.slots))
    inplace = sum(len(st.node.tags.get("out_inplace", {})) for st in plan.steps)
    rep.update(
        planned=True,
        peak_bytes=mem.arena_bytes + outside,
        arena_bytes=mem.arena_bytes,
        outside_peak_bytes=outside,
        values_in_arena=len(mem.slots),
        inplace_reuses=inplace,
    )
    return rep


def format_report(rep: dict) -> str:
    def mb(n):
        return f"{n / 2**20:.2f} MiB"

    if not rep.get("planned"):
        return f"memory: peak {mb(rep['peak_bytes'])} of intermediate values (no memory planning)"
    return (
        f"memory: peak {mb(rep['peak_bytes'])} (arena {mb(rep['arena_bytes'])} for {rep['values_in_arena']} "
        f"values + {mb(rep['outside_peak_bytes'])} outside it; {rep['inplace_reuses']} in-place), "
        f"without planning {mb(rep['peak_bytes_unplanned'])}"
    )


def register(registry) -> None:
    registry.register_pass(
        "memory_planning",
        memory_planning,
        after=("constant_folding", "simplify", "cse", "dce", "fusion", "activation_checkpointing", "amp"),
    )
