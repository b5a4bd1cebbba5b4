"""Clamping and selection: clamp (clamp_min, clamp_max, clip), where, and the composites built on them
(lerp, logit, nan_to_num)."""

from __future__ import annotations

import builtins

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, generic, kernel
from flow.ops._grad_util import sum_to_shape
from flow.ops.unary import _t, log
from flow.registry.ops import ANY, Attr, dtypes


# -- clamp ------------------------------------------------------------------------
def _clamp_meta(x, min=None, max=None):
    if min is None and max is None:
        raise OpError("clamp", "at least one of 'min' and 'max' must be given")
    if not x.dtype.is_floating_point and (isinstance(min, float) or isinstance(max, float)):
        # the result would be a float tensor: flow.clamp promotes the input first
        raise OpTypeError(
            "clamp", f"float bounds need a floating-point input, got {x.dtype} with min={min!r}, max={max!r}"
        )
    return M.TensorMeta(tuple(x.shape), x.dtype, x.device)


def _clamp_grad(ctx, g):
    x = ctx.inputs[0]
    lo, hi = ctx.attrs["min"], ctx.attrs["max"]
    mask = None
    if lo is not None:
        mask = x >= lo
    if hi is not None:
        m2 = x <= hi
        mask = m2 if mask is None else mask & m2
    return (g * mask,)


CLAMP = defop(
    "clamp",
    ["input"],
    [Attr("min", (float, int), None), Attr("max", (float, int), None)],
    meta=_clamp_meta,
    dtypes=ANY,
    grad=_clamp_grad,
    save="inputs",
    elementwise=True,
)


@kernel(CLAMP)
def _clamp_kernel(xp):
    import numpy as np

    def run(x, min=None, max=None):
        if x.dtype.kind in "iub":  # a bound outside the dtype's range clamps like the range's end
            lo, hi = (0, 1) if x.dtype.kind == "b" else (np.iinfo(x.dtype).min, np.iinfo(x.dtype).max)
            min = None if min is None else builtins.min(builtins.max(min, lo), hi)
            max = None if max is None else builtins.min(builtins.max(max, lo), hi)
        if min is not None and max is not None and min > max:
            return xp.full_like(x, max)
        return xp.clip(x, min, max).astype(x.dtype, copy=False)

    return run


def clamp(input, min=None, max=None):
    """Clamp into [min, max]; tensor bounds broadcast like ``torch.clamp``."""
    T = _t()
    if isinstance(min, T) or isinstance(max, T):
        out = input
        if min is not None:
            out = maximum(out, min)
        if max is not None:
            out = minimum(out, max)
        return out
    if min is None and max is None:
        raise OpError("clamp", "at least one of 'min' and 'max' must be given")
    if not input.dtype.is_floating_point:
        min = None if min is None else int(min) if float(min).is_integer() else min
        max = None if max is None else int(max) if float(max).is_integer() else max
        from flow.ops.conversion import to_dtype

        if isinstance(min, float) or isinstance(max, float):
            input = to_dtype(input, D._default_dtype)
        elif input.dtype is D.bool:  # bool and int bounds promote to int64, as PyTorch
            input = to_dtype(input, D.int64)
    return call(CLAMP, input, min=min, max=max)


def clamp_min(input, min):
    return clamp(input, min=min)


def clamp_max(input, max):
    return clamp(input, max=max)


clip = clamp


def maximum(a, b):
    from flow.ops.arith import maximum as _m

    return _m(a, b)


def minimum(a, b):
    from flow.ops.arith import minimum as _m

    return _m(a, b)


# -- where -------------------------------------------------------------------------
def _where_meta(cond, x, y):
    xs = [t for t in (x, y) if M.is_tensor_like(t)]
    dev = M.check_same_device("where", cond, *xs)
    if len(xs) == 2 and x.dtype != y.dtype:
        raise OpTypeError(
            "where", f"'input' and 'other' must have the same dtype after promotion, got {x.dtype} and {y.dtype}"
        )
    shape = M.broadcast_shapes("where", *[tuple(t.shape) for t in (cond, *xs)])
    return M.TensorMeta(shape, xs[0].dtype, dev)


def _where_grad(ctx, g):
    cond = ctx.inputs[0]
    gx = gy = None
    if ctx.next[1][0] is not None:
        gx = sum_to_shape(where(cond, g, 0.0), ctx.input_shape(1))
    if ctx.next[2][0] is not None:
        gy = sum_to_shape(where(cond, 0.0, g), ctx.input_shape(2))
    return None, gx, gy


