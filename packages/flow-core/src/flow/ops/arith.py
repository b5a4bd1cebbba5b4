"""Binary arithmetic: add sub mul div pow maximum minimum remainder floor_divide, with broadcasting."""

from __future__ import annotations

import numpy as np

from flow._dispatch import binary
from flow.errors import OpError
from flow.ops import meta as M
from flow.ops._define import defop, generic
from flow.ops._grad_util import sum_to_shape
from flow.registry.ops import ANY, FLOAT_PROMOTE, NUMERIC


def _shape(ctx, i):
    return ctx.input_shape(i)


def _to(g, ctx, i):
    """``g`` reduced to input ``i``'s shape (undoing broadcasting)."""
    shape = ctx.in_meta[i][0]
    return g if g._data.shape == shape else sum_to_shape(g, shape)


def _add_grad(ctx, g):
    nxt = ctx.next
    return (_to(g, ctx, 0) if nxt[0][0] is not None else None, _to(g, ctx, 1) if nxt[1][0] is not None else None)


def _sub_grad(ctx, g):
    nxt = ctx.next
    return (_to(g, ctx, 0) if nxt[0][0] is not None else None, _to(-g, ctx, 1) if nxt[1][0] is not None else None)


def _mul_grad(ctx, g):
    a, b = ctx.inputs
    ga = sum_to_shape(g * b, _shape(ctx, 0)) if ctx.next[0][0] is not None else None
    gb = sum_to_shape(g * a, _shape(ctx, 1)) if ctx.next[1][0] is not None else None
    return ga, gb


def _div_grad(ctx, g):
    a, b = ctx.inputs
    ga = sum_to_shape(g / b, _shape(ctx, 0)) if ctx.next[0][0] is not None else None
    gb = sum_to_shape(-g * a / (b * b), _shape(ctx, 1)) if ctx.next[1][0] is not None else None
    return ga, gb


def _pow_grad(ctx, g):
    a, b = ctx.inputs
    (out,) = ctx.outputs
    ga = gb = None
    if ctx.next[0][0] is not None:
        ga = sum_to_shape(g * b * a ** (b - 1), _shape(ctx, 0))
    if ctx.next[1][0] is not None:
        from flow.ops.clamp_where import where
        from flow.ops.unary import log

        safe = where(a > 0, a, 1.0)
        gb = sum_to_shape(g * out * log(safe) * (a > 0), _shape(ctx, 1))
    return ga, gb


def _minmax_grad(pick_a):
    def grad(ctx, g):
        a, b = ctx.inputs
        from flow.ops.clamp_where import where

        sel = pick_a(a, b)
        tie = a == b
        half = g * 0.5
        ga = gb = None
        if ctx.next[0][0] is not None:
            ga = sum_to_shape(where(tie, half, where(sel, g, 0.0)), _shape(ctx, 0))
        if ctx.next[1][0] is not None:
            gb = sum_to_shape(where(tie, half, where(sel, 0.0, g)), _shape(ctx, 1))
        return ga, gb

    return grad


def _remainder_grad(ctx, g):
    return sum_to_shape(g, _shape(ctx, 0)) if ctx.next[0][0] is not None else None, None


