"""Splitting a traced joint forward+backward graph into a forward graph and a backward graph.

``flow.compile(module)`` traces ``joint(*inputs, *grad_outputs)``, which runs the module and then
``flow.autograd.grad`` of its outputs, into one :class:`~flow.graph.ir.GraphIR` (the AOT-autograd
scheme). :func:`partition` cuts it along the data dependence on the ``grad_outputs`` inputs:

* the **forward** part is every node that does not depend on a grad output. Its outputs are the
  module's outputs followed by the node values the backward part reads ("saved" values); it keeps
  the joint graph's state inputs, host values and state updates (BatchNorm's running statistics),
  and its random ops (dropout's ``bernoulli_mask``) draw when the forward runs, in eager order;
* the **backward** part is the rest. Its inputs are the saved values (node values of the forward,
  and the graph inputs and states the backward reads, which the caller passes along without
  routing them through the forward plan) followed by the grad outputs; its outputs are the
  gradients. It has no state: it reads nothing live, only what the forward handed over.

The backward part is a fresh IR (copied nodes and values), so lowering either part never touches
the other's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flow.errors import FlowError
from flow.graph.ir import GraphIR, Lit, Node, Value


@dataclass
class Partition:
    """The two halves of a joint graph and how values travel from one to the other."""

    forward: GraphIR
    backward: GraphIR
    n_outputs: int  # leading forward outputs that are the module's outputs
    # what the backward's leading inputs are, in order: ("out", k) the forward's output n_outputs + k,
    # ("input", i) the joint graph's input i, ("state", j) its state j
    saved: list = field(default_factory=list)


def _skip_flag(n: Node):
    return n.tags.get("skip_if")


def partition(ir: GraphIR, n_inputs: int, n_outputs: int) -> Partition:
    """Split ``ir`` (inputs: ``n_inputs`` forward inputs then the grad outputs; outputs: ``n_outputs``
    module outputs then the gradients) into a forward and a backward :class:`GraphIR`."""
    grad_ids = {v.id for v in ir.inputs[n_inputs:]}
    tainted = set(grad_ids)  # value ids that depend on a grad output
    fwd_nodes: list[Node] = []
    bwd_nodes: list[Node] = []
    for n in ir.nodes:
        reads = list(n.input_values())
        flag = _skip_flag(n)
        if flag is not None:
            reads.append(flag)
        if any(v.id in tainted for v in reads):
            if flag is not None:
                raise FlowError(
                    f"flow.compile(module): the backward of the module has a conditionally skipped op "
                    f"('{n.name}'), which cannot be split into compiled forward and backward graphs"
                )
            reuse = n.tags.get("out_inplace", {})
            for o, i in n.inplace.items():
                # memory planning's reuse of a dead forward buffer is dropped (see _copy_inplace); any
                # other in-place write would mutate a buffer the forward handed over
                if reads[i].id not in tainted and reuse.get(o) != i:
                    raise FlowError(
                        f"flow.compile(module): the backward of the module writes in place into a forward "
                        f"value (op '{n.name}'); such a module cannot be split into forward and backward graphs"
                    )
            tainted.update(o.id for o in n.outputs)
            bwd_nodes.append(n)
        else:
            fwd_nodes.append(n)
    for i, v in enumerate(ir.outputs[:n_outputs]):
        if isinstance(v, Value) and v.id in tainted:
            raise FlowError(f"flow.compile(module): module output {i} depends on a gradient, which cannot be")
    for s, new in ir.updates:
        if new.id in tainted:
            raise FlowError(
                f"flow.compile(module): the state '{s.name}' is updated from a gradient inside the module; "
                "update it outside the compiled module"
            )

    # the values of the forward side the backward side reads, in first-use order
    saved_vals: list[Value] = []
    seen: set[int] = set()

    def need(v: Value) -> None:
        if v.id in tainted or v.id in seen or v.kind == "const":
            return
        seen.add(v.id)
        saved_vals.append(v)

    for n in bwd_nodes:
        for v in n.input_values():
            need(v)
    for v in ir.outputs[n_outputs:]:
        if isinstance(v, Value):
            need(v)

    _keep_saved_buffers(fwd_nodes, seen | {v.id for v in ir.outputs[:n_outputs] if isinstance(v, Value)})

    input_pos = {v.id: i for i, v in enumerate(ir.inputs[:n_inputs])}
    state_pos = {v.id: j for j, v in enumerate(ir.states)}
    saved: list = []
    fwd_extra: list[Value] = []
    for v in saved_vals:
        if v.kind == "input":
            saved.append(("input", input_pos[v.id]))
        elif v.kind == "state":
            saved.append(("state", state_pos[v.id]))
        else:  # a node's output (or a host value): the forward plan returns it
            saved.append(("out", len(fwd_extra)))
            fwd_extra.append(v)

    fwd = GraphIR(f"{ir.name}.forward")
    fwd._next = ir._next
    fwd.inputs = list(ir.inputs[:n_inputs])
    fwd.states = list(ir.states)
    fwd.state_specs = dict(ir.state_specs)
    fwd.hosts = list(ir.hosts)
    fwd.host_specs = dict(ir.host_specs)
    fwd.nodes = fwd_nodes
    fwd.outputs = list(ir.outputs[:n_outputs]) + fwd_extra
    fwd.updates = list(ir.updates)
    fwd.effects = list(ir.effects)
    fwd.blocks = dict(ir.blocks)
    fwd.meta = {k: v for k, v in ir.meta.items() if k != "output_kinds"}
    used = {v.id for n in fwd_nodes for v in n.input_values()} | {v.id for v in fwd.live_roots()}
    fwd.constants = {k: a for k, a in ir.constants.items() if k in used}

    bwd = GraphIR(f"{ir.name}.backward")
    remap: dict[int, Value] = {}
    for v in saved_vals:
        remap[v.id] = bwd.add_input(v.meta, name=v.name or f"saved%{v.id}")
    for v in ir.inputs[n_inputs:]:
        remap[v.id] = bwd.add_input(v.meta, name=v.name)

    def new(v: Value) -> Value:
        w = remap.get(v.id)
        if w is None:
            if v.kind != "const":  # cannot happen: every other forward value was saved above
                raise FlowError(f"flow.compile(module): backward value %{v.id} has no source")
            w = remap[v.id] = bwd.add_constant(ir.constants[v.id], v.dtype, v.device, v.name)
        if v.attrs:
            w.attrs.update(v.attrs)
        return w

    for n in bwd_nodes:
        ins = []
        for a in n.inputs:
            if a.__class__ is Value:
                ins.append(new(a))
            elif a.__class__ is list:
                ins.append([new(x) for x in a])
            else:
                ins.append(a if a.__class__ is Lit else Lit(a))
        c = bwd.make_node(n.op, ins, n.attrs, [o.meta for o in n.outputs], n.loc, n.scope, n.tags)
        _copy_inplace(n, c, tainted)
        for o, co in zip(n.outputs, c.outputs):
            co.attrs.update(o.attrs)
            co.name = o.name
            remap[o.id] = co
        bwd.nodes.append(c)
    bwd.outputs = [new(v) if isinstance(v, Value) else v for v in ir.outputs[n_outputs:]]
    return Partition(fwd, bwd, n_outputs, saved)


def _copy_inplace(n: Node, c: Node, tainted: set) -> None:
    """Give the backward copy ``c`` of ``n`` the in-place writes of ``n`` into backward values only.

    Memory planning ran on the joint graph, where a saved forward value may end at a backward
    node that then reuses its buffer; in the split graphs that buffer belongs to the forward's
    results (and a second backward with ``retain_graph=True`` reads it again), so such a write
    becomes an ordinary allocation."""
    flat = list(n.input_values())
    keep = {o: i for o, i in n.inplace.items() if flat[i].id in tainted}
    c.inplace = keep
    if "out_inplace" in c.tags:
        if keep:
            c.tags["out_inplace"] = dict(keep)
        else:
            del c.tags["out_inplace"]


def _keep_saved_buffers(fwd_nodes: list, handed_over: set) -> None:
    """Drop memory planning's in-place reuse of a buffer the forward hands over.

    In the joint graph a forward node can be the last reader of a value in program order although a
    backward node reads it too (lowering orders that reader first); once split, the backward reads
    the value after the whole forward ran, so the forward must leave it intact."""
    for n in fwd_nodes:
        if not n.inplace:
            continue
        flat = list(n.input_values())
        reuse = n.tags.get("out_inplace", {})
        keep = {}
        for o, i in n.inplace.items():
            if flat[i].id not in handed_over:
                keep[o] = i
            elif reuse.get(o) != i:
                raise FlowError(
                    f"flow.compile(module): op '{n.name}' writes in place into a value the backward reads; "
                    "such a module cannot be split into forward and backward graphs"
                )
        if len(keep) != len(n.inplace):
            n.inplace = keep
            if keep:
                n.tags["out_inplace"] = dict(keep)
            else:
                n.tags.pop("out_inplace", None)
