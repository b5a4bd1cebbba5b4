"""Elementwise fusion: groups of elementwise nodes (and trailing reductions) become one node.

Runs on the whole step (forward, backward and update traced together), after ``dce`` and
``activation_checkpointing``, before ``memory_planning``. A group:

* is a connected set of pure elementwise nodes on one device with one iteration shape (every
  member's output has it), of the ops and dtypes the device's fusion rule lists (the
  ``graph_fusion`` table, :mod:`flow.graph.pass_tables`; on the CPU ``add sub mul div neg exp log
  tanh sigmoid relu gelu where maximum minimum pow``, comparisons, casts, ..., float32/float64/
  bfloat16/float16 values with bool masks inside), with scalar constants baked in;
* reads its other inputs with NumPy broadcasting (an ``expand`` node in front of a member is
  absorbed: the group reads the small tensor);
* may end in ``sum``/``mean`` over trailing dims of the iteration shape (``fusion.reductions``);
* is *convex*: no path leaves the group and comes back (data edges, in-place anti-dependencies
  and the order of random draws all count), so the group can run as one step;
* holds nodes of one phase (forward values fused with backward ones would be computed early and
  kept alive; the phase is taken by data flow, as the tracer tags gradient sums "forward");
* has at most ``fusion.max_outputs`` (1) outputs read in its own phase (values saved for the
  backward pass do not count): fused siblings that each feed a non-fusible reduction (a BatchNorm
  backward) would all be alive at once. Of a group that has more, the longest run of consecutive
  members that obeys this is kept (dropping members from either end keeps a group convex);
* has at least ``fusion.min_nodes`` (2) ops and ``fusion.min_elements`` (4096) elements per
  output (smaller groups cost more in call overhead than they save), at most ``fusion.max_nodes``.

Every value of the group that is read outside it (or is a graph output / state update) becomes an
output of the fused node, so nothing is recomputed. Each device's rule lowers all of that
device's groups at once (``FusionRule.lower``; the CPU generates and compiles C,
:mod:`flow.backends.cpu.codegen`); when the rule is unavailable (no C compiler) or lowering fails,
that device's groups stay unfused and ``ir.meta["pass_notes"]["fusion"]`` says why (printed by
``graph.debug()``).
"""

from __future__ import annotations

import heapq

import ml_dtypes
import numpy as np

from flow.graph.ir import Lit, Value, inherit_attrs
from flow.graph.pass_tables import FUSION_TABLE
from flow.graph.passes.fused_program import FUSED_OP, FusedProgram

# scalar literals a program bakes in: a bfloat16 tensor's scalar operands are ml_dtypes scalars,
# which are not np.floating
_NUM = (bool, int, float, np.bool_, np.integer, np.floating, ml_dtypes.bfloat16)
_ELEMENTWISE_EXTRA = frozenset({"where", "cast"})


def _note(ir, text: str) -> None:
    ir.meta.setdefault("pass_notes", {})["fusion"] = text


def _dtype_name(v: Value) -> str:
    return getattr(v.dtype, "name", str(v.dtype))


