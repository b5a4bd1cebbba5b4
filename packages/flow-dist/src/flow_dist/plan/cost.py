"""FLOPs and bytes moved per op of a traced step (:class:`flow.graph.GraphIR`).

Each registered op name maps to a formula over the node's input and output shapes; an op not in
the table gets the generic cost (one FLOP per output element, bytes = inputs + outputs) and is
marked ``rule="generic"`` so a report can say how much of the step is estimated that way. FLOPs
count a multiply-add as 2 (the convention of the 6 * params * tokens rule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# metadata-only ops: the executor hands out a view (or the lowering removes them)
VIEW_OPS = frozenset(
    "reshape view permute transpose split chunk expand squeeze unsqueeze flatten narrow slice select "
    "as_strided detach alias unbind t".split()
)
# communication and bookkeeping: their time is the collective's (see collectives.py), not compute
COMM_OPS = frozenset("sbp_boxing sbp_all_reduce_start sbp_all_reduce_wait all_reduce all_gather reduce_scatter".split())
REDUCTIONS = frozenset("sum mean amax amin max min prod norm var std logsumexp argmax argmin all any".split())
# FLOPs per element of the largest operand, counted from the reference implementations' passes
PER_ELEMENT = {
    "softmax": 5,  # max, subtract, exp, sum, divide
    "log_softmax": 5,
    "softmax_backward": 4,  # g * y, row sum, subtract, multiply
    "log_softmax_backward": 4,
    "layer_norm": 8,  # mean, centre, square, mean, rsqrt, scale, weight, bias
    "layer_norm_backward": 16,  # input, weight and bias gradients: about twice forward
    "rms_norm": 5,
    "batch_norm": 8,
    "batch_norm_backward": 16,
    "gelu": 8,  # tanh approximation: cube, fma, tanh, 3 multiplies, add
    "gelu_backward": 12,
    "cross_entropy": 6,  # log-softmax + gather + mean
    "cross_entropy_backward": 5,
    "dropout": 2,
    "sigmoid": 4,
    "silu": 5,
    "tanh": 4,
    "exp": 1,
}
# optimizer updates: FLOPs and arrays read + written per parameter element
OPTIMIZER = {
    "adam_update": (12, 7),  # p, g, m, v read; p, m, v written
    "adamw_update": (13, 7),
    "sgd_update": (4, 5),  # with momentum: p, g, buf read; p, buf written
    "sgd_momentum_update": (4, 5),
}


@dataclass
class OpCost:
    """The cost of one node: ``flops``, ``bytes`` (read + written) and which ``rule`` computed it."""

    name: str
    flops: float
    bytes: float
    rule: str
    phase: str = ""
    scope: str = ""
    passes: int = 1  # passes over its operands an unfused implementation makes (one per FLOP per element)
    elements: float = 0.0  # elements of its largest operand (parameter elements of an optimizer update)
    calls: float = 1.0  # independent matrix products of a batched contraction (heads x sequences)
    # runs inside a global op's local function (flow_dist's vocabulary-parallel embedding and loss): it
    # pays a local op's dispatch, not the SBP handler's, when the step runs on global tensors
    local: bool = False

    def time(self, device, mode: str = "graph") -> float:
        """Seconds on ``device``: the framework's fixed cost per op in ``mode`` plus the work. A matrix
        product runs at the device's efficiency for its size; an op with a measured per-element
        throughput takes that; the rest the roofline time, bound by compute or by memory bandwidth
        (a device that does not fuse elementwise work, NumPy on a CPU, moves the operands once per pass)."""
        if self.rule == "comm":
            return 0.0
        overhead = device.op_overhead("eager" if mode == "global" and self.local else mode)
        if self.rule == "view":
            # the graph executor hands out views without dispatching; eager (local or global) still runs each call
            return overhead * device.slowdown if mode != "graph" else 0.0
        if self.rule == "contraction" and self.flops:
            per = self.flops / max(self.calls, 1.0)
            # still bound by its memory traffic: a product with a short contraction (attention's
            # head size) moves more bytes per FLOP than a large one
            compute = self.flops / (device.flops * device.gemm_efficiency(per, self.name))
            work = max(compute, self.bytes / device.effective_bandwidth)
        else:
            sec = device.seconds_per_element(self.name) if self.elements else None
            if sec is not None:
                work = sec * self.elements
            else:
                traffic = self.bytes if device.fuses_elementwise else self.bytes * self.passes
                work = max(self.flops / device.effective_flops, traffic / device.effective_bandwidth)
        return (overhead + work) * device.slowdown


@dataclass
class StepCost:
    """Every node's :class:`OpCost` of a step, with totals by phase and by op name."""

    ops: list = field(default_factory=list)

    @property
    def flops(self) -> float:
        return sum(c.flops for c in self.ops)

    @property
    def bytes(self) -> float:
        return sum(c.bytes for c in self.ops)

    def by_phase(self) -> dict:
        out: dict = {}
        for c in self.ops:
            f, b = out.get(c.phase, (0.0, 0.0))
            out[c.phase] = (f + c.flops, b + c.bytes)
        return out

    def by_op(self, device=None) -> dict:
        """op name -> (count, flops, bytes, seconds on ``device`` or 0)."""
        out: dict = {}
        for c in self.ops:
            n, f, b, t = out.get(c.name, (0, 0.0, 0.0, 0.0))
            out[c.name] = (n + 1, f + c.flops, b + c.bytes, t + (c.time(device) if device else 0.0))
        return out

    def time(self, device) -> float:
        return sum(c.time(device) for c in self.ops)

    def generic(self) -> list:
        """Names of the ops costed by the generic fallback."""
        return sorted({c.name for c in self.ops if c.rule == "generic"})