# uint8 conditions are taken as PyTorch takes them (nonzero is true)
_CONDITION = dtypes(names=["bool", "uint8"], text="a bool (or uint8) tensor")
WHERE = defop(
    "where",
    ["condition", "input", "other"],
    meta=_where_meta,
    grad=_where_grad,
    save="inputs",
    dtypes={"condition": _CONDITION, "input": ANY, "other": ANY},
)
generic(WHERE, lambda xp: xp.where)


def where(condition, input=None, other=None):
    """Pick from ``input`` where ``condition`` holds, else from ``other`` (broadcasting)."""
    T = _t()
    if input is None and other is None:
        from flow.ops.indexing import nonzero

        return nonzero(condition, as_tuple=True)
    if not isinstance(condition, T):
        raise OpTypeError("where", f"'condition' must be a Tensor, got {type(condition).__name__}")
    if not _CONDITION.accepts(condition.dtype):
        raise OpTypeError("where", f"'condition' must be {_CONDITION.text}, got {condition.dtype}")
    if isinstance(input, T) and isinstance(other, T):
        dt = D.promote_types(input.dtype, other.dtype)
        if input.ndim == 0 and other.ndim != 0 and input.dtype.category <= other.dtype.category:
            dt = other.dtype
        elif other.ndim == 0 and input.ndim != 0 and other.dtype.category <= input.dtype.category:
            dt = input.dtype
        input, other = input.to(dt), other.to(dt)
        args = (condition, input, other)
    elif isinstance(input, T):
        dt = D.scalar_result_dtype(input.dtype, type(other))
        input = input.to(dt)
        args = (condition, input, dt.np.type(other))
    elif isinstance(other, T):
        dt = D.scalar_result_dtype(other.dtype, type(input))
        other = other.to(dt)
        args = (condition, dt.np.type(input), other)
    else:
        dt = D.result_type(input, other)
        from flow._creation import full

        args = (condition, full((), input, dtype=dt, device=condition.device), dt.np.type(other))
    return call(WHERE, *args)


# -- lerp ----------------------------------------------------------------------------
def lerp(input, end, weight):
    """``input + weight * (end - input)``."""
    return input + (end - input) * weight


# -- logit / misc composites -----------------------------------------------------------
def logit(input, eps: float | None = None):
    x = input if eps is None else clamp(input, eps, 1 - eps)
    return log(x / (1 - x))


def nan_to_num(input, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
    import numpy as np

    info = np.finfo(input.dtype.np) if input.dtype.is_floating_point else None
    posinf = posinf if posinf is not None else (float(info.max) if info else 0)
    neginf = neginf if neginf is not None else (float(info.min) if info else 0)
    from flow.ops.compare import isinf, isnan

    out = where(isnan(input), nan, input)
    out = where(isinf(out) & (out > 0), posinf, out)
    return where(isinf(out) & (out < 0), neginf, out)


# -- opcheck samples ---------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _clamp_samples():
    x = S.away_from((3, 4), (-0.5, 0.7), seed=3)
    yield SampleInput((x,), {"min": -0.5, "max": 0.7})
    yield SampleInput((x,), {"min": -0.5, "max": None})
    yield SampleInput((x,), {"min": None, "max": 0.7})
    yield SampleInput((S.ints((3, 4), -3, 3),), {"min": -1, "max": 1})
    yield SampleInput((S.ints((3, 4), 0, 9, dtype=D.uint8),), {"min": -1, "max": 300})
    yield ErrorInput((x,), {"min": None, "max": None}, OpError, "at least one of 'min' and 'max'")
    yield ErrorInput((S.ints((3, 4)),), {"min": 0.5, "max": None}, OpTypeError, "float bounds need a floating-point")


def _where_samples():
    yield SampleInput((S.bools((3, 4)), S.uniform((3, 4), seed=1), S.uniform((3, 4), seed=2)))
    yield SampleInput((S.bools((3, 1), seed=3), S.uniform((1, 4), seed=4), S.uniform((3, 4), seed=5)))
    yield SampleInput((S.ints((3, 4), 0, 2, seed=6, dtype=D.uint8), S.uniform((3, 4), seed=1), S.uniform((), seed=2)))
    yield ErrorInput(
        (S.bools((3, 4)), S.uniform((2, 4), seed=1), S.uniform((3, 4), seed=2)), {}, OpError, "cannot be broadcast"
    )
    yield ErrorInput(
        (S.bools((3, 4)), S.uniform((3, 4), seed=1), S.ints((3, 4))), {}, OpTypeError, "must have the same dtype"
    )


set_samples(CLAMP, _clamp_samples)
set_samples(WHERE, _where_samples)

__all__ = ["clamp", "clamp_min", "clamp_max", "clip", "where", "lerp", "logit", "nan_to_num"]
