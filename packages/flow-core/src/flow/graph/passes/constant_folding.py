"""Constant folding: evaluate, at compile time, nodes whose tensor inputs are all constants."""

from __future__ import annotations

import numpy as np

from flow.graph.ir import Value, inherit_attrs


def reference_kernel(op, dtype):
    """The op's reference (generic NumPy) kernel, or its CPU kernel when it has no generic one."""
    from flow.registry import REGISTRY

    for e in REGISTRY.kernel_entries(op, "generic", dtype):
        if e.generic:
            return e.fn(np)
    try:
        return REGISTRY.resolve_kernel(op, "cpu", dtype)
    except Exception:
        return None


def _host(ir, v: Value):
    a = ir.constants[v.id]
    if v.device.type == "cpu":
        return a
    from flow.registry import get_device_type

    return get_device_type(v.device.type).to_host(a)


def constant_folding(ir, config=None):
    """Replace nodes whose tensor inputs are all constants by the constants they compute.

    The values come from the reference kernels (NumPy, on the host), so folding never depends
    on a device. Nodes with side effects or random draws are kept; so are results with more
    than ``config.constant_fold_max_elements`` elements that are bigger than the inputs (folding
    a broadcast would only make the graph larger).
    """
    limit = getattr(config, "constant_fold_max_elements", 1 << 20)
    mapping: dict[int, Value] = {}
    dead = set()
    for n in ir.nodes:
        if n.has_side_effects or getattr(n.op, "dynamic_shape", False):
            continue
        ins = []
        for a in n.inputs:
            if a.__class__ is Value:
                ins.append(mapping.get(a.id, a))
            elif a.__class__ is list:
                ins.extend(mapping.get(v.id, v) for v in a)
        if not ins or any(v.kind != "const" for v in ins):
            continue
        in_size = sum(v.numel() for v in ins)
        if any(o.numel() > limit and o.numel() > in_size for o in n.outputs):
            continue
        fn = reference_kernel(n.op, ins[0].dtype)
        if fn is None:
            continue
        args = []
        for a in n.inputs:
            if a.__class__ is Value:
                args.append(_host(ir, mapping.get(a.id, a)))
            elif a.__class__ is list:
                args.append([_host(ir, mapping.get(v.id, v)) for v in a])
            else:
                args.append(a.value)
        try:
            out = fn(*args, **n.attrs)
        except Exception:  # leave it to run time, where the error points at the user's line
            continue
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != len(n.outputs):
            continue
        arrays = []
        for o, a in zip(n.outputs, outs):
            a = np.array(a, copy=True)  # own the memory: a view would pin (and alias) the input constant
            if tuple(a.shape) != o.shape or a.dtype != o.dtype.np:
                break
            arrays.append(a)
        else:
            for o, a in zip(n.outputs, arrays):
                if o.device.type != "cpu":
                    from flow.registry import get_device_type

                    a = get_device_type(o.device.type).from_host(a, o.device.index)
                mapping[o.id] = ir.add_constant(a, o.dtype, o.device, name=f"folded {n.name}")
                inherit_attrs(o, mapping[o.id])
            dead.add(n.id)
    ir.replace_uses(mapping)
    ir.remove_nodes(dead)
    ir.prune_unused_inputs()
    return ir
