"""ONNX export rules of flow-core's elementwise, comparison, reduction and shape ops.

Each rule is ``rule(node, ctx) -> list of onnx NodeProto`` (see :mod:`flow.onnx`); the nodes write
the op's outputs under ``ctx.out(node, i)``.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import helper

from flow.graph.ir import Lit, Value
from flow.onnx._context import onnx_dtype

make = helper.make_node


def _cast_to(ctx, name: str, have, want, nodes: list) -> str:
    """``name`` as dtype ``want`` (a Cast node only when the dtypes differ)."""
    if have is want:
        return name
    out = ctx.fresh("cast")
    nodes.append(make("Cast", [name], [out], to=onnx_dtype(want)))
    return out


def _operands(node, ctx, dtype, nodes: list) -> list[str]:
    """Every input as an ONNX name of dtype ``dtype`` (literals become scalars of it)."""
    names = []
    for a in node.inputs:
        if isinstance(a, Lit):
            if a.value is None or not np.isscalar(a.value):
                raise ctx.error(f"a literal input {a.value!r} where a tensor or a number was expected")
            names.append(ctx.const(np.asarray(a.value, dtype=dtype.np), "scalar"))
        else:
            names.append(_cast_to(ctx, ctx.name(a), a.dtype, dtype, nodes))
    return names


def _common_dtype(node):
    """The dtype two compared operands are brought to (a literal takes the tensor's)."""
    from flow import _dtype as D

    tensors = [a for a in node.inputs if isinstance(a, Value)]
    if len(tensors) == 1:
        return tensors[0].dtype
    return D.NP_TO_DTYPE[np.result_type(*(t.dtype.np for t in tensors)).type]


def binary(onnx_op: str):
    """Arithmetic: operands cast to the output dtype (flow's type promotion already happened)."""

    def rule(node, ctx):
        nodes: list = []
        names = _operands(node, ctx, node.outputs[0].dtype, nodes)
        nodes.append(make(onnx_op, names, [ctx.out(node)]))
        return nodes

    return rule


def compare(onnx_op: str, negate: bool = False):
    def rule(node, ctx):
        nodes: list = []
        names = _operands(node, ctx, _common_dtype(node), nodes)
        if not negate:
            nodes.append(make(onnx_op, names, [ctx.out(node)]))
            return nodes
        t = ctx.fresh(onnx_op.lower())
        nodes += [make(onnx_op, names, [t]), make("Not", [t], [ctx.out(node)])]
        return nodes

    return rule


def logical(onnx_op: str):
    """``bitwise_*`` on bool tensors are ONNX's logical ops; on integers ONNX needs opset 18."""

    def rule(node, ctx):
        dt = node.outputs[0].dtype
        op = onnx_op
        if dt.name != "bool":
            if ctx.opset < 18:
                raise ctx.error(f"integer bitwise ops need opset_version >= 18, got {ctx.opset}")
            op = "Bitwise" + {"And": "And", "Or": "Or", "Xor": "Xor", "Not": "Not"}[onnx_op]
        nodes: list = []
        names = _operands(node, ctx, dt, nodes)
        nodes.append(make(op, names, [ctx.out(node)]))
        return nodes

    return rule


def unary(onnx_op: str, **attrs):
    def rule(node, ctx):
        return [make(onnx_op, [ctx.name(node.inputs[0])], [ctx.out(node)], **attrs)]

    return rule


def _identity(node, ctx):
    return [make("Identity", [ctx.name(node.inputs[0])], [ctx.out(node)])]


def _cast(node, ctx):
    return [make("Cast", [ctx.name(node.inputs[0])], [ctx.out(node)], to=onnx_dtype(node.outputs[0].dtype))]


def _gelu(node, ctx):
    x = node.inputs[0]
    xn, out = ctx.name(x), ctx.out(node)
    half, one = ctx.scalar(0.5, x), ctx.scalar(1.0, x)
    t = [ctx.fresh("gelu") for _ in range(6)]
    if node.attrs.get("approximate", "none") == "tanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        return [
            make("Mul", [xn, xn], [t[0]]),
            make("Mul", [t[0], xn], [t[1]]),
            make("Mul", [t[1], ctx.scalar(0.044715, x)], [t[2]]),
            make("Add", [xn, t[2]], [t[3]]),
            make("Mul", [t[3], ctx.scalar(math.sqrt(2.0 / math.pi), x)], [t[4]]),
            make("Tanh", [t[4]], [t[5]]),
            make("Add", [t[5], one], [t[0] + "b"]),
            make("Mul", [xn, t[0] + "b"], [t[1] + "b"]),
            make("Mul", [t[1] + "b", half], [out]),
        ]
    if ctx.opset >= 20:
        return [make("Gelu", [xn], [out])]
    return [  # 0.5 x (1 + erf(x / sqrt(2)))
        make("Mul", [xn, ctx.scalar(1.0 / math.sqrt(2.0), x)], [t[0]]),
        make("Erf", [t[0]], [t[1]]),
        make("Add", [t[1], one], [t[2]]),
        make("Mul", [xn, t[2]], [t[3]]),
        make("Mul", [t[3], half], [out]),
    ]


