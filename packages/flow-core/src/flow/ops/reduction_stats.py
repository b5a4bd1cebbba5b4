"""Statistics and scans: var std var_mean std_mean logsumexp norm cumsum cumprod.

Gradients are written with flow ops (so they differentiate again); divisions
that may hit zero use a safe denominator inside ``where`` so that the unused
branch cannot turn the second derivative into NaN.
"""

from __future__ import annotations

import math

import numpy as np

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel, promote_float
from flow.ops.reduction import (
    _dims_attr,
    _half_acc,
    _reduce_meta,
    _reduced_count,
    axes,
    check_tensor,
    ctx_dims,
    keep,
)
from flow.registry.ops import ANY, FLOAT, FLOAT_PROMOTE, Attr


def _where(c, a, b):
    from flow.ops.clamp_where import where

    return where(c, a, b)


# -- var, std ---------------------------------------------------------------------------------
_VAR_ATTRS = [
    Attr("dim", (tuple, type(None)), None, items=int),
    Attr("correction", float, 1.0),
    Attr("keepdim", bool, False),
]


def _var_meta(op):
    rule = _reduce_meta(op)

    def meta(x, dim=None, correction=1.0, keepdim=False):
        return rule(x, dim, keepdim)

    return meta


def _denominator(shape, dims, correction) -> float:
    n = 1
    for d in dims:
        n *= shape[d]
    return max(n - correction, 0.0)


def _var_backward(ctx, gvar, op):
    """d var / d x = 2 (x - mean) / (N - correction), times the (reduced) gradient."""
    from flow.ops.reduction import mean

    (x,) = ctx.inputs
    shape, dims, kd = ctx_dims(ctx, op)
    denom = _denominator(shape, dims, float(ctx.attrs.get("correction", 1.0)))
    centred = x - mean(x, dims or None, keepdim=True)
    return keep(gvar, shape, dims, kd) * centred * (2.0 / denom if denom else math.inf)


def _var_grad(ctx, g):
    return (_var_backward(ctx, g, "var"),)


def _std_grad(ctx, g):
    (out,) = ctx.outputs
    safe = _where(out == 0, 1.0, out)
    return (_var_backward(ctx, _where(out == 0, 0.0, g / (safe * 2.0)), "std"),)


VAR = defop("var", ["input"], _VAR_ATTRS, meta=_var_meta("var"), dtypes=FLOAT, grad=_var_grad, save="inputs")
STD = defop("std", ["input"], _VAR_ATTRS, meta=_var_meta("std"), dtypes=FLOAT, grad=_std_grad, save="both")


def _var_kernel(take_sqrt: bool):
    def factory(xp):
        def run(x, dim=None, correction=1.0, keepdim=False):
            ax = axes(x, dim)
            xf = _half_acc(xp, x)
            n = _reduced_count(x.shape, ax)
            with np.errstate(invalid="ignore", divide="ignore"):
                m = xp.sum(xf, axis=ax, keepdims=True) / n
                d = xf - m
                v = xp.sum(d * d, axis=ax, keepdims=keepdim) / max(n - correction, 0.0)
                if take_sqrt:
                    v = xp.sqrt(v)
            return xp.asarray(v).astype(x.dtype, copy=False)

        return run

    return factory


kernel(VAR)(_var_kernel(False))
kernel(STD)(_var_kernel(True))


def _correction(name, unbiased, correction) -> float:
    if unbiased is not None and correction is not None:
        raise OpError(name, "give only one of 'unbiased' and 'correction'")
    if correction is not None:
        if isinstance(correction, bool) or not isinstance(correction, (int, float)):
            raise OpTypeError(name, f"'correction' must be a number, got {type(correction).__name__}")
        return float(correction)
    if unbiased is not None:
        return 1.0 if unbiased else 0.0
    return 1.0


def _var_call(op, name, input, dim, unbiased, keepdim, correction):
    check_tensor(name, input)
    if isinstance(dim, bool):  # the legacy var(input, unbiased) form
        dim, unbiased = None, dim
    return call(
        op, input, dim=_dims_attr(dim, name), correction=_correction(name, unbiased, correction), keepdim=bool(keepdim)
    )