def _numel(shape) -> int:
    return int(math.prod(shape)) if shape else 1


def _tensor_bytes(v) -> int:
    return _numel(v.shape) * np.dtype(_np_dtype(v.dtype)).itemsize


def _np_dtype(dt):
    try:
        return np.dtype(dt.numpy_dtype) if hasattr(dt, "numpy_dtype") else np.dtype(str(dt).replace("flow.", ""))
    except TypeError:
        return np.dtype(np.float32)  # a dtype NumPy does not know (bfloat16): cost as 4 bytes


def _io_bytes(node) -> int:
    return sum(_tensor_bytes(v) for v in node.input_values()) + sum(_tensor_bytes(o) for o in node.outputs)


def _contraction(node) -> float:
    """2 * (output elements) * (contracted length) for matmul-like ops."""
    ins = list(node.input_values())
    out = node.outputs[0]
    name = node.name
    if name in ("linear",):
        k = ins[0].shape[-1]
        bias = _numel(out.shape) if len(ins) > 2 else 0
        return 2.0 * _numel(out.shape) * k + bias
    if name in ("addmm", "baddbmm"):
        return 2.0 * _numel(out.shape) * ins[1].shape[-1] + _numel(out.shape)
    a = ins[0]
    k = a.shape[-1] if a.ndim >= 1 else 1
    return 2.0 * _numel(out.shape) * k


def _products(node) -> float:
    """How many independent matrix products a contraction is: the batch dimensions of a batched
    ``matmul`` (NumPy loops over them, so each runs at the rate of its own size); a ``linear``
    flattens its leading dimensions into one product."""
    if node.name not in ("matmul", "bmm", "baddbmm"):
        return 1.0
    a, b = list(node.input_values())[:2]
    if a.ndim <= 2 and b.ndim <= 2:
        return 1.0
    if b.ndim <= 2:
        return 1.0  # (..., m, k) @ (k, n): one product of the flattened rows
    return float(_numel(node.outputs[0].shape[:-2]))


def _conv(node) -> float:
    """2 * (output-gradient or output elements) * (C_in / groups * kernel): the same for forward,
    the input gradient and the weight gradient (each is one convolution of that size)."""
    ins = list(node.input_values())
    name = node.name
    if name.endswith("_backward_input"):
        grad, w = ins[0], ins[1]
    elif name.endswith("_backward_weight"):
        grad, w = ins[0], node.outputs[0]
    else:
        grad, w = node.outputs[0], ins[1]
    return 2.0 * _numel(grad.shape) * _numel(w.shape[1:])


def _pool(node) -> float:
    """One comparison or add per window element of every output (input, for the backward)."""
    k = node.attrs.get("kernel_size") or (1,)
    k = (k,) if isinstance(k, int) else tuple(k)
    big = max([_numel(v.shape) for v in node.input_values()] + [_numel(o.shape) for o in node.outputs])
    return float(big * _numel(k))


def _sdpa(node) -> float:
    q, k = list(node.input_values())[:2]
    # q @ k^T and p @ v: 2 * 2 * B * H * Lq * Lk * E, plus the softmax
    lq, lk, e = q.shape[-2], k.shape[-2], q.shape[-1]
    bh = _numel(q.shape[:-2])
    flops = 4.0 * bh * lq * lk * e + 5.0 * bh * lq * lk
    return 2.5 * flops if node.name.endswith("_backward") else flops


