"""Algebraic simplification: identities that remove or merge nodes.

* ``x * 1``, ``1 * x``, ``x / 1``, ``x + 0``, ``0 + x``, ``x - 0`` -> ``x`` (the constant may be a
  scalar literal or a constant tensor of ones/zeros; only when the result has ``x``'s shape and
  dtype, i.e. nothing is broadcast or promoted);
* ``reshape(x, x.shape)``, ``expand(x, x.shape)``, ``cast(x, x.dtype)``, identity ``permute`` -> ``x``;
* ``cast_like(x, other)`` where ``other`` has ``x``'s dtype -> ``x`` (the AMP pass runs before this
  one, so a ``cast_like`` of a float32 trace is kept until the dtypes it follows are final);
* ``reshape(reshape(x, a), b)`` -> ``reshape(x, b)``;
* ``permute(permute(x, p), q)`` -> ``permute(x, p∘q)`` (transposes are permutes), and ``x`` when the
  composition is the identity.

Rewrites repeat until nothing changes; nodes left without readers are removed by ``dce``.
"""

from __future__ import annotations

import numpy as np

from flow.graph.ir import Lit, Value, inherit_attrs


def _const_all(ir, a, value) -> bool:
    """``a`` (an input entry) is a literal or constant tensor whose every element equals ``value``."""
    if isinstance(a, Lit):
        v = a.value
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
            return False
        return v == value
    if a.__class__ is Value and a.kind == "const":
        arr = ir.constants.get(a.id)
        if isinstance(arr, np.ndarray) and arr.size <= 1 << 16 and arr.dtype.kind in "fiu":
            return bool(np.all(arr == value))
    return False


def _same_type(x, out) -> bool:
    return x.__class__ is Value and x.shape == out.shape and x.dtype is out.dtype


_NEUTRAL = {"mul": (1, True), "div": (1, False), "add": (0, True), "sub": (0, False)}


def _identity_of(ir, n):
    """The value ``n`` passes through unchanged, or None."""
    name = n.name
    out = n.outputs[0] if len(n.outputs) == 1 else None
    if out is None:
        return None
    if name in _NEUTRAL and len(n.inputs) == 2 and not n.attrs:
        neutral, commutes = _NEUTRAL[name]
        a, b = n.inputs
        if _same_type(a, out) and _const_all(ir, b, neutral):
            return a
        if commutes and _same_type(b, out) and _const_all(ir, a, neutral):
            return b
        return None
    x = n.inputs[0] if n.inputs else None
    if x is None or x.__class__ is not Value:
        return None
    if name in ("reshape", "expand") and tuple(n.attrs.get("shape", ())) == x.shape and _same_type(x, out):
        return x
    if (name == "cast" or name == "cast_like") and _same_type(x, out):
        return x
    if name == "permute" and _same_type(x, out):
        dims = _norm(n.attrs.get("dims", ()), x.ndim)
        if dims == tuple(range(x.ndim)):
            return x
    return None


def _norm(dims, nd) -> tuple:
    return tuple(int(d) % max(nd, 1) for d in dims)


def _resolver(mapping):
    def res(v):
        while v.__class__ is Value and v.id in mapping:
            v = mapping[v.id]
        return v

    return res


def simplify(ir, config=None):
    """Apply the identities above until none applies."""
    # values an in-place node overwrites: a result that is one of them may not replace a copy of it
    mutated = set()
    for n in ir.nodes:
        if n.inplace:
            flat = list(n.input_values())
            mutated.update(flat[i].id for i in n.inplace.values())
    for _ in range(8):
        mapping: dict[int, Value] = {}
        changed = False
        res = _resolver(mapping)

        for n in ir.nodes:
            if n.has_side_effects:
                continue
            n.map_inputs(res)
            same = _identity_of(ir, n)
            if same is not None and same.id not in mutated:
                mapping[n.outputs[0].id] = same
                inherit_attrs(n.outputs[0], same)  # its readers are rewired here, before replace_uses
                changed = True
                continue
            x = n.inputs[0] if n.inputs else None
            if x.__class__ is not Value or x.producer is None or x.producer.has_side_effects:
                continue
            p = x.producer
            if n.name == "reshape" and p.name == "reshape" and p.inputs[0].__class__ is Value:
                n.inputs = [p.inputs[0]] + n.inputs[1:]
                changed = True
            elif n.name == "permute" and p.name == "permute" and p.inputs[0].__class__ is Value:
                src = p.inputs[0]
                d1 = _norm(p.attrs["dims"], src.ndim)
                d2 = _norm(n.attrs["dims"], x.ndim)
                n.inputs = [src] + n.inputs[1:]
                n.attrs = dict(n.attrs, dims=tuple(d1[j] for j in d2))
                changed = True
        ir.replace_uses(mapping)
        if not changed:
            break
    # a state "updated" to its own value needs no write
    ir.updates = [(s, new) for s, new in ir.updates if new is not s]
    from flow.graph.passes.dce import dce

    return dce(ir, config)
