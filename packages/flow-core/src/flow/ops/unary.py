"""Unary elementwise math and activations, plus where/clamp/lerp."""

from __future__ import annotations

import builtins
import math

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import ANY_TENSOR, defop, generic, kernel, promote_float
from flow.ops._grad_util import sum_to_shape
from flow.registry.ops import ANY, FLOAT, FLOAT_PROMOTE, NUMERIC, Attr, dtypes

Tensor = None  # bound lazily below


def _t():
    global Tensor
    if Tensor is None:
        from flow._tensor import Tensor as T

        Tensor = T
    return Tensor


def _unary(handle, x, name: str):
    if not isinstance(x, _t()):
        raise OpTypeError(name, f"'input' must be a Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        x = promote_float(handle, x)  # as the schema says: these ops promote integer and bool input
    return call(handle, x)


def _def_unary(name: str, np_name: str | None, grad, save: str, doc: str):
    h = defop(name, ["input"], meta=M.same, dtypes=FLOAT_PROMOTE, grad=grad, save=save, elementwise=True)
    if np_name is not None:
        generic(h, lambda xp, n=np_name: getattr(xp, n))

    def fn(input):
        return _unary(h, input, name)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = doc
    return h, fn


# gradients written with flow ops (so they are differentiable again)
def _g_exp(ctx, g):
    return (g * ctx.outputs[0],)


def _g_log(ctx, g):
    return (g / ctx.inputs[0],)


def _g_log2(ctx, g):
    return (g / (ctx.inputs[0] * math.log(2.0)),)


def _g_log10(ctx, g):
    return (g / (ctx.inputs[0] * math.log(10.0)),)


def _g_log1p(ctx, g):
    return (g / (ctx.inputs[0] + 1.0),)


def _g_expm1(ctx, g):
    return (g * (ctx.outputs[0] + 1.0),)


def _g_sqrt(ctx, g):
    return (g / (ctx.outputs[0] * 2.0),)


def _g_rsqrt(ctx, g):
    o = ctx.outputs[0]
    return (g * o * o * o * -0.5,)


def _g_abs(ctx, g):
    return (g * sign(ctx.inputs[0]),)


def _g_zero(ctx, g):
    return (g * 0.0,)


def _g_sin(ctx, g):
    return (g * cos(ctx.inputs[0]),)


def _g_cos(ctx, g):
    return (-g * sin(ctx.inputs[0]),)


def _g_tan(ctx, g):
    o = ctx.outputs[0]
    return (g * (o * o + 1.0),)


def _g_tanh(ctx, g):
    o = ctx.outputs[0]
    return (g * (1.0 - o * o),)


def _g_sigmoid(ctx, g):
    o = ctx.outputs[0]
    return (g * o * (1.0 - o),)


def _g_relu(ctx, g):
    return (g * (ctx.outputs[0] > 0),)


def _g_erf(ctx, g):
    x = ctx.inputs[0]
    return (g * exp(-(x * x)) * (2.0 / math.sqrt(math.pi)),)


def _g_asin(ctx, g):
    x = ctx.inputs[0]
    return (g * rsqrt(1.0 - x * x),)


def _g_acos(ctx, g):
    x = ctx.inputs[0]
    return (-g * rsqrt(1.0 - x * x),)


def _g_atan(ctx, g):
    x = ctx.inputs[0]
    return (g / (x * x + 1.0),)


def _g_sinh(ctx, g):
    return (g * cosh(ctx.inputs[0]),)


def _g_cosh(ctx, g):
    return (g * sinh(ctx.inputs[0]),)


def _g_reciprocal(ctx, g):
    o = ctx.outputs[0]
    return (-g * o * o,)


def _g_square(ctx, g):
    return (g * ctx.inputs[0] * 2.0,)


def _erf_kernel(xp):
    try:
        from scipy.special import erf as _erf  # noqa: F401
    except ImportError:
        _erf = None
    if xp.__name__ == "numpy":
        import numpy as np

        if _erf is not None:
            return lambda x: _erf(x).astype(x.dtype, copy=False)
        verf = np.vectorize(math.erf, otypes=[np.float64])
        return lambda x: verf(x).astype(x.dtype, copy=False)
    import importlib

    special = importlib.import_module(xp.__name__ + "x.scipy.special")  # cupyx.scipy.special
    return special.erf


def _sigmoid_kernel(xp):
    def run(x):
        # numerically stable: exp of a non-positive number only
        e = xp.exp(-xp.abs(x))
        return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)

    return run