class _Fuser:
    def __init__(self, ir, config) -> None:
        from flow.registry import REGISTRY

        self.ir = ir
        table = REGISTRY.tables.get(FUSION_TABLE)
        self.rules: dict = dict(table.items()) if table is not None else {}  # device type -> FusionRule
        self.reduction_ops = frozenset().union(*(r.reductions for r in self.rules.values()))
        opts = getattr(config, "options", {}) or {}
        self.min_nodes = int(opts.get("fusion.min_nodes", 2))
        self.max_nodes = int(opts.get("fusion.max_nodes", 64))
        self.min_elements = int(opts.get("fusion.min_elements", 4096))
        self.reductions = bool(opts.get("fusion.reductions", True))
        self.max_outputs = int(opts.get("fusion.max_outputs", 1))
        self.pos = {n.id: i for i, n in enumerate(ir.nodes)}
        self.by_id = {n.id: n for n in ir.nodes}
        from flow.graph.lowering.plan import dependencies

        self.deps = dependencies(ir)  # data edges + in-place anti-dependencies + random-draw order
        self.anc: dict[int, int] = {}  # node id -> bitmask (by position) of every node it depends on
        for n in ir.nodes:
            m = 0
            for d in self.deps[n.id]:
                m |= self.anc[d] | (1 << self.pos[d])
            self.anc[n.id] = m
        # phase by data flow: the tracer tags the autograd engine's gradient sums "forward"
        self.phase: dict[int, str] = {}
        for n in ir.nodes:
            ph = n.tags.get("phase", "forward")
            if ph == "forward" and any(
                v.producer is not None and self.phase.get(v.producer.id) == "backward" for v in n.input_values()
            ):
                ph = "backward"
            self.phase[n.id] = ph
        self.users = ir.users()
        self.roots = {v.id for v in ir.live_roots()}
        self.group_of: dict[int, int] = {}  # node id -> group id
        self.groups: dict[int, dict] = {}  # group id -> {"nodes": [ids], "shape", "reduce", "mask"}

    # -- what may join a group -----------------------------------------------------------------
    def rule(self, v: Value):
        """The fusion rule of the value's device type (None: that device does not fuse)."""
        return self.rules.get(v.device.type)

    def elementwise(self, n) -> bool:
        if n.has_side_effects or len(n.outputs) != 1:
            return False
        out = n.outputs[0]
        rule = self.rule(out)
        if rule is None or n.name not in rule.ops:
            return False
        if not (getattr(n.op, "elementwise", False) or n.name in _ELEMENTWISE_EXTRA):
            return False
        if _dtype_name(out) not in rule.dtypes or out.numel() == 0:
            return False
        for a in n.inputs:
            if a.__class__ is Value:
                if _dtype_name(a) not in rule.dtypes or a.device != out.device:
                    return False
            elif a.__class__ is list:
                return False
            elif not isinstance(a.value if isinstance(a, Lit) else a, _NUM):
                return False
        if (
            n.name == "cast"
            and _dtype_name(out) == "bool"
            and n.inputs[0].__class__ is Value
            and _dtype_name(n.inputs[0]) not in rule.dtypes
        ):
            return False
        return rule.attrs_supported(n.name, n.attrs)

    def reduction_dims(self, n) -> int:
        """Number of trailing dims a fusible sum/mean reduces (0: not fusible)."""
        if not self.reductions or n.name not in self.reduction_ops or n.has_side_effects or len(n.inputs) != 1:
            return 0
        x = n.inputs[0]
        if x.__class__ is not Value or _dtype_name(x) not in ("float32", "float64") or x.ndim == 0:
            return 0
        rule = self.rule(x)
        if rule is None or n.name not in rule.reductions or _dtype_name(x) not in rule.dtypes:
            return 0
        if n.outputs[0].dtype is not x.dtype:
            return 0
        dim = n.attrs.get("dim")
        nd = x.ndim
        dims = sorted({d % nd for d in (range(nd) if dim is None else dim)})
        r = len(dims)
        if r == 0 or dims != list(range(nd - r, nd)):
            return 0
        return r

    # -- grouping -------------------------------------------------------------------------------
    def _convex(self, members: list) -> bool:
        mask = 0
        for m in members:
            mask |= 1 << self.pos[m]
        mset = set(members)
        for m in members:
            for d in self.deps[m]:
                if d not in mset and self.anc[d] & mask:
                    return False
        return True

    def _join(self, n, gids: list, shape, reduce: int = 0) -> bool:
        for cand in ([gids] if len(gids) > 1 else []) + [[g] for g in gids]:
            members = [m for g in cand for m in self.groups[g]["nodes"]] + [n.id]
            if len(members) > self.max_nodes:
                continue
            red = {self.groups[g]["reduce"] for g in cand} | ({reduce} if reduce else set())
            red.discard(0)
            if len(red) > 1 or not self._convex(members):
                continue
            g0 = cand[0]
            for g in cand[1:]:
                for m in self.groups.pop(g)["nodes"]:
                    self.group_of[m] = g0
            self.groups[g0]["nodes"] = members
            self.groups[g0]["reduce"] = red.pop() if red else 0
            self.group_of[n.id] = g0
            return True
        return False

    def find_groups(self) -> list:
        next_id = 0
        for n in self.ir.nodes:
            if self.elementwise(n):
                shape = n.outputs[0].shape
                gids = []
                for v in n.input_values():
                    p = v.producer
                    g = self.group_of.get(p.id) if p is not None else None
                    if (
                        g is not None
                        and g not in gids
                        and self.groups[g]["shape"] == shape
                        and self.by_id[p.id].name not in self.reduction_ops
                        and self.phase[p.id] == self.phase[n.id]
                    ):
                        gids.append(g)
                if gids and self._join(n, gids, shape):
                    continue
                self.groups[next_id] = {"nodes": [n.id], "shape": shape, "reduce": 0}
                self.group_of[n.id] = next_id
                next_id += 1
                continue
            r = self.reduction_dims(n)
            if r:
                p = n.inputs[0].producer
                g = self.group_of.get(p.id) if p is not None else None
                if (
                    g is not None
                    and self.groups[g]["shape"] == n.inputs[0].shape
                    and self.by_id[p.id].name not in self.reduction_ops
                ):
                    self._join(n, [g], n.inputs[0].shape, r)
        out = []
        for g in self.groups.values():
            nodes = self._trim([self.by_id[i] for i in sorted(g["nodes"], key=self.pos.__getitem__)])
            if not any(n.name in self.reduction_ops for n in nodes):
                g["reduce"] = 0
            if len(nodes) < self.min_nodes:
                continue
            if int(np.prod(g["shape"])) < self.min_elements:
                continue
            out.append((nodes, g["shape"], g["reduce"]))
        return out

    def _short_outputs(self, nodes: list) -> int:
        ids = {n.id for n in nodes}
        short = 0
        for n in nodes:
            o = n.outputs[0]
            us = self.users.get(o.id, ())
            if (
                o.id not in self.roots
                and any(u.id not in ids for u in us)
                and all(self.phase[u.id] == self.phase[n.id] for u in us)
            ):
                short += 1
        return short

    def _trim(self, nodes: list) -> list:
        """The longest run of consecutive members (dropping members from either end keeps a group
        convex) with at most ``fusion.max_outputs`` short-lived outputs (read outside it in the same
        phase; values saved for the backward pass do not count): they would all be alive at once."""
        k = len(nodes)
        if self._short_outputs(nodes) <= self.max_outputs:
            return nodes
        for length in range(k - 1, 1, -1):
            for i in range(k - length + 1):
                if self._short_outputs(nodes[i : i + length]) <= self.max_outputs:
                    return nodes[i : i + length]
        return nodes[:1]

    def _source(self, v: Value) -> Value:
        """The value a member reads: through an ``expand`` (a broadcast view) to its input."""
        p = v.producer
        if p is not None and p.name == "expand" and not p.has_side_effects and p.inputs[0].__class__ is Value:
            u = p.inputs[0]
            rule = self.rule(u)
            if rule is not None and _dtype_name(u) in rule.dtypes and u.device == v.device:
                return u
        return v

    # -- rewriting ------------------------------------------------------------------------------
    def program(self, nodes: list, shape: tuple, reduce: int, users: dict, roots: set):
        idx = {}  # value id -> instruction index
        ids = {n.id for n in nodes}
        inputs, in_index, instrs, outputs, out_values = [], {}, [], [], []
        for n in nodes:
            args = []
            for a in n.inputs:
                if a.__class__ is Value:
                    if a.id in idx:
                        args.append(("t", idx[a.id]))
                        continue
                    src = self._source(a) if n.name not in self.reduction_ops else a
                    k = in_index.get(src.id)
                    if k is None:
                        k = in_index[src.id] = len(inputs)
                        inputs.append(src)
                    args.append(("i", k))
                else:
                    args.append(("c", a.value if isinstance(a, Lit) else a))
            o = n.outputs[0]
            idx[o.id] = len(instrs)
            instrs.append((n.name, tuple(args), tuple(sorted(n.attrs.items())), _dtype_name(o)))
            outside = o.id in roots or any(u.id not in ids for u in users.get(o.id, ()))
            if outside or n.name in self.reduction_ops:
                outputs.append(idx[o.id])
                out_values.append(o)
        prog = FusedProgram(
            tuple(shape), tuple((tuple(v.shape), _dtype_name(v)) for v in inputs), tuple(instrs), tuple(outputs), reduce
        )
        return prog, inputs, out_values