def _silu(node, ctx):
    x, t = ctx.name(node.inputs[0]), ctx.fresh("sig")
    return [make("Sigmoid", [x], [t]), make("Mul", [x, t], [ctx.out(node)])]


def _clamp(node, ctx):
    x = node.inputs[0]
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    ins = [ctx.name(x), "" if lo is None else ctx.scalar(lo, x), "" if hi is None else ctx.scalar(hi, x)]
    while ins[-1] == "":
        ins.pop()
    return [make("Clip", ins, [ctx.out(node)])]


def _where(node, ctx):
    nodes: list = []
    dt = node.outputs[0].dtype
    c = node.inputs[0]
    cond = ctx.name(c) if isinstance(c, Value) else ctx.const(np.asarray(bool(c.value)), "cond")
    if isinstance(c, Value):
        cond = _cast_to(ctx, cond, c.dtype, _bool(), nodes)
    names = []
    for a in node.inputs[1:]:
        if isinstance(a, Lit):
            names.append(ctx.const(np.asarray(a.value, dtype=dt.np), "scalar"))
        else:
            names.append(_cast_to(ctx, ctx.name(a), a.dtype, dt, nodes))
    nodes.append(make("Where", [cond, *names], [ctx.out(node)]))
    return nodes


def _bool():
    from flow import _dtype as D

    return D.bool


def reduce(onnx_op: str, cast_input: bool = False):
    """Reductions over ``dim`` (None: all dims); ``axes`` is an input from opset 18 on (13 for ReduceSum)."""

    def rule(node, ctx):
        x = node.inputs[0]
        nodes: list = []
        xn = ctx.name(x)
        if cast_input:  # sum of bool / int8 ... accumulates in the output dtype, as flow does
            xn = _cast_to(ctx, xn, x.dtype, node.outputs[0].dtype, nodes)
        dim = node.attrs.get("dim")
        axes = list(range(x.ndim)) if dim is None else [d % max(x.ndim, 1) for d in dim]
        keep = int(bool(node.attrs.get("keepdim", False)))
        if x.ndim == 0:
            nodes.append(make("Identity", [xn], [ctx.out(node)]))
        elif onnx_op == "ReduceSum" or ctx.opset >= 18:
            nodes.append(make(onnx_op, [xn, ctx.ints(axes, "axes")], [ctx.out(node)], keepdims=keep))
        else:
            nodes.append(make(onnx_op, [xn], [ctx.out(node)], axes=axes, keepdims=keep))
        return nodes

    return rule


def _softmax(onnx_op: str):
    def rule(node, ctx):
        return [make(onnx_op, [ctx.name(node.inputs[0])], [ctx.out(node)], axis=int(node.attrs.get("dim", -1)))]

    return rule


# -- shapes ------------------------------------------------------------------------------
def _reshape(node, ctx):
    x, out = node.inputs[0], node.outputs[0]
    nodes: list = []
    shape = ctx.shape_tensor(x, out, nodes, allow_infer=True)
    nodes.append(make("Reshape", [ctx.name(x), shape], [ctx.out(node)]))
    return nodes


def _expand(node, ctx):
    x, out = node.inputs[0], node.outputs[0]
    nodes: list = []
    shape = ctx.shape_tensor(x, out, nodes)
    nodes.append(make("Expand", [ctx.name(x), shape], [ctx.out(node)]))
    return nodes


def _permute(node, ctx):
    x = node.inputs[0]
    perm = [d % max(x.ndim, 1) for d in node.attrs["dims"]]
    return [make("Transpose", [ctx.name(x)], [ctx.out(node)], perm=perm)]