def _relu_kernel(xp):
    zeros: dict = {}

    def run(x):
        # a zero of x's own dtype: NumPy takes much longer to combine an array with a Python int
        z = zeros.get(x.dtype)
        if z is None:
            z = zeros[x.dtype] = x.dtype.type(0)
        return xp.maximum(x, z)

    return run


def _rsqrt_kernel(xp):
    def run(x):
        return (1 / xp.sqrt(x)).astype(x.dtype, copy=False)

    return run


EXP, exp = _def_unary("exp", "exp", _g_exp, "outputs", "Elementwise e**x.")
EXPM1, expm1 = _def_unary("expm1", "expm1", _g_expm1, "outputs", "Elementwise e**x - 1.")
LOG, log = _def_unary("log", "log", _g_log, "inputs", "Natural logarithm.")
LOG2, log2 = _def_unary("log2", "log2", _g_log2, "inputs", "Base-2 logarithm.")
LOG10, log10 = _def_unary("log10", "log10", _g_log10, "inputs", "Base-10 logarithm.")
LOG1P, log1p = _def_unary("log1p", "log1p", _g_log1p, "inputs", "log(1 + x), accurate for small x.")
SQRT, sqrt = _def_unary("sqrt", "sqrt", _g_sqrt, "outputs", "Square root.")
RSQRT, rsqrt = _def_unary("rsqrt", None, _g_rsqrt, "outputs", "1 / sqrt(x).")
SIN, sin = _def_unary("sin", "sin", _g_sin, "inputs", "Sine.")
COS, cos = _def_unary("cos", "cos", _g_cos, "inputs", "Cosine.")
TAN, tan = _def_unary("tan", "tan", _g_tan, "outputs", "Tangent.")
ASIN, asin = _def_unary("asin", "arcsin", _g_asin, "inputs", "Arcsine.")
ACOS, acos = _def_unary("acos", "arccos", _g_acos, "inputs", "Arccosine.")
ATAN, atan = _def_unary("atan", "arctan", _g_atan, "inputs", "Arctangent.")
SINH, sinh = _def_unary("sinh", "sinh", _g_sinh, "inputs", "Hyperbolic sine.")
COSH, cosh = _def_unary("cosh", "cosh", _g_cosh, "inputs", "Hyperbolic cosine.")
TANH, tanh = _def_unary("tanh", "tanh", _g_tanh, "outputs", "Hyperbolic tangent.")
SIGMOID, sigmoid = _def_unary("sigmoid", None, _g_sigmoid, "outputs", "Logistic sigmoid 1 / (1 + e**-x).")
ERF, erf = _def_unary("erf", None, _g_erf, "inputs", "The error function.")
RECIPROCAL, reciprocal = _def_unary("reciprocal", "reciprocal", _g_reciprocal, "outputs", "1 / x.")
generic(RSQRT, _rsqrt_kernel)
generic(SIGMOID, _sigmoid_kernel)
generic(ERF, _erf_kernel)

arcsin, arccos, arctan = asin, acos, atan


# -- dtype-preserving unary ops (ints allowed) ----------------------------------
def _def_unary_keep(name, np_name, grad, save, doc, allow_bool=False):
    h = defop(name, ["input"], meta=M.same, dtypes=ANY if allow_bool else NUMERIC, grad=grad, save=save,
              elementwise=True,
              no_error_samples=ANY_TENSOR if allow_bool else "")
    if np_name is not None:
        generic(h, lambda xp, n=np_name: getattr(xp, n))

    def fn(input):
        if not isinstance(input, _t()):
            raise OpTypeError(name, f"'input' must be a Tensor, got {type(input).__name__}")
        return call(h, input)

    fn.__name__ = name
    fn.__doc__ = doc
    return h, fn