# add, mul, maximum and minimum take bools (logical or, and, ...); sub and pow do not, as in PyTorch.
ADD = defop(
    "add", ["input", "other"], meta=M.elementwise("add"), dtypes=ANY, grad=_add_grad, save="none", elementwise=True
)
SUB = defop(
    "sub", ["input", "other"], meta=M.elementwise("sub"), dtypes=NUMERIC, grad=_sub_grad, save="none", elementwise=True
)
MUL = defop(
    "mul", ["input", "other"], meta=M.elementwise("mul"), dtypes=ANY, grad=_mul_grad, save="inputs", elementwise=True
)
DIV = defop(
    "div",
    ["input", "other"],
    meta=M.elementwise("div"),
    dtypes=FLOAT_PROMOTE,
    grad=_div_grad,
    save="inputs",
    elementwise=True,
)
# A bool base takes only a bool scalar exponent (``b ** True``), as in PyTorch; its dispatch runs the meta
# rule, since the exponent's dtype is not the base's.
POW = defop(
    "pow",
    ["input", "exponent"],
    meta=M.elementwise("pow"),
    dtypes={"input": ANY, "exponent": NUMERIC},
    grad=_pow_grad,
    save="both",
    elementwise=True,
    eager_meta=True,
)
MAXIMUM = defop(
    "maximum",
    ["input", "other"],
    meta=M.elementwise("maximum"),
    dtypes=ANY,
    grad=_minmax_grad(lambda a, b: a > b),
    save="inputs",
    elementwise=True,
)
MINIMUM = defop(
    "minimum",
    ["input", "other"],
    meta=M.elementwise("minimum"),
    dtypes=ANY,
    grad=_minmax_grad(lambda a, b: a < b),
    save="inputs",
    elementwise=True,
)
REMAINDER = defop(
    "remainder",
    ["input", "other"],
    meta=M.elementwise("remainder"),
    dtypes=NUMERIC,
    grad=_remainder_grad,
    save="none",
    elementwise=True,
)
FMOD = defop(
    "fmod",
    ["input", "other"],
    meta=M.elementwise("fmod"),
    dtypes=NUMERIC,
    grad=_remainder_grad,
    save="none",
    elementwise=True,
)
FLOOR_DIVIDE = defop(
    "floor_divide",
    ["input", "other"],
    meta=M.elementwise("floor_divide"),
    dtypes=NUMERIC,
    save="none",
    elementwise=True,
)
ATAN2 = defop(
    "atan2",
    ["input", "other"],
    meta=M.elementwise("atan2"),
    dtypes=FLOAT_PROMOTE,
    save="inputs",
    elementwise=True,
    grad=lambda ctx, g: (
        sum_to_shape(g * ctx.inputs[1] / (ctx.inputs[0] ** 2 + ctx.inputs[1] ** 2), ctx.input_shape(0)),
        sum_to_shape(-g * ctx.inputs[0] / (ctx.inputs[0] ** 2 + ctx.inputs[1] ** 2), ctx.input_shape(1)),
    ),
)


def _div_kernel(xp):
    def run(a, b):
        # Integer inputs were promoted to float by the caller (true division).
        return xp.true_divide(a, b)

    return run


def _pow_kernel(xp):
    def run(a, b):
        dt = a.dtype
        if dt.kind in "iu" and xp.any(xp.asarray(b) < 0):
            if isinstance(b, np.generic):  # a negative Python number as exponent, as PyTorch
                raise OpError("pow", "Integers to negative integer powers are not allowed.")
            # elementwise negative exponents of integers, as PyTorch: 1 -> 1, -1 -> +-1, others -> 0
            neg = b < 0
            r = xp.power(a, xp.where(neg, 0, b).astype(dt, copy=False))
            odd = (b % 2) != 0
            rn = xp.where(a == 1, 1, xp.where(a == -1, xp.where(odd, -1, 1), 0))
            return xp.where(neg, rn, r).astype(dt, copy=False)
        r = xp.power(a, b)
        return r if r.dtype == dt else r.astype(dt)

    return run


def _int_safe(fn_name, op_name):
    def factory(xp):
        f = getattr(xp, fn_name)

        def run(a, b):
            if a.dtype.kind in "iu" and xp.any(xp.asarray(b) == 0):
                raise OpError(op_name, "integer division by zero")
            return f(a, b)

        return run

    return factory


generic(ADD, lambda xp: xp.add)
generic(SUB, lambda xp: xp.subtract)
generic(MUL, lambda xp: xp.multiply)
generic(DIV, _div_kernel)
generic(POW, _pow_kernel)
generic(MAXIMUM, lambda xp: xp.maximum)
generic(MINIMUM, lambda xp: xp.minimum)
generic(REMAINDER, _int_safe("remainder", "remainder"))
generic(FMOD, _int_safe("fmod", "fmod"))
generic(FLOOR_DIVIDE, _int_safe("floor_divide", "floor_divide"))
generic(ATAN2, lambda xp: xp.arctan2)