def _split(node, ctx):
    x = node.inputs[0]
    dim = node.attrs.get("dim", 0) % x.ndim
    if ctx.is_dynamic(x) and ctx.dyn(x)[dim] != x.shape[dim]:
        raise ctx.error(f"splitting dim {dim}, which is a dynamic axis, into fixed sizes")
    outs = [ctx.out(node, i) for i in range(len(node.outputs))]
    return [make("Split", [ctx.name(x), ctx.ints(node.attrs["sizes"], "split")], outs, axis=dim)]


def _cat(node, ctx):
    vals = node.inputs[0]
    dim = node.attrs.get("dim", 0) % vals[0].ndim
    return [make("Concat", [ctx.name(v) for v in vals], [ctx.out(node)], axis=dim)]


def _stack(node, ctx):
    vals = node.inputs[0]
    dim = node.attrs.get("dim", 0) % (vals[0].ndim + 1)
    axes = ctx.ints([dim], "axes")
    nodes, parts = [], []
    for v in vals:
        t = ctx.fresh("unsq")
        nodes.append(make("Unsqueeze", [ctx.name(v), axes], [t]))
        parts.append(t)
    nodes.append(make("Concat", parts, [ctx.out(node)], axis=dim))
    return nodes


def _basic_index(node, ctx):
    """ints select (Gather of a scalar index drops the dim), slices slice, None inserts a dim."""
    x = node.inputs[0]
    cur = ctx.name(x)
    nodes: list = []
    d = 0  # the dim of ``cur`` the next index entry applies to
    for it in node.attrs["index"]:
        t = ctx.fresh("index")
        if it is None:
            nodes.append(make("Unsqueeze", [cur, ctx.ints([d], "axes")], [t]))
            d += 1
        elif isinstance(it, tuple):
            start, stop, step = it
            big = np.iinfo(np.int64).max
            ins = [cur, ctx.ints([0 if start is None else start]), ctx.ints([big if stop is None else stop])]
            nodes.append(make("Slice", ins + [ctx.ints([d], "axes"), ctx.ints([step or 1])], [t]))
            d += 1
        else:
            nodes.append(make("Gather", [cur, ctx.const(np.asarray(it, dtype=np.int64), "idx")], [t], axis=d))
        cur = t
    nodes.append(make("Identity", [cur], [ctx.out(node)]))
    return nodes


def _index_select(node, ctx):
    x, idx = node.inputs[0], node.inputs[1]
    return [make("Gather", [ctx.name(x), ctx.name(idx)], [ctx.out(node)], axis=node.attrs["dim"] % max(x.ndim, 1))]


def _matmul(node, ctx):
    return [make("MatMul", [ctx.name(node.inputs[0]), ctx.name(node.inputs[1])], [ctx.out(node)])]


RULES = {
    "add": binary("Add"),
    "sub": binary("Sub"),
    "mul": binary("Mul"),
    "div": binary("Div"),
    "pow": binary("Pow"),
    "maximum": binary("Max"),
    "minimum": binary("Min"),
    "eq": compare("Equal"),
    "ne": compare("Equal", negate=True),
    "gt": compare("Greater"),
    "lt": compare("Less"),
    "ge": compare("GreaterOrEqual"),
    "le": compare("LessOrEqual"),
    "logical_not": unary("Not"),
    "logical_and": logical("And"),
    "logical_or": logical("Or"),
    "bitwise_and": logical("And"),
    "bitwise_or": logical("Or"),
    "bitwise_xor": logical("Xor"),
    "relu": unary("Relu"),
    "tanh": unary("Tanh"),
    "sigmoid": unary("Sigmoid"),
    "exp": unary("Exp"),
    "log": unary("Log"),
    "sqrt": unary("Sqrt"),
    "neg": unary("Neg"),
    "abs": unary("Abs"),
    "erf": unary("Erf"),
    "sin": unary("Sin"),
    "cos": unary("Cos"),
    "gelu": _gelu,
    "silu": _silu,
    "clamp": _clamp,
    "where": _where,
    "sum": reduce("ReduceSum", cast_input=True),
    "mean": reduce("ReduceMean"),
    "amax": reduce("ReduceMax"),
    "amin": reduce("ReduceMin"),
    "softmax": _softmax("Softmax"),
    "log_softmax": _softmax("LogSoftmax"),
    "cast": _cast,
    "cast_like": _cast,
    "contiguous": _identity,
    "clone": _identity,
    "reshape": _reshape,
    "expand": _expand,
    "permute": _permute,
    "split": _split,
    "cat": _cat,
    "stack": _stack,
    "basic_index": _basic_index,
    "index_select": _index_select,
    "matmul": _matmul,
}
