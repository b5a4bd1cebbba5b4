"""The ``example_ops`` plugin: declares ``example_swish``, its CPU kernel, SBP rule and AMP colour.

An op is declared once (schema, meta rule, gradient, samples for
``flow.testing.opcheck``) in ``flow_register_ops``; kernels attach to it by
name in ``flow_register_kernels``, which runs after every plugin has declared
its ops. ``flow_register_rules`` fills two tables other plugins own: ``"sbp"``
(flow-dist: the SBP signatures an op supports) and ``"amp_color"`` (flow-amp:
allow, deny, promote, infer or clear). Where those plugins are not installed the rules
are queued (``python -m flow plugins`` lists them) and go into the tables as
soon as a plugin declares them.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

import flow
from flow.errors import OpTypeError
from flow.ops.meta import TensorMeta
from flow.plugins import hookimpl
from flow.registry import FLOAT, Attr, schema

OP_NAME = "example_swish"
SBP_TABLE = "sbp"  # declared by flow-dist (flow_dist.plugin)
AMP_TABLE = "amp_color"  # declared by flow-amp (flow_amp.plugin)
# Under autocast swish runs in the low-precision dtype even on a float32 input, as a matmul does: its
# output, and the input it saves for backward, then take half the memory. (An op that should follow
# its input's dtype says "clear"; one that needs float32, "deny".)
AMP_COLOR = "allow"


def swish_meta(x, beta: float) -> TensorMeta:
    """Same shape, dtype and device as ``x``, which must be floating point (sigmoid is)."""
    if not x.dtype.is_floating_point:
        raise OpTypeError(OP_NAME, f"input 'x' must have a floating-point dtype, got {x.dtype}")
    return TensorMeta(x.shape, x.dtype, x.device)


def swish_grad(ctx, grad_out):
    """d/dx x*s(bx) = s(bx) + b*x*s(bx)*(1 - s(bx)), written with flow ops so it is differentiable too."""
    x = ctx.inputs[0]
    beta = ctx.attrs["beta"]
    s = flow.sigmoid(x * beta)
    return (grad_out * (s + x * beta * (s - s * s)),)


def swish_samples() -> Iterator:
    """Inputs ``opcheck`` runs the op on (CPU float64; it converts them to each device and dtype it checks):
    both signs, zero and large magnitudes, in a 1-d and a 2-d shape."""
    x = flow.tensor([[-6.0, -1.5, -0.25, 0.0], [0.3, 1.0, 2.5, 8.0]], dtype=flow.float64)
    yield flow.testing.SampleInput(args=(x,), kwargs={"beta": 0.7})
    x = flow.tensor([-2.0, 0.5, 3.0], dtype=flow.float64)
    yield flow.testing.SampleInput(args=(x,), kwargs={"beta": 2.0})


def swish_cpu(x: np.ndarray, beta: float) -> np.ndarray:
    # sigmoid(z) = (1 + tanh(z/2)) / 2 does not overflow for large |z| and keeps x's dtype.
    return x * (0.5 + 0.5 * np.tanh(0.5 * beta * x))


def swish_sbp_signatures(ctx) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The SBP signatures ``example_swish`` supports, as ``(input SBPs, output SBPs)`` per signature.

    ``ctx`` is flow-dist's rule context of one call (``ctx.shapes``: the logical shape of each
    tensor argument, ``ctx.attrs``: its attributes); SBPs are written as strings ("S(d)", "B",
    "P"), so this module does not import flow-dist. Elementwise: a split along any axis stays that
    split, a broadcast stays a broadcast. A partial sum is not supported: swish is not linear, so
    it must be reduced (boxed to broadcast) first.
    """
    splits = [((f"S({d})",), (f"S({d})",)) for d in range(len(ctx.shapes[0]))]
    return splits + [(("B",), ("B",))]


@hookimpl
def flow_register_ops(registry) -> None:
    registry.register_op(
        schema(OP_NAME, ["x"], [Attr("beta", float, 1.0)], dtypes=FLOAT),  # floating point only, as torch.sigmoid
        meta=swish_meta,
        grad=swish_grad,
        samples=swish_samples,
        doc="x * sigmoid(beta * x), elementwise",
    )


@hookimpl
def flow_register_kernels(registry) -> None:
    registry.register_kernel(OP_NAME, "cpu", swish_cpu)


@hookimpl
def flow_register_rules(registry) -> None:
    registry.register_rule(SBP_TABLE, OP_NAME, swish_sbp_signatures)
    registry.register_rule(AMP_TABLE, OP_NAME, AMP_COLOR)
