"""``flow.onnx.export``: write a module's forward as an ONNX model, with ``torch.onnx.export``'s signature.

The forward runs once under flow's graph tracer (:func:`flow.graph.tracer.trace`, in eval mode,
without autograd) into a :class:`~flow.graph.ir.GraphIR`; each node becomes ONNX nodes through the
rule of its op in the rule table ``"onnx_export"`` (see :mod:`flow.onnx`). Parameters and buffers
become initializers; nodes whose inputs are all known at export time are computed by flow and
stored as initializers (``do_constant_folding``). With ``dynamic_axes`` the forward is traced a
second time with other sizes on those axes: the dims that change mark which shapes the ONNX graph
must compute at run time (a shape baked into the trace cannot follow a new batch size).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from flow.onnx._context import ExportContext, OnnxExportError, onnx_dtype

TABLE = "onnx_export"
PLUGIN = "flow.onnx"
MIN_OPSET, MAX_OPSET = 17, 21
_IR_VERSION = 9  # what onnxruntime >= 1.18 reads for opsets 17..21


def _import_onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError(
            "flow.onnx.export needs the 'onnx' package: pip install 'flow-core[onnx]' (onnx, onnxruntime)"
        ) from None
    return onnx


def export_table():
    """The ``"onnx_export"`` rule table, declared (by registering the ``flow.onnx`` plugin) on first use."""
    import flow.plugins
    from flow.registry import REGISTRY

    if TABLE not in REGISTRY.tables:
        from flow.onnx import plugin

        flow.plugins.register(plugin, name=PLUGIN)
    return REGISTRY.get_table(TABLE)


# -- argument checks ---------------------------------------------------------------------
def _check_args(model, args, f, input_names, output_names, dynamic_axes, opset_version) -> tuple:
    from flow._tensor import Tensor
    from flow.nn.modules.module import Module

    if not isinstance(model, Module):
        raise TypeError(f"flow.onnx.export: 'model' must be a flow.nn.Module, got {type(model).__name__}")
    args = (args,) if isinstance(args, Tensor) else args
    if not isinstance(args, (tuple, list)) or not args:
        raise TypeError(
            f"flow.onnx.export: 'args' must be a Tensor or a non-empty tuple of Tensors, got {type(args).__name__}"
        )
    for i, a in enumerate(args):
        if not isinstance(a, Tensor):
            raise TypeError(f"flow.onnx.export: args[{i}] must be a Tensor, got {type(a).__name__}")
    if not isinstance(f, (str, os.PathLike)) and not callable(getattr(f, "write", None)):
        raise TypeError(f"flow.onnx.export: 'f' must be a file path or a binary file object, got {type(f).__name__}")
    if isinstance(opset_version, bool) or not isinstance(opset_version, int):
        raise TypeError(f"flow.onnx.export: 'opset_version' must be an int, got {type(opset_version).__name__}")
    if not MIN_OPSET <= opset_version <= MAX_OPSET:
        raise ValueError(
            f"flow.onnx.export: opset_version {opset_version} is not supported (supported: {MIN_OPSET}..{MAX_OPSET})"
        )
    for what, names in (("input_names", input_names), ("output_names", output_names)):
        if names is not None and (isinstance(names, str) or not all(isinstance(n, str) and n for n in names)):
            raise TypeError(f"flow.onnx.export: '{what}' must be a list of non-empty strings, got {names!r}")
    if input_names is not None and len(input_names) > len(args):
        raise ValueError(f"flow.onnx.export: {len(input_names)} input_names given for {len(args)} inputs")
    if dynamic_axes is not None and not isinstance(dynamic_axes, Mapping):
        raise TypeError(f"flow.onnx.export: 'dynamic_axes' must be a dict, got {type(dynamic_axes).__name__}")
    return tuple(args)


def _axes_of(name: str, spec) -> dict[int, str]:
    """``{axis: dim name}`` of one ``dynamic_axes`` entry (a list of axes gets torch's default names)."""
    if isinstance(spec, Mapping):
        out = {}
        for ax, dn in spec.items():
            if isinstance(ax, bool) or not isinstance(ax, int) or not isinstance(dn, str):
                raise TypeError(
                    f"flow.onnx.export: dynamic_axes['{name}'] must map int axes to str names, got {spec!r}"
                )
            out[ax] = dn
        return out
    if isinstance(spec, (list, tuple)) and all(isinstance(a, int) and not isinstance(a, bool) for a in spec):
        return {ax: f"{name}_dynamic_axes_{i + 1}" for i, ax in enumerate(spec)}
    raise TypeError(f"flow.onnx.export: dynamic_axes['{name}'] must be a list of axes or a dict, got {spec!r}")


# -- tracing -----------------------------------------------------------------------------
def _trace(model, args):
    from flow.autograd.grad_mode import no_grad
    from flow.graph.tracer import trace

    def forward(*a):
        return model(*a)

    with no_grad():
        # the model's own forward is the "entry" line error messages name (not this wrapper)
        entry = tuple(c for c in (getattr(type(model).forward, "__code__", None), forward.__code__) if c is not None)
        return trace(forward, args, {}, name=type(model).__name__, modules={"": model}, entry_codes=entry)


def _resized(t, axes: dict[int, int]):
    """``t`` with each of ``axes`` (axis -> new size) resized by repeating its entries (valid indices stay valid)."""
    import flow

    a = t.numpy()
    for ax, n in axes.items():
        a = np.take(a, np.arange(n) % a.shape[ax], axis=ax)
    return flow.from_numpy(np.ascontiguousarray(a))


def _second_shapes(ir, model, args, in_axes: dict[int, dict[int, str]]) -> tuple[dict, dict]:
    """Trace again with every dynamic input axis resized (the same size for the same dim name)."""
    bump: dict[str, int] = {}
    new_args = []
    sizes: dict[tuple, int] = {}
    for i, a in enumerate(args):
        axes = {}
        for ax, dn in in_axes.get(i, {}).items():
            if dn not in bump:
                bump[dn] = a.shape[ax] + 3 + 2 * len(bump)  # distinct sizes tell the dim names apart
            axes[ax] = bump[dn]
            sizes[(i, ax)] = bump[dn]
        new_args.append(_resized(a, axes) if axes else a)
    try:
        ir2 = _trace(model, tuple(new_args))
    except Exception as e:  # the axes the caller called dynamic cannot change size independently
        raise OnnxExportError(
            f"ONNX export: the forward fails when the dynamic axes change size ({type(e).__name__}: {e}); "
            "check dynamic_axes (axes that must be equal need the same dim name)"
        ) from e
    if [n.name for n in ir.nodes] != [n.name for n in ir2.nodes]:
        raise OnnxExportError(
            "ONNX export: the forward runs other ops when the dynamic axes change size (Python control flow "
            "on shapes); export without dynamic_axes"
        )
    shapes2 = {}
    for v1, v2 in zip(ir.inputs, ir2.inputs):
        shapes2[v1.id] = v2.shape
    for n1, n2 in zip(ir.nodes, ir2.nodes):
        for v1, v2 in zip(n1.input_values(), n2.input_values()):
            shapes2[v1.id] = v2.shape
        for v1, v2 in zip(n1.outputs, n2.outputs):
            shapes2[v1.id] = v2.shape
    return shapes2, sizes


# -- constant folding --------------------------------------------------------------------
def _fold(ir, ctx: ExportContext, live: list) -> None:
    """Compute in flow every node whose tensor inputs are all constants or parameters; its outputs
    become constants. Outputs that depend on a dynamic axis stay computed by the graph."""
    import flow
    from flow._dispatch import call
    from flow.autograd.grad_mode import no_grad
    from flow.graph.ir import Value

    for node in live:
        vals = list(node.input_values())
        if node.has_side_effects or not vals or any(ctx.array(v) is None for v in vals):
            continue
        if any(ctx.is_dynamic(o) for o in node.outputs):
            continue
        args = []
        for a in node.inputs:
            if isinstance(a, Value):
                args.append(flow.from_numpy(np.ascontiguousarray(ctx.array(a))))
            elif isinstance(a, list):
                args.append([flow.from_numpy(np.ascontiguousarray(ctx.array(v))) for v in a])
            else:
                args.append(a.value)
        with no_grad():
            res = call(node.op, *args, **node.attrs)
        res = res if isinstance(res, (tuple, list)) else (res,)
        for o, r in zip(node.outputs, res):
            ir.constants[o.id] = np.array(r.numpy())
            o.kind = "const"
        node.tags["onnx_folded"] = True


def _live_nodes(ir) -> tuple[list, set]:
    """The nodes the outputs depend on, in order, and the ids of every value they read."""
    used = {v.id for v in ir.outputs if hasattr(v, "id")}
    live = []
    for node in reversed(ir.nodes):
        if any(o.id in used for o in node.outputs):
            live.append(node)
            used.update(v.id for v in node.input_values())
    return live[::-1], used


# -- the export --------------------------------------------------------------------------
def export(
    model,
    args,
    f,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_axes: Mapping[str, Any] | None = None,
    opset_version: int = 17,
    do_constant_folding: bool = True,
    export_params: bool = True,
    verbose: bool = False,
):
    """Export ``model(*args)`` to the ONNX file ``f`` (a path or a binary file object), as ``torch.onnx.export``.

    ``input_names`` / ``output_names`` name the graph's inputs and outputs (default ``input_0`` ...,
    ``output_0`` ...); ``dynamic_axes`` maps such a name to the axes whose size may change at run
    time (a list of axes, or ``{axis: dim name}``), written as ONNX ``dim_param``;
    ``export_params=False`` makes parameters and buffers graph inputs instead of initializers.
    The model runs in eval mode (its training flags are restored afterwards). Returns the checked
    ``onnx.ModelProto``.
    """
    onnx = _import_onnx()
    from onnx import helper

    from flow.graph.ir import Value

    args = _check_args(model, args, f, input_names, output_names, dynamic_axes, opset_version)
    table = export_table()
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        ir = _trace(model, args)
        n_out = len(ir.outputs)
        in_names = list(input_names or []) + [f"input_{i}" for i in range(len(input_names or []), len(args))]
        out_names = list(output_names or []) + [f"output_{i}" for i in range(len(output_names or []), n_out)]
        if len(out_names) > n_out:
            raise ValueError(f"flow.onnx.export: {len(output_names)} output_names given for {n_out} outputs")
        in_axes, out_axes = {}, {}
        for key, spec in (dynamic_axes or {}).items():
            axes = _axes_of(key, spec)
            if key in in_names:
                i = in_names.index(key)
                nd = len(args[i].shape)
                in_axes[i] = axes
            elif key in out_names:
                i = out_names.index(key)
                nd = ir.outputs[i].ndim if isinstance(ir.outputs[i], Value) else 0
                out_axes[i] = axes
            else:
                raise ValueError(
                    f"flow.onnx.export: dynamic_axes names '{key}', which is neither an input nor an output name "
                    f"(inputs: {in_names}, outputs: {out_names})"
                )
            bad = [a for a in axes if not 0 <= a < nd]
            if bad:
                raise ValueError(f"flow.onnx.export: dynamic_axes['{key}'] has axes {bad} out of range for {nd} dims")
        shapes2, sizes = _second_shapes(ir, model, args, in_axes) if in_axes else ({}, {})
    finally:
        for m, t in modes:
            m.training = t

    ctx = ExportContext(ir, opset_version, export_params, shapes2)
    ctx._used.update(out_names)  # temporaries never take a name the caller gave an output
    inputs = []
    dim_names: dict[tuple, str] = {}  # (size, size in trace 2) of a dynamic input dim -> its name
    for i, v in enumerate(ir.inputs):
        ctx.reserve(v, in_names[i])
        dims: list = list(v.shape)
        for ax, dn in in_axes.get(i, {}).items():
            dims[ax] = dn
            ctx.input_dims.append((in_names[i], ax, v.shape[ax], sizes[(i, ax)]))
            dim_names[(v.shape[ax], sizes[(i, ax)])] = dn
        inputs.append(helper.make_tensor_value_info(in_names[i], onnx_dtype(v.dtype), dims))
    for v in ir.outputs:
        if not isinstance(v, Value):
            raise OnnxExportError(f"ONNX export: the model returns a non-tensor value {v!r}; ONNX outputs are tensors")
    live, used = _live_nodes(ir)
    ctx.used = used
    if do_constant_folding:
        _fold(ir, ctx, live)
        live, used = _live_nodes(ir)
        ctx.used = used
    for v in ir.states:  # parameters in the module's order (initializers, or inputs after the model's)
        if v.id in used and v.kind == "state":
            ctx.name(v)
    nodes: list = []
    for node in live:
        if node.tags.get("onnx_folded"):
            continue
        rule = table.get(node.name)
        if rule is None:
            where = f" (called at {node.loc.short()})" if node.loc is not None else ""
            raise OnnxExportError(
                f"ONNX export: op '{node.name}'{where} has no rule in the '{TABLE}' table; add one with "
                f"registry.register_rule('{TABLE}', '{node.name}', rule) in a plugin's flow_register_rules, where "
                "rule(node, ctx) returns the ONNX nodes (see flow.onnx)"
            )
        ctx.node = node
        nodes.extend(rule(node, ctx))
    ctx.node = None
    outputs = []
    seen: set = set()
    for i, v in enumerate(ir.outputs):
        src = ctx.name(v)
        nodes.append(helper.make_node("Identity", [src], [out_names[i]]))  # the output under its own name
        if out_names[i] in seen or out_names[i] in in_names:
            raise ValueError(f"flow.onnx.export: the name '{out_names[i]}' is given to two graph values")
        seen.add(out_names[i])
        dims = [
            dim_names.get((a, b), f"{out_names[i]}_dim_{j}") if a != b else a
            for j, (a, b) in enumerate(zip(v.shape, ctx.dyn(v)))
        ]
        for ax, dn in out_axes.get(i, {}).items():
            dims[ax] = dn
        outputs.append(helper.make_tensor_value_info(out_names[i], onnx_dtype(v.dtype), dims))
    for k, n in enumerate(nodes):
        if not n.name:
            n.name = f"{n.op_type}_{k}"
    graph = helper.make_graph(nodes, ir.name, inputs + ctx.graph_inputs, outputs, initializer=ctx.initializers)
    mp = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset_version)], producer_name="flow")
    mp.ir_version = _IR_VERSION
    onnx.checker.check_model(mp)
    if verbose:
        print(onnx.printer.to_text(mp.graph))
    if isinstance(f, (str, os.PathLike)):
        onnx.save(mp, os.fspath(f))
    else:
        f.write(mp.SerializeToString())
    return mp