def _flash(node) -> float:
    """flow-core's fused ``flash_attention`` (and its backward): the composite's products, q k^T and
    p v (``4 B H Lq Lk E``; the backward recomputes q k^T and runs 4 more: ``10 B H Lq Lk E``), plus
    its softmax (5 a score forward, 8 backward). The causal mask is counted whole, as the composite's."""
    q, k = list(node.input_values())[:2] if not node.name.endswith("_backward") else list(node.input_values())[1:3]
    lq, lk, e = q.shape[-2], k.shape[-2], q.shape[-1]
    scores = _numel(q.shape[:-2]) * lq * lk
    return 10.0 * scores * e + 8.0 * scores if node.name.endswith("_backward") else 4.0 * scores * e + 5.0 * scores


def op_cost(node) -> OpCost:
    """The :class:`OpCost` of one :class:`flow.graph.Node`."""
    name = node.name
    phase = node.tags.get("phase", "")
    io = float(_io_bytes(node))

    largest = max([_numel(v.shape) for v in node.input_values()] + [_numel(o.shape) for o in node.outputs] + [1])

    def make(flops, bytes_, rule, passes=1, elements=largest, calls=1.0):
        return OpCost(name, float(flops), float(bytes_), rule, phase, node.scope, passes, float(elements), calls)

    if name in VIEW_OPS:
        return make(0, 0, "view")
    if name in COMM_OPS or getattr(node.op, "collective", False):
        return make(0, 0, "comm")
    if name in ("matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "einsum_mm"):
        return make(_contraction(node), io, "contraction", calls=_products(node))
    if name.startswith("conv") and node.outputs:
        return make(_conv(node), io, "conv")
    if "pool" in name:
        return make(_pool(node), io, "pool")
    if name in ("flash_attention", "flash_attention_backward"):
        # a fused kernel of per-head products: each runs at the rate of its own size
        q = list(node.input_values())[0 if name == "flash_attention" else 1]
        return make(_flash(node), io, "contraction", calls=float(_numel(q.shape[:-2])))
    if name.startswith("scaled_dot_product_attention"):
        return make(_sdpa(node), io, "attention")
    if name in OPTIMIZER:
        per, arrays = OPTIMIZER[name]
        # multi-tensor updates take lists: count the parameter elements (the first list / input)
        first = node.inputs[0]
        params = first if isinstance(first, list) else [first]
        n = sum(_numel(p.shape) for p in params)
        item = _np_dtype(params[0].dtype).itemsize if params else 4
        return make(per * n, arrays * n * item, "optimizer", elements=n)
    if name in ("embedding",):
        out = node.outputs[0]
        return make(0, 2 * _tensor_bytes(out) + sum(_tensor_bytes(v) for v in list(node.input_values())[1:]), "gather")
    if name in ("embedding_backward",):
        grad = next(node.input_values())
        return make(_numel(grad.shape), io, "scatter_add")
    if name in PER_ELEMENT:
        return make(PER_ELEMENT[name] * largest, io, "per_element", PER_ELEMENT[name])
    if name in REDUCTIONS:
        return make(largest, io, "reduction")
    if name == "fused_elementwise":
        ops = node.tags.get("fused") or node.attrs.get("ops") or [name]
        return make(len(ops) * largest, io, "elementwise", len(ops))
    if getattr(node.op, "elementwise", False) or name in ELEMENTWISE:
        return make(largest, io, "elementwise")
    if name in MOVES:
        return make(0, io, "copy")
    return make(_numel(node.outputs[0].shape) if node.outputs else 0, io, "generic")


ELEMENTWISE = frozenset(
    "add sub mul div neg where relu abs pow sqrt rsqrt square clamp maximum minimum eq ne lt le gt ge "
    "relu_backward threshold_backward sigmoid_backward tanh_backward silu_backward dropout_backward "
    "masked_fill cast cast_like to_dtype fill zeros_like ones_like logical_not log add_ mul_".split()
)
MOVES = frozenset("cat stack contiguous copy clone pad index_select gather scatter flip roll repeat tile".split())


def step_cost(ir) -> StepCost:
    """The cost of every node of ``ir`` (a :class:`flow.graph.GraphIR`)."""
    if not hasattr(ir, "nodes"):
        raise TypeError(f"step_cost expects a flow.graph.GraphIR, got {type(ir).__name__}")
    return StepCost([op_cost(nd) for nd in ir.nodes])