NEG, neg = _def_unary_keep("neg", "negative", lambda ctx, g: (-g,), "none", "Elementwise negation.")
ABS, abs = _def_unary_keep("abs", "absolute", _g_abs, "inputs", "Absolute value.")  # noqa: A001
SIGN, sign = _def_unary_keep("sign", None, _g_zero, "none", "Sign (-1, 0, 1).", allow_bool=True)
RELU, relu = _def_unary_keep("relu", None, _g_relu, "outputs", "max(x, 0).")
FLOOR, floor = _def_unary_keep("floor", "floor", _g_zero, "none", "Round down.")
CEIL, ceil = _def_unary_keep("ceil", "ceil", _g_zero, "none", "Round up.")
ROUND, _round = _def_unary_keep("round", "round", _g_zero, "none", "Round half to even.")
TRUNC, trunc = _def_unary_keep("trunc", "trunc", _g_zero, "none", "Round toward zero.")
generic(RELU, _relu_kernel)
generic(SIGN, lambda xp: lambda x: x.copy() if x.dtype.kind == "b" else xp.sign(x))
negative = neg
absolute = abs


def round(input, *, decimals: int = 0):  # noqa: A001
    """Round half to even, as ``torch.round``."""
    if decimals == 0:
        return _round(input)
    s = 10.0**decimals
    return _round(input * s) / s


def _square_meta(x):
    # as PyTorch: squaring bools gives int64
    return M.TensorMeta(tuple(x.shape), D.int64 if x.dtype is D.bool else x.dtype, x.device)


SQUARE_OP = defop("square", ["input"], meta=_square_meta, dtypes=ANY, grad=_g_square, save="inputs",
                  elementwise=True, no_error_samples=ANY_TENSOR)


@kernel(SQUARE_OP)
def _square_kernel(xp):
    def run(x):
        return xp.square(x.astype(xp.int64) if x.dtype == xp.bool_ else x)

    return run


def square(input):
    """``input * input`` (keeps integer dtypes; bools give int64)."""
    if not isinstance(input, _t()):
        raise OpTypeError("square", f"'input' must be a Tensor, got {type(input).__name__}")
    return call(SQUARE_OP, input)


def positive(input):
    return input


# -- activations with attributes --------------------------------------------------
def _gelu_meta(x, approximate="none"):
    return M.TensorMeta(tuple(x.shape), x.dtype, x.device)


def _gelu_grad(ctx, g):
    return (call(GELU_BACKWARD, g, ctx.inputs[0], approximate=ctx.attrs["approximate"]),)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_backward_grad(ctx, gg):
    # d/dg = gelu'(x); d/dx = g * gelu''(x)
    g, x = ctx.inputs
    approx = ctx.attrs["approximate"]
    dg = call(GELU_BACKWARD, gg, x, approximate=approx)
    if approx == "tanh":
        u = (x + x * x * x * 0.044715) * _SQRT_2_OVER_PI
        t = tanh(u)
        du = (x * x * 0.134145 + 1.0) * _SQRT_2_OVER_PI
        sech2 = 1.0 - t * t
        # d/dx [0.5(1+t) + 0.5 x sech2 du] = sech2 du + 0.5 x d(sech2 du)/dx
        d2 = sech2 * du + x * 0.5 * (sech2 * t * -2.0 * du * du + sech2 * x * (0.26829 * _SQRT_2_OVER_PI))
    else:
        pdf = exp(x * x * -0.5) * (1.0 / math.sqrt(2.0 * math.pi))
        d2 = pdf * 2.0 - x * x * pdf
    return dg, gg * g * d2


GELU = defop("gelu", ["input"], [Attr("approximate", str, "none", ("none", "tanh"))], meta=_gelu_meta,
             dtypes=FLOAT, grad=_gelu_grad, save="inputs", elementwise=True)