def var(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """Variance over ``dim`` with Bessel's ``correction`` (1 by default; ``unbiased=False`` means 0)."""
    return _var_call(VAR, "var", input, dim, unbiased, keepdim, correction)


def std(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """Standard deviation over ``dim`` (see :func:`var`)."""
    return _var_call(STD, "std", input, dim, unbiased, keepdim, correction)


def var_mean(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """``(var, mean)`` over ``dim``."""
    from flow.ops.reduction import mean

    v = var(input, dim, unbiased, keepdim, correction=correction)
    return v, mean(input, None if isinstance(dim, bool) else dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """``(std, mean)`` over ``dim``."""
    from flow.ops.reduction import mean

    s = std(input, dim, unbiased, keepdim, correction=correction)
    return s, mean(input, None if isinstance(dim, bool) else dim, keepdim)


# -- logsumexp ----------------------------------------------------------------------------------
def _lse_grad(ctx, g):
    from flow.ops.unary import exp

    (x,), (out,) = ctx.inputs, ctx.outputs
    shape, dims, kd = ctx_dims(ctx, "logsumexp")
    return (keep(g, shape, dims, kd) * exp(x - keep(out, shape, dims, kd)),)


LOGSUMEXP = defop(
    "logsumexp",
    ["input"],
    [Attr("dim", (tuple, type(None)), None, items=int), Attr("keepdim", bool, False)],
    meta=_reduce_meta("logsumexp"),
    dtypes=FLOAT_PROMOTE,
    grad=_lse_grad,
    save="both",
)


@kernel(LOGSUMEXP)
def _lse_kernel(xp):
    def run(x, dim=None, keepdim=False):
        ax = axes(x, dim)
        xf = _half_acc(xp, x)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            if xf.size == 0:
                return xp.asarray(xp.log(xp.sum(xf, axis=ax, keepdims=keepdim))).astype(x.dtype, copy=False)
            m = xp.max(xf, axis=ax, keepdims=True)
            m = xp.where(xp.isfinite(m), m, 0)  # a row of -inf (or with an inf): no shift
            s = xp.log(xp.sum(xp.exp(xf - m), axis=ax, keepdims=True)) + m
        if not keepdim:
            s = s.reshape(()) if ax is None else xp.squeeze(s, axis=ax)
        return xp.asarray(s).astype(x.dtype, copy=False)

    return run


def logsumexp(input, dim=None, keepdim: bool = False):
    """``log(sum(exp(input)))`` over ``dim``, computed stably (integers are promoted to float)."""
    check_tensor("logsumexp", input)
    return call(LOGSUMEXP, promote_float(LOGSUMEXP, input), dim=_dims_attr(dim, "logsumexp"), keepdim=bool(keepdim))


# -- norm ------------------------------------------------------------------------------------
def _norm_meta(x, p=2.0, dim=None, keepdim=False):
    empty_ok = not (p == math.inf or p == -math.inf)
    return _reduce_meta("norm", nonempty=not empty_ok)(x, dim, keepdim)


def _norm_grad(ctx, g):
    from flow.ops.unary import abs as _abs
    from flow.ops.unary import sign

    (x,), (out,) = ctx.inputs, ctx.outputs
    p = float(ctx.attrs.get("p", 2.0))
    shape, dims, kd = ctx_dims(ctx, "norm")
    gk, ok = keep(g, shape, dims, kd), keep(out, shape, dims, kd)
    if p == 0:
        from flow._creation import zeros_like

        return (zeros_like(x),)
    if p == 1:
        return (gk * sign(x),)
    if math.isinf(p):  # like amax/amin of |x|: ties share evenly
        mask = _abs(x) == ok.detach()
        return (_where(mask, sign(x) * (gk / mask.sum(dim=dims, keepdim=True)), 0.0),)
    safe = _where(ok == 0, 1.0, ok)
    if p == 2:
        return (x * _where(ok == 0, 0.0, gk / safe),)
    ax = _abs(x)
    ax_safe = _where(ax == 0, 1.0, ax)
    local = _where(ax == 0, 0.0, sign(x) * ax_safe ** (p - 1.0))
    return (local * _where(ok == 0, 0.0, gk / safe ** (p - 1.0)),)


NORM = defop(
    "norm",
    ["input"],
    [Attr("p", float, 2.0), Attr("dim", (tuple, type(None)), None, items=int), Attr("keepdim", bool, False)],
    meta=_norm_meta,
    dtypes=FLOAT,
    grad=_norm_grad,
    save="both",
)


@kernel(NORM)
def _norm_kernel(xp):
    def run(x, p=2.0, dim=None, keepdim=False):
        ax = axes(x, dim)
        a = xp.abs(_half_acc(xp, x))
        if p == math.inf:
            r = xp.max(a, axis=ax, keepdims=keepdim)
        elif p == -math.inf:
            r = xp.min(a, axis=ax, keepdims=keepdim)
        elif p == 0:
            r = xp.sum(a != 0, axis=ax, keepdims=keepdim).astype(a.dtype)
        elif p == 1:
            r = xp.sum(a, axis=ax, keepdims=keepdim)
        elif p == 2:
            r = xp.sqrt(xp.sum(a * a, axis=ax, keepdims=keepdim))
        else:
            with np.errstate(divide="ignore", over="ignore"):
                r = xp.sum(a**p, axis=ax, keepdims=keepdim) ** (1.0 / p)
        return xp.asarray(r).astype(x.dtype, copy=False)

    return run


def norm(input, p="fro", dim=None, keepdim: bool = False, dtype=None):
    """Vector p-norm over ``dim`` (all elements when None): p = 2 ('fro'), 1, inf, -inf, 0, or any number."""
    check_tensor("norm", input)
    if dtype is not None:
        input = input.to(dtype)
    if p is None or p == "fro":
        p = 2.0
    elif isinstance(p, str):
        raise OpError("norm", f"'p'={p!r} is not supported; use 'fro' or a number (the nuclear norm needs flow.linalg)")
    elif isinstance(p, bool) or not isinstance(p, (int, float)):
        raise OpTypeError("norm", f"'p' must be a number or 'fro', got {type(p).__name__}")
    return call(NORM, input, p=float(p), dim=_dims_attr(dim, "norm"), keepdim=bool(keepdim))


# -- cumsum, cumprod -----------------------------------------------------------------------------
def _scan_meta(op):
    def rule(x, dim=0, reverse=False):
        M.wrap_dim(op, dim, len(x.shape))
        dt = D.int64 if x.dtype.category < 2 else x.dtype
        return M.TensorMeta(tuple(x.shape), dt, x.device)

    return rule


def _cumsum_grad(ctx, g):
    # the gradient of a forward scan is the reverse scan, and the other way round
    return (_cumsum(g, ctx.attrs["dim"], not ctx.attrs.get("reverse", False)),)


def _cumprod_grad(ctx, g):
    (x,), (out,) = ctx.inputs, ctx.outputs
    d = ctx.attrs["dim"]
    if not x.shape:
        return (g,)
    zero = x == 0
    zeros_so_far = _cumsum(zero, d, False)
    before = zeros_so_far == 0  # positions before the first zero along dim
    first_zero = zero & (zeros_so_far == 1)
    x_safe = _where(zero, 1.0, x)
    # before the first zero: sum_{j >= i} g_j out_j / x_i
    grad = _where(before, _cumsum(g * out, d, True) / x_safe, 0.0)
    # at the first zero: sum_{j >= z} g_j prod_{k <= j, k != z} x_k, the scan with x_z replaced by 1
    skipped = call(CUMPROD, _where(first_zero, 1.0, x), dim=d)
    return (grad + _where(first_zero, _cumsum(g * skipped, d, True), 0.0),)


CUMSUM = defop(
    "cumsum",
    ["input"],
    [Attr("dim", int), Attr("reverse", bool, False)],
    meta=_scan_meta("cumsum"),
    dtypes=ANY,
    grad=_cumsum_grad,
    save="none",
    doc="Cumulative sum along ``dim`` (from the end when ``reverse``).",
)
CUMPROD = defop(
    "cumprod", ["input"], [Attr("dim", int)], meta=_scan_meta("cumprod"), dtypes=ANY, grad=_cumprod_grad, save="both"
)


def _scan_kernel(fname):
    def factory(xp):
        f = getattr(xp, fname)

        def run(x, dim=0, reverse=False):
            dt = xp.int64 if x.dtype.kind in "biu" else None
            if x.ndim == 0:
                return xp.asarray(x, dtype=dt) if dt else x.copy()
            xf = _half_acc(xp, x)
            if reverse:
                r = xp.flip(f(xp.flip(xf, dim), axis=dim, dtype=dt), dim)
            else:
                r = f(xf, axis=dim, dtype=dt)
            return xp.ascontiguousarray(r).astype(dt or x.dtype, copy=False)

        return run

    return factory


kernel(CUMSUM)(_scan_kernel("cumsum"))
kernel(CUMPROD)(_scan_kernel("cumprod"))


def _scan_dim(name, dim):
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise OpTypeError(name, f"'dim' must be an int, got {type(dim).__name__} {dim!r}")
    return int(dim)


def _cumsum(x, dim, reverse):
    return call(CUMSUM, x, dim=dim, reverse=reverse)


def cumsum(input, dim, *, dtype=None):
    """Cumulative sum along ``dim``; integers and bools accumulate in int64."""
    check_tensor("cumsum", input)
    if dtype is not None:
        input = input.to(dtype)
    return call(CUMSUM, input, dim=_scan_dim("cumsum", dim), reverse=False)


def cumprod(input, dim, *, dtype=None):
    """Cumulative product along ``dim``; the gradient handles zeros."""
    check_tensor("cumprod", input)
    if dtype is not None:
        input = input.to(dtype)
    return call(CUMPROD, input, dim=_scan_dim("cumprod", dim))


# -- opcheck samples ---------------------------------------------------------------------
from flow.errors import OpIndexError  # noqa: E402
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _var_samples():
    x = S.uniform((3, 4, 5), seed=21)
    yield SampleInput((x,), {"dim": None, "correction": 1.0, "keepdim": False})
    yield SampleInput((x,), {"dim": (1,), "correction": 0.0, "keepdim": True})
    yield SampleInput((x,), {"dim": (0, 2), "correction": 1.0, "keepdim": False})
    yield SampleInput((x,), {"dim": (-1,), "correction": 2.0, "keepdim": False})
    yield from S.dim_errors(x, {"correction": 1.0, "keepdim": False})


def _lse_samples():
    x = S.uniform((3, 4, 5), -3, 3, seed=22)
    yield SampleInput((x,), {"dim": None, "keepdim": False})
    yield SampleInput((x,), {"dim": (1,), "keepdim": True})
    yield SampleInput((x,), {"dim": (0, 2), "keepdim": False})
    yield SampleInput((S.t(np.array([[1000.0, 999.0], [-1000.0, -1001.0]])),), {"dim": (1,), "keepdim": False})
    yield from S.dim_errors(x, {"keepdim": False})


def _norm_samples():
    x = S.away_from((3, 4), (0.0,), seed=23)
    for p in (2.0, 1.0, 3.0, 0.5, math.inf, -math.inf, 0.0):
        yield SampleInput((x,), {"p": p, "dim": None, "keepdim": False})
    yield SampleInput((x,), {"p": 2.0, "dim": (1,), "keepdim": True})
    yield SampleInput((x,), {"p": 1.5, "dim": (0,), "keepdim": False})
    yield SampleInput((S.uniform((2, 3, 2), seed=24),), {"p": 2.0, "dim": (0, 2), "keepdim": False})
    yield SampleInput((S.uniform((2, 0), seed=24),), {"p": 1.0, "dim": (1,), "keepdim": False})
    yield from S.dim_errors(x, {"p": 2.0, "keepdim": False})
    yield ErrorInput(
        (S.uniform((2, 0), seed=24),), {"p": math.inf, "dim": (1,), "keepdim": False}, OpIndexError, "size 0"
    )


def _cumsum_samples():
    x = S.uniform((3, 4, 2), seed=25)
    for dim in (0, 1, -1):
        yield SampleInput((x,), {"dim": dim, "reverse": False})
    yield SampleInput((x,), {"dim": 1, "reverse": True})
    yield SampleInput((S.ints((3, 4), -3, 3, seed=26),), {"dim": 1, "reverse": False})
    yield SampleInput((S.uniform((), seed=27),), {"dim": 0, "reverse": False})
    yield SampleInput((S.bools((3, 4), seed=26),), {"dim": 0, "reverse": True})
    yield from S.dim_errors(x, {"reverse": False}, tuple_dims=False)


def _cumprod_samples():
    x = S.uniform((3, 4, 2), 0.5, 1.5, seed=28)
    for dim in (0, 1, -1):
        yield SampleInput((x,), {"dim": dim})
    zeros = S.t(np.array([[0.5, 0.0, 1.5, -2.0, 0.7], [1.2, -0.7, 0.9, 1.1, 0.0], [0.0, 1.3, 0.0, 0.8, 1.4]]))
    yield SampleInput((zeros,), {"dim": 1})
    yield SampleInput((zeros,), {"dim": 0})
    yield SampleInput((S.ints((3, 4), -3, 3, seed=29),), {"dim": 1})
    yield from S.dim_errors(x, tuple_dims=False)


set_samples(VAR, _var_samples)
set_samples(STD, _var_samples)
set_samples(LOGSUMEXP, _lse_samples)
set_samples(NORM, _norm_samples)
set_samples(CUMSUM, _cumsum_samples)
set_samples(CUMPROD, _cumprod_samples)

__all__ = ["var", "std", "var_mean", "std_mean", "logsumexp", "norm", "cumsum", "cumprod"]