def add(input, other, *, alpha=1):
    """``input + alpha * other`` with broadcasting and PyTorch's type promotion."""
    if alpha != 1:
        other = other * alpha
    return binary(ADD, input, other)


def sub(input, other, *, alpha=1):
    """``input - alpha * other``."""
    if alpha != 1:
        other = other * alpha
    return binary(SUB, input, other)


def rsub(input, other, *, alpha=1):
    return sub(other, input, alpha=alpha)


def mul(input, other):
    """Elementwise product with broadcasting."""
    return binary(MUL, input, other)


def div(input, other, *, rounding_mode: str | None = None):
    """True division (integers give floats); ``rounding_mode`` 'trunc' or 'floor' as in PyTorch."""
    if rounding_mode is None:
        return binary(DIV, input, other, promote_to_float=True)
    if rounding_mode == "floor":
        return binary(FLOOR_DIVIDE, input, other)
    if rounding_mode == "trunc":
        from flow.ops.unary import trunc

        q = binary(DIV, input, other, promote_to_float=True)
        r = trunc(q)
        from flow._tensor import Tensor

        dt = input.dtype if isinstance(input, Tensor) else other.dtype
        return r if dt.is_floating_point else r.to(q.dtype if dt.is_floating_point else dt)
    from flow.errors import OpError

    raise OpError("div", f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")


def true_divide(input, other):
    return div(input, other)


def floor_divide(input, other):
    return binary(FLOOR_DIVIDE, input, other)


def pow(input, exponent):  # noqa: A001 - PyTorch's name
    """``input ** exponent`` elementwise."""
    return binary(POW, input, exponent)


def float_power(input, exponent):
    return pow(input.double() if hasattr(input, "double") else input, exponent)


def maximum(input, other):
    """Elementwise maximum (NaN-propagating); ties split the gradient evenly."""
    return binary(MAXIMUM, input, other)


def minimum(input, other):
    """Elementwise minimum (NaN-propagating); ties split the gradient evenly."""
    return binary(MINIMUM, input, other)


def remainder(input, other):
    """Python-style modulus (sign of the divisor), as ``torch.remainder``."""
    return binary(REMAINDER, input, other)


def fmod(input, other):
    """C-style modulus (sign of the dividend), as ``torch.fmod``."""
    return binary(FMOD, input, other)


def atan2(input, other):
    return binary(ATAN2, input, other, promote_to_float=True)


arctan2 = atan2
multiply = mul
divide = div
subtract = sub


# -- opcheck samples ------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402

for _h in (ADD, SUB, MUL, MAXIMUM, MINIMUM, ATAN2):
    set_samples(_h, S.binary())
set_samples(DIV, S.binary(b_low=0.5, b_high=2.0))


def _pow_samples():
    yield from S.binary(0.5, 2.0, -1.5, 1.5)()
    yield SampleInput((S.ints((3, 4), -3, 4, seed=1), S.ints((3, 4), -2, 3, seed=2)))
    yield ErrorInput(
        (S.ints((3, 4), 1, 4), np.int64(-1)), {}, OpError, "Integers to negative integer powers", values=True
    )


def _int_division_samples(base):
    def samples():
        yield from base()
        yield SampleInput((S.ints((3, 4), -5, 6, seed=1), S.ints((3, 4), 1, 4, seed=2)))
        yield ErrorInput(
            (S.ints((3, 4), 1, 4), S.ints((3, 4), 0, 1)), {}, OpError, "integer division by zero", values=True
        )

    return samples


set_samples(POW, _pow_samples)
set_samples(REMAINDER, _int_division_samples(S.binary(0.1, 0.9, 1.5, 2.0)))
set_samples(FMOD, _int_division_samples(S.binary(0.1, 0.9, 1.5, 2.0)))
set_samples(FLOOR_DIVIDE, _int_division_samples(S.binary(b_low=0.5, b_high=2.0, grad=False)))

__all__ = [
    "add",
    "sub",
    "rsub",
    "mul",
    "div",
    "true_divide",
    "floor_divide",
    "pow",
    "float_power",
    "maximum",
    "minimum",
    "remainder",
    "fmod",
    "atan2",
    "arctan2",
    "multiply",
    "divide",
    "subtract",
]
