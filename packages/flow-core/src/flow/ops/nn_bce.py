"""Binary cross-entropy on probabilities as an op with PyTorch's clamped forward and backward.

As a composite of ``log(clamp(x))`` it gives NaN gradients once a probability saturates at 0 or 1:
the clamp's zero gradient meets ``1 / clamp(x)``, which overflows to inf in float32 (``exp(-100)`` is
a float32 denormal), and ``0 * inf`` is NaN. PyTorch's formulas are used instead:

    loss        = -(t * max(log x, -100) + (1 - t) * max(log1p(-x), -100))
    d loss / dx = (x - t) / max(x (1 - x), 1e-12)
    d loss / dt = max(log1p(-x), -100) - max(log x, -100)

The op is elementwise (no weight, no reduction: :func:`flow.nn.functional.binary_cross_entropy`
applies those), and its gradient is written with flow ops, so it is differentiable again.
"""

from __future__ import annotations

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import FLOAT

LOG_MIN = -100.0  # PyTorch's clamp of log() in binary_cross_entropy
GRAD_EPS = 1e-12  # PyTorch's floor of x (1 - x) in its backward


def _meta(x, t):
    if t.dtype != x.dtype:
        raise OpTypeError("binary_cross_entropy", f"'target' must have the input's dtype {x.dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(x.shape):
        raise OpError(
            "binary_cross_entropy", f"'target' must have the input's shape {tuple(x.shape)}, got {tuple(t.shape)}"
        )
    return M.TensorMeta(tuple(x.shape), x.dtype, M.check_same_device("binary_cross_entropy", x, t))


def _clamped_logs(x):
    from flow.ops.clamp_where import clamp
    from flow.ops.unary import log, log1p

    return clamp(log(x), min=LOG_MIN), clamp(log1p(-x), min=LOG_MIN)


def _grad(ctx, g):
    from flow.ops.clamp_where import clamp

    x, t = ctx.inputs
    dx = dt = None
    if ctx.next[0][0] is not None:
        dx = g * (x - t) / clamp(x * (1.0 - x), min=GRAD_EPS)
    if ctx.next[1][0] is not None:
        lx, l1 = _clamped_logs(x)
        dt = g * (l1 - lx)
    return dx, dt


BCE = defop("binary_cross_entropy", ["input", "target"], meta=_meta, dtypes=FLOAT, grad=_grad, save="inputs")


@kernel(BCE)
def _bce_kernel(xp):
    def run(x, t):
        one = x.dtype.type(1)
        lx = xp.maximum(xp.log(x), x.dtype.type(LOG_MIN))
        l1 = xp.maximum(xp.log1p(-x), x.dtype.type(LOG_MIN))
        return -(t * lx + (one - t) * l1)

    return run


def binary_cross_entropy(input, target):
    """Elementwise binary cross-entropy of probabilities ``input`` against ``target``."""
    return call(BCE, input, target)


# -- opcheck samples -------------------------------------------------------------------------------------
def _samples():
    from flow.ops import _samples as S
    from flow.testing import ErrorInput, SampleInput

    yield SampleInput((S.uniform((3, 4), 0.05, 0.95, 1), S.uniform((3, 4), 0.0, 1.0, 2)))
    yield SampleInput((S.uniform((5,), 0.1, 0.9, 3), S.uniform((5,), 0.0, 1.0, 4)))
    yield SampleInput((S.uniform((), 0.2, 0.8, 5), S.uniform((), 0.0, 1.0, 6)))
    x = S.uniform((3, 4), 0.05, 0.95, 1)
    yield ErrorInput((x, S.uniform((4,), 0.0, 1.0, 2)), {}, OpError, "'target' must have the input's shape (3, 4)")
    yield ErrorInput(
        (x, S.uniform((3, 4), 0.0, 1.0, 2).float()), {}, OpTypeError, "'target' must have the input's dtype"
    )


from flow.ops._define import set_samples  # noqa: E402

set_samples(BCE, _samples)