def fusion(ir, config=None):
    """Fuse groups of elementwise nodes into ``fused_elementwise`` nodes (see the module docstring)."""
    from flow.graph.passes.dce import dce
    from flow.registry import get_op

    f = _Fuser(ir, config)
    found = f.find_groups()
    if not found:
        _note(ir, "no groups to fuse" if f.rules else "no device registered a fusion rule")
        return ir
    users = ir.users()
    roots = {v.id for v in ir.live_roots()}
    groups, built, notes = _lower_by_device(f, found, users, roots)
    if not groups:
        _note(ir, "; ".join(notes))
        return ir
    op = get_op(FUSED_OP)
    mapping, dead, key, members = {}, set(), {}, {}
    n_before = len(ir.nodes)
    for (nodes, _, _), (prog, inputs, out_values) in zip(groups, built):
        last = nodes[-1]
        tags = {"phase": f.phase[last.id], "fused": [n.name for n in nodes]}
        if len(out_values) > 1:
            tags["multi_output"] = True
        node = ir.make_node(
            op, [list(inputs)], {"program": prog}, [v.meta for v in out_values], last.loc, last.scope, tags
        )
        for o, new in zip(out_values, node.outputs):
            mapping[o.id] = new
            inherit_attrs(o, new)
        dead.update(n.id for n in nodes)
        key[node.id] = max(f.pos[n.id] for n in nodes)
        members[node.id] = [n.id for n in nodes]
        ir.nodes.append(node)
    ir.replace_uses(mapping)
    _reorder(ir, f, dead, key, members)
    dce(ir, config)
    _note(
        ir,
        "; ".join(
            [
                f"{len(groups)} groups: {sum(len(g[0]) for g in groups)} nodes -> {len(groups)} fused "
                f"nodes ({n_before} -> {len(ir.nodes)} nodes)"
            ]
            + notes
        ),
    )
    return ir


