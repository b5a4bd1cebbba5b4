"""Output metas against the ops' meta rules: re-inference after a rewrite, and the check ``verify`` runs.

Every node's outputs got their shapes and dtypes from its op's meta rule when it was recorded. A pass
that changes what a node reads (flow-amp's AMP pass casting inputs to float16, a pass changing a
shape) calls :func:`infer_metas` to propagate the consequences through the rest of the graph;
:func:`check_metas` (run by ``GraphIR.verify`` after every pass) fails when a node's recorded outputs
no longer match what its meta rule says (shape, dtype or device). Results are remembered per node
(its inputs' and outputs' metas and its attributes), so the check re-runs only the rules of nodes a
pass touched.
"""

from __future__ import annotations

import numpy as np

from flow.errors import FlowError
from flow.graph.ir import Lit, Value


def _meta_args(node) -> list:
    args = []
    for a in node.inputs:
        if a.__class__ is Value:
            args.append(a.meta)
        elif a.__class__ is list:
            args.append([v.meta for v in a])
        else:
            x = a.value if isinstance(a, Lit) else a
            # as the dispatcher gives them to meta rules (flow._dispatch._meta_inputs): NumPy scalars
            # are Python numbers again, so only tensors look like tensors
            args.append(x.item() if isinstance(x, np.generic) else x)
    return args


def _where(node) -> str:
    loc = f" at {node.loc.short()}" if node.loc is not None else ""
    return f"node {node.id} ({node.name}){loc}"


def node_metas(node) -> tuple:
    """What the node's op's meta rule gives for its current inputs and attributes: one meta per output."""
    try:
        out = node.op.meta(*_meta_args(node), **node.attrs)
    except Exception as e:
        raise FlowError(
            f"graph IR: {_where(node)}: its meta rule rejects its inputs "
            f"({', '.join(v.type_str() for v in node.input_values())}): {e}"
        ) from e
    metas = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(metas) != len(node.outputs):
        raise FlowError(f"graph IR: {_where(node)} has {len(node.outputs)} outputs, its meta rule gives {len(metas)}")
    return metas


def _key(node) -> tuple:
    ins = tuple((v.id, v.shape, v.dtype, v.device) for v in node.input_values())
    lits = tuple(id(a) for a in node.inputs if a.__class__ is Lit)
    outs = tuple((o.shape, o.dtype, o.device) for o in node.outputs)
    return ins, lits, outs, id(node.attrs), len(node.attrs)


def check_metas(ir) -> None:
    """Raise :class:`FlowError` naming the first node whose recorded output shape or dtype differs
    from its meta rule's."""
    for n in ir.nodes:
        key = _key(n)
        if n._meta_key == key:
            continue
        for k, (o, m) in enumerate(zip(n.outputs, node_metas(n))):
            if tuple(o.shape) != tuple(m.shape) or o.dtype is not m.dtype:
                raise FlowError(
                    f"graph IR: {_where(n)}: output {k} (%{o.id}) is recorded as {o.type_str()}, "
                    f"its meta rule gives {Value(-1, m.shape, m.dtype, m.device, 'node').type_str()}; "
                    "a pass that changes dtypes or shapes must call ir.infer_metas()"
                )
            md = getattr(m, "device", None)
            if md is not None and o.device is not None and str(o.device) != str(md):
                raise FlowError(
                    f"graph IR: {_where(n)}: output {k} (%{o.id}) is recorded on device {o.device}, "
                    f"its meta rule gives {md}; a pass that moves values must call ir.infer_metas()"
                )
        n._meta_key = key


def mark_node_checked(node) -> None:
    """Record the node's current metas as agreeing with its meta rule (they were just made by it)."""
    node._meta_key = _key(node)


def mark_checked(ir) -> None:
    """Record every node's current metas as agreeing with its meta rule, without running the rules
    (for an IR whose metas just came from them: the tracer's)."""
    for n in ir.nodes:
        n._meta_key = _key(n)


def infer_metas(ir) -> int:
    """Recompute every node's output shapes, dtypes and devices from its meta rule, in order (the
    values are updated in place, so readers see the new metas); returns the number of values that
    changed. Raises :class:`FlowError` naming the node whose meta rule rejects its new inputs."""
    changed = 0
    for n in ir.nodes:
        for o, m in zip(n.outputs, node_metas(n)):
            shape = tuple(m.shape)
            if o.shape != shape or o.dtype is not m.dtype or (m.device is not None and o.device != m.device):
                o.shape, o.dtype = shape, m.dtype
                if m.device is not None:
                    o.device = m.device
                changed += 1
        n._meta_key = _key(n)
    return changed
