"""Common-subexpression elimination: one node for each (op, inputs, attributes)."""

from __future__ import annotations

import numpy as np

from flow.graph.ir import Lit, Value, inherit_attrs

_SMALL_CONST = 4096  # constants up to this many bytes are merged by content


def _hashable(x):
    if isinstance(x, (list, tuple)):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
    if isinstance(x, np.ndarray):
        return ("nd", x.dtype.str, x.shape, x.tobytes())
    try:
        hash(x)
    except TypeError:
        return ("repr", type(x).__name__, repr(x))
    if isinstance(x, (float, np.floating)) and x != x:  # NaN != NaN: key by repr
        return ("nan", type(x).__name__)
    return (type(x).__name__, x)


def cse(ir, config=None):
    """Merge nodes that compute the same op on the same inputs with the same attributes.

    Small constants with equal contents are merged first. Nodes with side effects (in-place
    updates, random draws) are never merged.
    """
    mapping: dict[int, Value] = {}
    by_content: dict = {}
    for n in ir.nodes:
        for v in n.input_values():
            if v.kind != "const" or v.id in mapping:
                continue
            arr = ir.constants.get(v.id)
            if not isinstance(arr, np.ndarray) or arr.nbytes > _SMALL_CONST:
                continue
            k = (arr.dtype.str, arr.shape, arr.tobytes(), v.dtype, v.device)
            first = by_content.setdefault(k, v)
            if first is not v:
                mapping[v.id] = first

    def res(v: Value) -> int:
        while v.id in mapping:
            v = mapping[v.id]
        return v.id

    seen: dict = {}
    dead = set()
    for n in ir.nodes:
        if n.has_side_effects:
            continue
        key = [n.op.name]
        for a in n.inputs:
            if a.__class__ is Value:
                key.append(res(a))
            elif a.__class__ is list:
                key.append(("l",) + tuple(res(v) for v in a))
            elif isinstance(a, Lit):
                key.append(("lit",) + _hashable(a.value))
        key.append(_hashable(n.attrs))
        key = tuple(key)
        prev = seen.get(key)
        if prev is None:
            seen[key] = n
            continue
        for o, p in zip(n.outputs, prev.outputs):
            mapping[o.id] = p
            inherit_attrs(o, p)
        dead.add(n.id)
    ir.replace_uses(mapping)
    ir.remove_nodes(dead)
    ir.prune_unused_inputs()
    return ir
