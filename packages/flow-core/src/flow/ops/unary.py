"""Unary elementwise math and the activations that are ops (gelu, silu, softplus); clamp, where and
lerp are in :mod:`flow.ops.clamp_where`."""

from __future__ import annotations

import math

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import ANY_TENSOR, defop, generic, kernel, promote_float
from flow.registry.ops import ANY, FLOAT, FLOAT_PROMOTE, NUMERIC, Attr

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
    h = defop(
        name,
        ["input"],
        meta=M.same,
        dtypes=ANY if allow_bool else NUMERIC,
        grad=grad,
        save=save,
        elementwise=True,
        no_error_samples=ANY_TENSOR if allow_bool else "",
    )
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


SQUARE_OP = defop(
    "square",
    ["input"],
    meta=_square_meta,
    dtypes=ANY,
    grad=_g_square,
    save="inputs",
    elementwise=True,
    no_error_samples=ANY_TENSOR,
)


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


GELU = defop(
    "gelu",
    ["input"],
    [Attr("approximate", str, "none", ("none", "tanh"))],
    meta=_gelu_meta,
    dtypes=FLOAT,
    grad=_gelu_grad,
    save="inputs",
    elementwise=True,
)
GELU_BACKWARD = defop(
    "gelu_backward",
    ["grad_output", "input"],
    [Attr("approximate", str, "none", ("none", "tanh"))],
    meta=M.same_shapes("gelu_backward"),
    dtypes=FLOAT,
    grad=_gelu_backward_grad,
    save="inputs",
    elementwise=True,
)


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


def _softplus_grad(ctx, g):
    from flow.ops.clamp_where import where

    bx = ctx.inputs[0] * ctx.attrs["beta"]
    return (g * where(bx > ctx.attrs["threshold"], 1.0, sigmoid(bx)),)


SOFTPLUS = defop(
    "softplus",
    ["input"],
    [Attr("beta", float, 1.0), Attr("threshold", float, 20.0)],
    meta=_softplus_meta,
    dtypes=FLOAT,
    save="inputs",
    elementwise=True,
    grad=_softplus_grad,
)


@kernel(SOFTPLUS)
def _softplus_kernel(xp):
    def run(x, beta=1.0, threshold=20.0):
        bx = beta * x
        return xp.where(bx > threshold, x, xp.logaddexp(0, bx) / beta).astype(x.dtype, copy=False)

    return run


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta x)) / beta, linear above ``threshold``."""
    return call(SOFTPLUS, input, beta=float(beta), threshold=float(threshold))


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
    yield ErrorInput(
        (S.uniform((5,), seed=2), S.uniform((3, 5), seed=1)),
        {},
        _OpError,
        "'input' must have the shape and dtype of 'grad_output'",
    )


def _softplus_samples():
    yield SampleInput((S.uniform((3, 4), -3, 3, 1),), {"beta": 1.0, "threshold": 20.0})
    yield SampleInput((S.away_from((3, 4), (2.0,), -3, 6, seed=2),), {"beta": 2.0, "threshold": 4.0})


set_samples(GELU, _gelu_samples)
set_samples(GELU_BACKWARD, _gelu_bw_samples)
set_samples(SOFTPLUS, _softplus_samples)

__all__ = [
    "exp",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "sigmoid",
    "erf",
    "reciprocal",
    "arcsin",
    "arccos",
    "arctan",
    "neg",
    "abs",
    "sign",
    "relu",
    "floor",
    "ceil",
    "trunc",
    "negative",
    "absolute",
    "round",
    "square",
    "positive",
    "gelu",
    "silu",
    "softplus",
]
