"""ONNX export rules of flow-core's neural-network ops: linear, convolution, pooling, norms, embeddings."""

from __future__ import annotations

import numpy as np
from onnx import helper

from flow.graph.ir import Lit, Value

make = helper.make_node


def _opt(ctx, a) -> str | None:
    """The ONNX name of an optional tensor input (None when the node got ``None``)."""
    if isinstance(a, Lit) and a.value is None:
        return None
    return ctx.name(a)


def _linear(node, ctx):
    x, w, b = node.inputs
    bias = _opt(ctx, b)
    out = ctx.out(node)
    if x.ndim == 2:  # Gemm computes x @ w^T + b in one node
        return [make("Gemm", [ctx.name(x), ctx.name(w)] + ([bias] if bias else []), [out], transB=1)]
    arr = ctx.array(w)
    nodes: list = []
    if arr is not None:  # a known weight is stored transposed, so no Transpose runs per call
        wt = ctx.const(np.ascontiguousarray(arr.T), "weight_t")
    else:
        wt = ctx.fresh("weight_t")
        nodes.append(make("Transpose", [ctx.name(w)], [wt], perm=[1, 0]))
    if bias is None:
        nodes.append(make("MatMul", [ctx.name(x), wt], [out]))
        return nodes
    t = ctx.fresh("matmul")
    nodes += [make("MatMul", [ctx.name(x), wt], [t]), make("Add", [t, bias], [out])]
    return nodes


def _conv2d(node, ctx):
    x, w, b = node.inputs
    a = node.attrs
    top, bottom, left, right = a.get("padding", (0, 0, 0, 0))
    ins = [ctx.name(x), ctx.name(w)]
    bias = _opt(ctx, b)
    if bias:
        ins.append(bias)
    return [
        make(
            "Conv",
            ins,
            [ctx.out(node)],
            kernel_shape=list(w.shape[2:]),
            strides=list(a.get("stride", (1, 1))),
            pads=[top, left, bottom, right],  # ONNX: all begins, then all ends
            dilations=list(a.get("dilation", (1, 1))),
            group=int(a.get("groups", 1)),
        )
    ]


def _filled(ctx, a, n: int, value: float, like: Value) -> str:
    """An optional per-channel input, or a constant of ``value`` when the node got ``None``."""
    name = _opt(ctx, a)
    return name if name is not None else ctx.const(np.full((n,), value, dtype=like.dtype.np), "fill")


def _batch_norm(node, ctx):
    x, w, b, rm, rv = node.inputs
    if node.attrs.get("training", True):
        raise ctx.error("batch norm in training mode (batch statistics); put the model in eval() before exporting")
    if _opt(ctx, rm) is None or _opt(ctx, rv) is None:
        raise ctx.error("batch norm without running statistics (track_running_stats=False) is not supported")
    c = x.shape[1]
    ins = [ctx.name(x), _filled(ctx, w, c, 1.0, x), _filled(ctx, b, c, 0.0, x), ctx.name(rm), ctx.name(rv)]
    nodes = [make("BatchNormalization", ins, [ctx.out(node)], epsilon=float(node.attrs.get("eps", 1e-5)))]
    if node.outputs[1].id in ctx.used or node.outputs[2].id in ctx.used:
        # the saved mean / invstd are for the backward, which an exported graph has not
        raise ctx.error("batch norm's saved statistics outputs are not exported")
    return nodes


def _layer_norm(node, ctx):
    x, w, b = node.inputs
    shape = tuple(node.attrs["normalized_shape"])
    scale = _opt(ctx, w)
    ins = [ctx.name(x), scale if scale is not None else ctx.const(np.ones(shape, dtype=x.dtype.np), "ones")]
    if _opt(ctx, b) is not None:
        ins.append(ctx.name(b))
    return [
        make(
            "LayerNormalization",
            ins,
            [ctx.out(node)],
            axis=-len(shape),
            epsilon=float(node.attrs.get("eps", 1e-5)),
        )
    ]


def _pool_pads(padding) -> list:
    p = list(padding)
    return p + p  # (h, w) on both sides


def _avg_pool2d(node, ctx):
    a = node.attrs
    if a.get("divisor_override") is not None:
        raise ctx.error("avg_pool2d with divisor_override has no ONNX equivalent")
    return [
        make(
            "AveragePool",
            [ctx.name(node.inputs[0])],
            [ctx.out(node)],
            kernel_shape=list(a["kernel_size"]),
            strides=list(a["stride"]),
            pads=_pool_pads(a.get("padding", (0, 0))),
            ceil_mode=int(a.get("ceil_mode", False)),
            count_include_pad=int(a.get("count_include_pad", True)),
        )
    ]


def _max_pool2d(node, ctx):
    a = node.attrs
    if node.outputs[1].id in ctx.used:
        # ONNX numbers the indices over the whole tensor, PyTorch per (N, C) plane
        raise ctx.error("max_pool2d's indices (return_indices=True) are not exported")
    return [
        make(
            "MaxPool",
            [ctx.name(node.inputs[0])],
            [ctx.out(node)],
            kernel_shape=list(a["kernel_size"]),
            strides=list(a["stride"]),
            pads=_pool_pads(a.get("padding", (0, 0))),
            dilations=list(a.get("dilation", (1, 1))),
            ceil_mode=int(a.get("ceil_mode", False)),
        )
    ]


def _embedding(node, ctx):
    w, idx = node.inputs
    return [make("Gather", [ctx.name(w), ctx.name(idx)], [ctx.out(node)], axis=0)]


def _embedding_bag(node, ctx):
    """Bags of equal size (offsets ``0, k, 2k, ...``, as a 2-D input gives): Gather, then reduce each bag."""
    w, idx, offsets, psw = node.inputs
    a = node.attrs
    off = ctx.array(offsets)
    if off is None or idx.ndim != 1:
        raise ctx.error("only embedding_bag with offsets known at export time is supported")
    if not (isinstance(psw, Lit) and psw.value is None):
        raise ctx.error("embedding_bag with per_sample_weights is not supported")
    if a.get("include_last_offset") or a.get("padding_idx") is not None:
        raise ctx.error("embedding_bag with include_last_offset or padding_idx is not supported")
    n = idx.shape[0]
    k = int(off[1] - off[0]) if len(off) > 1 else n
    if k <= 0 or not np.array_equal(off, np.arange(len(off)) * k) or len(off) * k != n:
        raise ctx.error("embedding_bag with bags of different sizes is not supported (offsets must be 0, k, 2k, ...)")
    reduce = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax"}[a.get("mode", "mean")]
    g, r = ctx.fresh("bag_idx"), ctx.fresh("bag_rows")
    nodes = [
        make("Reshape", [ctx.name(idx), ctx.ints([-1, k])], [g]),  # -1: the number of bags follows the input
        make("Gather", [ctx.name(w), g], [r], axis=0),
    ]
    if reduce == "ReduceSum" or ctx.opset >= 18:
        nodes.append(make(reduce, [r, ctx.ints([1], "axes")], [ctx.out(node)], keepdims=0))
    else:
        nodes.append(make(reduce, [r], [ctx.out(node)], axes=[1], keepdims=0))
    if node.outputs[1].id in ctx.used:
        raise ctx.error("embedding_bag's max_indices output is not exported")
    return nodes


RULES = {
    "linear": _linear,
    "conv2d": _conv2d,
    "batch_norm": _batch_norm,
    "layer_norm": _layer_norm,
    "avg_pool2d": _avg_pool2d,
    "max_pool2d": _max_pool2d,
    "embedding": _embedding,
    "embedding_bag": _embedding_bag,
}
