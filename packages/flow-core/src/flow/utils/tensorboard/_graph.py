"""``add_graph``: flow's graph IR as TensorBoard's ``GraphDef``.

A module is traced with flow's graph tracer (:func:`flow.graph.tracer.trace`, forward only, under
``no_grad``); an ``nn.Graph`` or ``flow.compile``d function gives the optimised IR of its compiled
step (forward, backward and optimizer update). Each IR node becomes a ``NodeDef`` named
``<module scope>/<op>_<id>`` (TensorBoard folds names on ``/`` into collapsible groups, so every
module is one box), with its op name, its inputs, ``_output_shapes`` (the edge labels TensorBoard
draws) and an ``attr`` string holding the op's attributes and output dtypes. Graph inputs, states
(parameters, buffers, optimizer states), host values, constants, outputs and state updates are
nodes too.
"""

from __future__ import annotations

from typing import Any

from flow.graph.ir import GraphIR, Lit, Value

_STATE_OPS = {"param": "Parameter", "buffer": "Buffer", "optimizer": "OptimizerState", "captured": "Captured"}


def _path(dotted: str) -> str:
    return dotted.replace(".", "/")


def _shape_proto(shape: tuple):
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

    return TensorShapeProto(dim=[TensorShapeProto.Dim(size=s if isinstance(s, int) else -1) for s in shape])


def _node(name: str, op: str, inputs: list[str], outputs: list[Value], attr: str = "", device: str = ""):
    from tensorboard.compat.proto.attr_value_pb2 import AttrValue
    from tensorboard.compat.proto.node_def_pb2 import NodeDef

    attrs = {"_output_shapes": AttrValue(list=AttrValue.ListValue(shape=[_shape_proto(v.shape) for v in outputs]))}
    if attr:
        attrs["attr"] = AttrValue(s=attr.encode("utf-8"))
    return NodeDef(name=name, op=op, input=inputs, attr=attrs, device=device)


def _dtype(v: Value) -> str:
    return str(v.dtype).removeprefix("flow.")


def _attr_text(attrs: dict, outputs: list[Value], lits: list) -> str:
    parts = [f"{k}={v!r}" for k, v in attrs.items()]
    parts += [f"arg{i}={a.value!r}" for i, a in lits]
    parts.append("dtype=" + ",".join(_dtype(v) for v in outputs))
    return "{" + ", ".join(parts) + "}"


def ir_to_graph_def(ir: GraphIR):
    """A ``tensorboard.compat.proto.graph_pb2.GraphDef`` of ``ir`` (see the module docstring)."""
    from tensorboard.compat.proto.graph_pb2 import GraphDef
    from tensorboard.compat.proto.versions_pb2 import VersionDef

    names: dict[int, str] = {}  # value id -> the tensor's name in the GraphDef ("node" or "node:k")
    nodes = []
    for v in ir.inputs:
        names[v.id] = f"input/{v.name or f'input{v.id}'}"
        nodes.append(_node(names[v.id], "IO Node", [], [v], f"{{dtype={_dtype(v)}}}", str(v.device)))
    for v in ir.states:
        spec = ir.state_specs.get(v.id)
        kind = spec.kind if spec is not None else "captured"
        names[v.id] = _path(v.name) if v.name else f"state/state_{v.id}"
        nodes.append(_node(names[v.id], _STATE_OPS.get(kind, "State"), [], [v], f"{{dtype={_dtype(v)}}}"))
    for v in ir.hosts:
        names[v.id] = f"host/{_path(v.name) or v.id}"
        nodes.append(_node(names[v.id], "HostValue", [], [v], f"{{dtype={_dtype(v)}}}"))
    for v in (c for n in ir.nodes for c in n.input_values()):
        if v.kind == "const" and v.id not in names:
            names[v.id] = f"constant/const_{v.id}"
            nodes.append(_node(names[v.id], "Constant", [], [v], f"{{dtype={_dtype(v)}}}"))
    for n in ir.nodes:
        name = f"{_path(n.scope)}/{n.name}_{n.id}" if n.scope else f"{n.name}_{n.id}"
        for k, out in enumerate(n.outputs):
            names[out.id] = name if k == 0 else f"{name}:{k}"
        ins = [names.get(v.id, f"missing_{v.id}") for v in n.input_values()]
        lits = [(i, a) for i, a in enumerate(n.inputs) if isinstance(a, Lit)]
        device = str(n.outputs[0].device) if n.outputs else ""
        nodes.append(_node(name, n.name, ins, n.outputs, _attr_text(n.attrs, n.outputs, lits), device))
    for i, v in enumerate(ir.outputs):
        if isinstance(v, Value):
            nodes.append(_node(f"output/output{i}", "IO Node", [names[v.id]], [v], f"{{dtype={_dtype(v)}}}"))
    for state, new in ir.updates:
        if new.id in names and state.id in names:
            nodes.append(_node(f"update/{names[state.id]}", "StateUpdate", [names[new.id]], [new]))
    # producer 22 is what torch's add_graph writes (TensorFlow 1.x's GraphDef version)
    return GraphDef(node=nodes, versions=VersionDef(producer=22))


def _as_tuple(inputs: Any) -> tuple:
    if inputs is None:
        return ()
    return tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


def trace_module(module, inputs: tuple) -> GraphIR:
    """The forward pass of ``module`` on ``inputs`` as IR (tracing changes no state of the module)."""
    import flow
    from flow.graph.tracer import trace

    name = type(module).__name__
    with flow.no_grad():
        return trace(
            module,
            inputs,
            {},
            name=name,
            entry_codes=(type(module).forward.__code__,),
            modules={name: module},
        )


def graph_ir_of(model: Any, input_to_model: Any = None) -> GraphIR:
    """The IR ``add_graph`` draws for ``model``: a GraphIR, an ``nn.Graph`` / ``flow.compile``d
    function (compiled for ``input_to_model`` when given, else its last compiled step) or a module."""
    from flow._tensor import Tensor
    from flow.graph.compiler import Runner
    from flow.graph.tracer import flatten
    from flow.nn.modules.module import Module

    inputs = _as_tuple(input_to_model)
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"add_graph: input_to_model[{i}] must be a flow Tensor, got {type(t).__name__}")
    if isinstance(model, GraphIR):
        return model
    if isinstance(model, Runner):
        if not inputs:
            return model.ir  # raises FlowError when it has not been compiled yet
        leaves: list = []
        tree = flatten((inputs, {}), leaves)
        # compiling (not running) the step: no optimizer update happens, and the cached plan is reused
        return model._step_for(inputs, {}, leaves, tree).ir
    if isinstance(model, Module):
        if getattr(model, "_orig_mod", None) is not None and isinstance(model._orig_mod, Module):
            model = model._orig_mod  # flow.compile(module): draw the module it compiles
        if not inputs:
            raise ValueError(f"add_graph: tracing a module ({type(model).__name__}) needs input_to_model")
        return trace_module(model, inputs)
    raise TypeError(
        f"add_graph: model must be a flow.nn.Module, a flow.nn.Graph, a flow.compile'd function or a GraphIR, "
        f"got {type(model).__name__}"
    )