GELU_BACKWARD = defop("gelu_backward", ["grad_output", "input"],
                      [Attr("approximate", str, "none", ("none", "tanh"))], meta=M.same_shapes("gelu_backward"),
                      dtypes=FLOAT, grad=_gelu_backward_grad, save="inputs", elementwise=True)


@kernel(GELU)
def _gelu_kernel(xp):
    erf_k = _erf_kernel(xp)

    def run(x, approximate="none"):
        if approximate == "tanh":
            return (0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))).astype(x.dtype, copy=False)
        return (0.5 * x * (1 + erf_k(x / math.sqrt(2.0)))).astype(x.dtype, copy=False)

    return run


@kernel(GELU_BACKWARD)
def _gelu_bw_kernel(xp):
    erf_k = _erf_kernel(xp)

    def run(g, x, approximate="none"):
        if approximate == "tanh":
            u = _SQRT_2_OVER_PI * (x + 0.044715 * x**3)
            t = xp.tanh(u)
            d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
        else:
            cdf = 0.5 * (1 + erf_k(x / math.sqrt(2.0)))
            pdf = xp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
            d = cdf + x * pdf
        return (g * d).astype(x.dtype, copy=False)

    return run


def gelu(input, approximate: str = "none"):
    """Gaussian error linear unit; ``approximate='tanh'`` for the tanh form."""
    if approximate not in ("none", "tanh"):
        raise OpError("gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return call(GELU, input, approximate=approximate)


def silu(input):
    """x * sigmoid(x), as one fused op (see :mod:`flow.ops.nn_act`)."""
    from flow.ops.nn_act import silu as _fused_silu

    return _fused_silu(input)


def _softplus_meta(x, beta=1.0, threshold=20.0):
    return M.TensorMeta(tuple(x.shape), x.dtype, x.device)


SOFTPLUS = defop("softplus", ["input"], [Attr("beta", float, 1.0), Attr("threshold", float, 20.0)],
                 meta=_softplus_meta, dtypes=FLOAT, save="inputs", elementwise=True,
                 grad=lambda ctx, g: (g * where(ctx.inputs[0] * ctx.attrs["beta"] > ctx.attrs["threshold"], 1.0,
                                                sigmoid(ctx.inputs[0] * ctx.attrs["beta"])),))


@kernel(SOFTPLUS)
def _softplus_kernel(xp):
    def run(x, beta=1.0, threshold=20.0):
        bx = beta * x
        return xp.where(bx > threshold, x, xp.logaddexp(0, bx) / beta).astype(x.dtype, copy=False)

    return run


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta x)) / beta, linear above ``threshold``."""
    return call(SOFTPLUS, input, beta=float(beta), threshold=float(threshold))


# -- clamp ------------------------------------------------------------------------
def _clamp_meta(x, min=None, max=None):
    if min is None and max is None:
        raise OpError("clamp", "at least one of 'min' and 'max' must be given")
    if not x.dtype.is_floating_point and (isinstance(min, float) or isinstance(max, float)):
        # the result would be a float tensor: flow.clamp promotes the input first
        raise OpTypeError("clamp", f"float bounds need a floating-point input, got {x.dtype} with min={min!r}, "
                                   f"max={max!r}")
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


CLAMP = defop("clamp", ["input"], [Attr("min", (float, int), None), Attr("max", (float, int), None)],
              meta=_clamp_meta, dtypes=ANY, grad=_clamp_grad, save="inputs", elementwise=True)


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
        raise OpTypeError("where", f"'input' and 'other' must have the same dtype after promotion, got {x.dtype} "
                                   f"and {y.dtype}")
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
WHERE = defop("where", ["condition", "input", "other"], meta=_where_meta, grad=_where_grad, save="inputs",
              dtypes={"condition": _CONDITION, "input": ANY, "other": ANY})
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
from flow.errors import OpError as _OpError  # noqa: E402
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402

for _h in (EXP, EXPM1, SIN, COS, TANH, SIGMOID, ERF, ATAN, SINH, COSH, NEG, SQUARE_OP):
    set_samples(_h, S.unary())
for _h in (LOG, LOG2, LOG10, SQRT, RSQRT, RECIPROCAL):
    set_samples(_h, S.unary(0.3, 3.0))
set_samples(LOG1P, S.unary(-0.5, 2.0))
set_samples(TAN, S.unary(-1.0, 1.0))
set_samples(ASIN, S.unary(-0.8, 0.8))
set_samples(ACOS, S.unary(-0.8, 0.8))
for _h in (ABS, SIGN, RELU, FLOOR, CEIL, ROUND, TRUNC):
    set_samples(_h, S.unary(kinks=(-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0)))


def _gelu_samples():
    for approx in ("none", "tanh"):
        yield SampleInput((S.uniform((3, 5), -3, 3, 1),), {"approximate": approx})


def _gelu_bw_samples():
    for approx in ("none", "tanh"):
        yield SampleInput((S.uniform((3, 5), -1, 1, 2), S.uniform((3, 5), -3, 3, 1)), {"approximate": approx})
    yield ErrorInput((S.uniform((5,), seed=2), S.uniform((3, 5), seed=1)), {}, _OpError,
                     "'input' must have the shape and dtype of 'grad_output'")


def _softplus_samples():
    yield SampleInput((S.uniform((3, 4), -3, 3, 1),), {"beta": 1.0, "threshold": 20.0})
    yield SampleInput((S.away_from((3, 4), (2.0,), -3, 6, seed=2),), {"beta": 2.0, "threshold": 4.0})


def _clamp_samples():
    x = S.away_from((3, 4), (-0.5, 0.7), seed=3)
    yield SampleInput((x,), {"min": -0.5, "max": 0.7})
    yield SampleInput((x,), {"min": -0.5, "max": None})
    yield SampleInput((x,), {"min": None, "max": 0.7})
    yield SampleInput((S.ints((3, 4), -3, 3),), {"min": -1, "max": 1})
    yield SampleInput((S.ints((3, 4), 0, 9, dtype=D.uint8),), {"min": -1, "max": 300})
    yield ErrorInput((x,), {"min": None, "max": None}, _OpError, "at least one of 'min' and 'max'")
    yield ErrorInput((S.ints((3, 4)),), {"min": 0.5, "max": None}, OpTypeError, "float bounds need a floating-point")


def _where_samples():
    yield SampleInput((S.bools((3, 4)), S.uniform((3, 4), seed=1), S.uniform((3, 4), seed=2)))
    yield SampleInput((S.bools((3, 1), seed=3), S.uniform((1, 4), seed=4), S.uniform((3, 4), seed=5)))
    yield SampleInput((S.ints((3, 4), 0, 2, seed=6, dtype=D.uint8), S.uniform((3, 4), seed=1), S.uniform((), seed=2)))
    yield ErrorInput((S.bools((3, 4)), S.uniform((2, 4), seed=1), S.uniform((3, 4), seed=2)), {}, _OpError,
                     "cannot be broadcast")
    yield ErrorInput((S.bools((3, 4)), S.uniform((3, 4), seed=1), S.ints((3, 4))), {}, OpTypeError,
                     "must have the same dtype")


set_samples(GELU, _gelu_samples)
set_samples(GELU_BACKWARD, _gelu_bw_samples)
set_samples(SOFTPLUS, _softplus_samples)
set_samples(CLAMP, _clamp_samples)
set_samples(WHERE, _where_samples)

__all__ = [
    "exp", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "sigmoid", "erf", "reciprocal", "arcsin", "arccos", "arctan", "neg", "abs", "sign",
    "relu", "floor", "ceil", "trunc", "negative", "absolute", "round", "square", "positive", "gelu", "silu",
    "softplus", "clamp", "clamp_min", "clamp_max", "clip", "where", "lerp", "logit", "nan_to_num",
]