def _lower_by_device(f: _Fuser, found: list, users: dict, roots: set) -> tuple[list, list, list]:
    """Programs of the groups, lowered by each device's fusion rule (all of a device's programs at
    once). A device whose rule is unavailable or whose lowering fails keeps its groups unfused."""
    by_dev: dict = {}
    for g in found:
        by_dev.setdefault(g[0][-1].outputs[0].device.type, []).append(g)
    groups, built, notes = [], [], []
    for dev, gs in by_dev.items():
        rule = f.rules[dev]
        why = rule.unavailable()
        if why is None and rule.lower is None:
            why = "the device's fusion rule has no lowering"
        if why is not None:
            notes.append(f"{len(gs)} groups on {dev} left unfused: {why}")
            continue
        progs = [f.program(nodes, shape, red, users, roots) for nodes, shape, red in gs]
        try:
            rule.lower([p[0] for p in progs])
        except Exception as e:  # never fail a compilation over fusion: run the ops unfused
            notes.append(f"{len(gs)} groups on {dev} left unfused: {e if isinstance(e, RuntimeError) else repr(e)}")
            continue
        groups += gs
        built += progs
    return groups, built, notes


def _reorder(ir, f: _Fuser, dead: set, key: dict, members: dict) -> None:
    """Drop the fused members and order the nodes topologically, keeping the original order as far
    as possible (a fused node takes the place of its last member)."""
    nodes = [n for n in ir.nodes if n.id not in dead]
    pos = {n.id: key.get(n.id, f.pos.get(n.id, 0)) for n in nodes}
    producer = {}
    for n in nodes:
        for o in n.outputs:
            producer[o.id] = n.id
    group_node = {}  # member id -> fused node id
    for fid, ms in members.items():
        for m in ms:
            group_node[m] = fid
    preds = {n.id: set() for n in nodes}
    for n in nodes:
        for v in n.input_values():
            p = producer.get(v.id)
            if p is not None:
                preds[n.id].add(p)
        for d in f.deps.get(n.id, ()):  # anti-dependencies of surviving nodes
            d = group_node.get(d, d)
            if d in preds and d != n.id:
                preds[n.id].add(d)
    succ = {n.id: [] for n in nodes}
    indeg = {}
    for nid, ps in preds.items():
        indeg[nid] = len(ps)
        for p in ps:
            succ[p].append(nid)
    by_id = {n.id: n for n in nodes}
    ready = [(pos[i], i) for i, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(by_id[i])
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, (pos[s], s))
    if len(order) != len(nodes):  # cannot happen for convex groups; keep a valid IR regardless
        raise RuntimeError("fusion: the fused graph has a cycle")
    ir.nodes = order


def register(registry) -> None:
    registry.register_pass(
        "fusion",
        fusion,
        after=("constant_folding", "simplify", "cse", "dce", "activation_checkpointing", "amp"),
        before=("memory_planning",),
    )
