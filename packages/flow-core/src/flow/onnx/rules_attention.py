"""ONNX export rule of the fused attention op ``flash_attention``: its decomposition.

ONNX's own ``Attention`` operator needs opset 23, so the op is written as the graph it computes:
``Softmax(q @ k^T * scale [masked]) @ v``. The causal mask is a constant (L, S) initializer, so the
query and key lengths must be static; batch and heads may be dynamic axes. The per-row log-sum-exp
output exists for the backward, which an exported graph has not.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import helper

make = helper.make_node


def _flash_attention(node, ctx):
    q, k, v = node.inputs
    if node.outputs[1].id in ctx.used:
        raise ctx.error("flash_attention's log-sum-exp output (for its backward) is not exported")
    a = node.attrs
    perm = list(range(k.ndim - 2)) + [k.ndim - 1, k.ndim - 2]
    kt, s, ss = ctx.fresh("key_t"), ctx.fresh("scores"), ctx.fresh("scaled")
    nodes = [
        make("Transpose", [ctx.name(k)], [kt], perm=perm),
        make("MatMul", [ctx.name(q), kt], [s]),
        make("Mul", [s, ctx.scalar(float(a.get("scale", 1.0)), q)], [ss]),
    ]
    if a.get("is_causal", False):
        L, S = q.shape[-2], k.shape[-2]
        if ctx.dyn(q)[-2] != L or ctx.dyn(k)[-2] != S:
            raise ctx.error("causal flash_attention with a dynamic sequence length: its mask is a constant (L, S)")
        masked = ctx.fresh("masked")
        mask = ctx.const(np.tril(np.ones((L, S), dtype=bool)), "causal_mask")
        nodes.append(make("Where", [mask, ss, ctx.scalar(-math.inf, q)], [masked]))
        ss = masked
    p = ctx.fresh("probs")
    nodes += [make("Softmax", [ss], [p], axis=-1), make("MatMul", [p, ctx.name(v)], [ctx.out(node)])]
    return nodes


RULES = {"flash_attention": _flash_attention}
