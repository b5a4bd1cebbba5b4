"""Special functions (lgamma, digamma, polygamma, erfc, erfinv) and small elementwise composites
(exp2, frac, rad2deg, deg2rad, logaddexp, logaddexp2, xlogy, addcmul, addcdiv).

The special functions are ops with SciPy kernels when SciPy is installed and NumPy fallbacks
otherwise (SciPy is not a dependency of flow-core). The composites are written with flow ops, so
their gradients come from the ops they call.
"""

from __future__ import annotations

import math

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel, promote_float, set_samples
from flow.ops.unary import _def_unary, _t, exp, log, trunc
from flow.registry.ops import FLOAT_PROMOTE, Attr

__all__ = [
    "lgamma",
    "digamma",
    "polygamma",
    "erfc",
    "erfinv",
    "exp2",
    "frac",
    "rad2deg",
    "deg2rad",
    "logaddexp",
    "logaddexp2",
    "xlogy",
    "addcmul",
    "addcdiv",
]


def _scipy_special():
    try:
        import scipy.special as sp
    except ImportError:
        return None
    return sp


# -- NumPy fallbacks --------------------------------------------------------------------------------
# Bernoulli numbers B2, B4, ... B14 for the asymptotic series of digamma and polygamma.
_B2K = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)


def _np_digamma(x):
    x = x.astype(np.float64)
    x0 = x
    out = np.zeros_like(x)
    # reflection keeps the recurrence short for negative x: psi(x) = psi(1 - x) - pi / tan(pi x)
    neg = x < 0.5
    refl = np.where(neg, math.pi / np.tan(math.pi * np.where(neg, x, 0.5)), 0.0)
    x = np.where(neg, 1.0 - x, x)
    while True:  # psi(x) = psi(x + 1) - 1/x until x is large enough for the asymptotic series
        small = x < 10.0
        if not small.any():
            break
        out -= np.where(small, 1.0 / x, 0.0)
        x = np.where(small, x + 1.0, x)
    inv2 = 1.0 / (x * x)
    series = sum(b / (2 * (k + 1)) * inv2 ** (k + 1) for k, b in enumerate(_B2K))
    out += np.log(x) - 0.5 / x - series
    out = np.where(neg, out - refl, out)
    with np.errstate(invalid="ignore"):
        out = np.where((x0 == np.floor(x0)) & neg, np.nan, out)  # the poles at -1, -2, ...; -inf
        return np.where(x0 == 0.0, -np.copysign(np.inf, x0), out)  # as PyTorch: -inf at +0, inf at -0


def _np_polygamma_pos(n: int, x, sign: float, fact: int):
    """psi_n(x) for x >= 0.5 (or inf / nan): at most 10 recurrence steps, then the asymptotic series."""
    out = np.zeros_like(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        while True:  # psi_n(x) = psi_n(x + 1) + (-1)^(n+1) n! / x^(n+1)
            small = x < 10.0  # false for inf and nan: the loop ends
            if not small.any():
                break
            out += np.where(small, sign * fact / x ** (n + 1), 0.0)
            x = np.where(small, x + 1.0, x)
        # (-1)^(n+1) [(n-1)!/x^n + n!/(2 x^(n+1)) + sum_k B2k (2k+n-1)! / ((2k)! x^(2k+n))]
        s = math.factorial(n - 1) / x**n + fact / (2 * x ** (n + 1))
        for k, b in enumerate(_B2K, start=1):
            s = s + b * math.factorial(2 * k + n - 1) / math.factorial(2 * k) / x ** (2 * k + n)
    return out + sign * s


def _cot_derivative(n: int, x):
    """d^n/dx^n cot(pi x), as a polynomial in c = cot(pi x): d/dx P(c) = -pi (1 + c^2) P'(c)."""
    P = np.polynomial.polynomial
    p = np.array([0.0, 1.0])
    for _ in range(n):
        p = -math.pi * P.polymul(P.polyder(p), [1.0, 0.0, 1.0])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # cot(pi x) has period 1: reduce first (exact in floating point) so a large |x| keeps its digits
        r = x - np.round(x)
        return P.polyval(np.where(np.abs(r) == 0.5, 0.0, 1.0 / np.tan(math.pi * r)), p)  # cot is 0 at halves


def _np_polygamma(n: int, x):
    x = x.astype(np.float64)
    sign = (-1.0) ** (n + 1)
    fact = math.factorial(n)
    neg = x < 0.5
    out = _np_polygamma_pos(n, np.where(neg, 1.0 - x, x), sign, fact)
    if neg.any():
        # reflection: psi_n(1 - x) + (-1)^(n+1) psi_n(x) = (-1)^n pi d^n/dx^n cot(pi x), so a negative x
        # costs no more steps than a positive one (the recurrence from x would take |x| of them)
        with np.errstate(invalid="ignore", over="ignore"):
            refl = sign * ((-1.0) ** n * math.pi * _cot_derivative(n, np.where(neg, x, 0.25)) - out)
        out = np.where(neg, refl, out)
        pole = neg & (x == np.floor(x))  # the poles at 0, -1, -2, ...: +-inf as PyTorch gives
        out = np.where(pole, sign * np.inf, out)
        out = np.where(x == -np.inf, np.nan, out)  # no limit there
    return out


def _np_erfinv(y):
    y = y.astype(np.float64)
    # Giles' single-precision approximation, then Newton steps on erf(x) - y for full precision
    w = -np.log(np.clip((1.0 - y) * (1.0 + y), 1e-300, None))
    wc = w - 2.5
    small = np.polyval(
        [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
         -0.00417768164, 0.246640727, 1.50140941],
        wc,
    )  # fmt: skip
    wl = np.sqrt(np.maximum(w, 0.0)) - 3.0
    large = np.polyval(
        [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
         0.00943887047, 1.00167406, 2.83297682],
        wl,
    )  # fmt: skip
    a = np.abs(y)
    x = np.where(w < 5.0, small, large) * a
    verf = np.vectorize(math.erf, otypes=[np.float64])
    verfc = np.vectorize(math.erfc, otypes=[np.float64])
    tail = a > 0.5
    t = 1.0 - a  # exact for a >= 0.5 (Sterbenz): the tails solve erfc(x) = 1 - |y| to full relative precision
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        logt = np.log(np.where(tail, t, 1.0))
        for _ in range(4):
            slope = 2.0 / math.sqrt(math.pi) * np.exp(-x * x)
            # tails: Newton on log(erfc(x)) = log(1 - |y|), nearly quadratic in x where erfc is tiny
            c = verfc(x)
            step = np.where(tail, (np.log(c) - logt) * c / -slope, (verf(x) - a) / slope)
            x = x - np.where(np.isfinite(step), step, 0.0)
    x = np.where(a == 1.0, np.inf, x)
    return np.where(a > 1.0, np.nan, np.copysign(x, y))


def _lgamma1(v: float) -> float:
    try:
        return math.lgamma(v)
    except (ValueError, OverflowError):  # the poles 0, -1, -2, ...: +inf, as PyTorch
        return math.inf


_np_lgamma = np.vectorize(_lgamma1, otypes=[np.float64])


# -- the special-function ops -----------------------------------------------------------------------
def _g_lgamma(ctx, g):
    return (g * digamma(ctx.inputs[0]),)


def _g_digamma(ctx, g):
    return (g * polygamma(1, ctx.inputs[0]),)


def _g_erfc(ctx, g):
    x = ctx.inputs[0]
    return (g * exp(-(x * x)) * (-2.0 / math.sqrt(math.pi)),)


def _g_erfinv(ctx, g):
    o = ctx.outputs[0]
    return (g * exp(o * o) * (math.sqrt(math.pi) / 2.0),)


LGAMMA, _lgamma = _def_unary("lgamma", None, _g_lgamma, "inputs", "log |Gamma(x)|.")
DIGAMMA, _digamma = _def_unary("digamma", None, _g_digamma, "inputs", "The logarithmic derivative of Gamma.")
ERFC, _erfc = _def_unary("erfc", None, _g_erfc, "inputs", "1 - erf(x), accurate where erf(x) is close to 1.")
ERFINV, _erfinv = _def_unary("erfinv", None, _g_erfinv, "outputs", "The inverse of erf on (-1, 1).")


def _special_kernel(scipy_name: str, fallback):
    def factory(xp):
        sp = _scipy_special() if xp.__name__ == "numpy" else None
        if sp is not None:
            f = getattr(sp, scipy_name)
            return lambda x: np.asarray(f(x)).astype(x.dtype, copy=False)
        if xp.__name__ != "numpy":  # cupy: cupyx.scipy.special has the same names
            import importlib

            return getattr(importlib.import_module(xp.__name__ + "x.scipy.special"), scipy_name)
        return lambda x: np.asarray(fallback(x)).astype(x.dtype, copy=False)

    return factory


kernel(LGAMMA)(_special_kernel("gammaln", _np_lgamma))
kernel(DIGAMMA)(_special_kernel("psi", _np_digamma))
kernel(ERFC)(_special_kernel("erfc", np.vectorize(math.erfc, otypes=[np.float64])))
kernel(ERFINV)(_special_kernel("erfinv", _np_erfinv))


def _polygamma_meta(x, n=1):
    if n < 1:
        raise OpError("polygamma", f"'n' must be at least 1 (n=0 is digamma), got {n}")
    return M.same(x)


def _g_polygamma(ctx, g):
    return (g * polygamma(ctx.attrs["n"] + 1, ctx.inputs[0]),)


POLYGAMMA = defop(
    "polygamma",
    ["input"],
    [Attr("n", int, 1)],
    meta=_polygamma_meta,
    dtypes=FLOAT_PROMOTE,
    grad=_g_polygamma,
    save="inputs",
    elementwise=True,
)


@kernel(POLYGAMMA)
def _polygamma_kernel(xp):
    sp = _scipy_special() if xp.__name__ == "numpy" else None
    if sp is None and xp.__name__ != "numpy":
        import importlib

        sp = importlib.import_module(xp.__name__ + "x.scipy.special")

    def run(x, n=1):
        if sp is not None:
            return xp.asarray(sp.polygamma(n, x)).astype(x.dtype, copy=False)
        return _np_polygamma(n, x).astype(x.dtype, copy=False)

    return run


def lgamma(input):
    """The natural log of the absolute value of the gamma function, as ``torch.lgamma``.

    >>> flow.lgamma(flow.tensor([0.5, 3.0]))
    tensor([0.5724, 0.6931])
    """
    return _lgamma(input)


def digamma(input):
    """The digamma function psi(x) = d/dx lgamma(x), as ``torch.digamma`` (-inf at 0, NaN at negative integers).

    >>> flow.digamma(flow.tensor([1.0]))
    tensor([-0.5772])
    """
    return _digamma(input)


def polygamma(n: int, input):
    """The ``n``-th derivative of digamma (``n >= 1``; ``n = 0`` is :func:`digamma`), as ``torch.polygamma``."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise OpTypeError("polygamma", f"'n' must be an int, got {type(n).__name__}")
    if n < 0:
        raise OpError("polygamma", f"'n' must be non-negative, got {n}")
    if not isinstance(input, _t()):
        raise OpTypeError("polygamma", f"'input' must be a Tensor, got {type(input).__name__}")
    if n == 0:
        return digamma(input)
    return call(POLYGAMMA, promote_float(POLYGAMMA, input), n=n)


def erfc(input):
    """The complementary error function 1 - erf(x), as ``torch.erfc``."""
    return _erfc(input)


def erfinv(input):
    """The inverse error function (±inf at ±1, NaN outside [-1, 1]), as ``torch.erfinv``."""
    return _erfinv(input)


# -- elementwise composites -------------------------------------------------------------------------
def _tensor_arg(op: str, x, arg: str = "input"):
    if not isinstance(x, _t()):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
    return x


def _floating(x):
    # the composites below are float functions: integer and bool input is promoted as torch does
    if x.dtype.is_floating_point:
        return x
    from flow import _dtype as D
    from flow.ops.conversion import to_dtype

    return to_dtype(x, D._default_dtype)


def exp2(input):
    """2 ** x elementwise, as ``torch.exp2``."""
    return exp(_floating(_tensor_arg("exp2", input)) * math.log(2.0))


def frac(input):
    """The fractional part x - trunc(x) (sign of x kept), as ``torch.frac``."""
    x = _tensor_arg("frac", input)
    if not x.dtype.is_floating_point:
        raise OpTypeError("frac", f"'input' must be a floating-point tensor, got {x.dtype}")
    return x - trunc(x).detach()


def rad2deg(input):
    """Radians to degrees, as ``torch.rad2deg``."""
    return _floating(_tensor_arg("rad2deg", input)) * (180.0 / math.pi)


def deg2rad(input):
    """Degrees to radians, as ``torch.deg2rad``."""
    return _floating(_tensor_arg("deg2rad", input)) * (math.pi / 180.0)


def logaddexp(input, other):
    """log(e**x + e**y) without overflow, as ``torch.logaddexp``; broadcasts."""
    from flow.ops.arith import maximum

    a, b = _floating(_tensor_arg("logaddexp", input)), _floating(_tensor_arg("logaddexp", other, "other"))
    m = maximum(a, b).detach()
    # the max is subtracted so that exp never overflows; where both are -inf (or equal infinities)
    # the difference is NaN and the answer is the max itself
    from flow.ops.clamp_where import where

    finite = (m == m) & (m.abs() != math.inf)
    ms = where(finite, m, 0.0)
    out = ms + log(exp(a - ms) + exp(b - ms))
    return where(finite, out, maximum(a, b))


def logaddexp2(input, other):
    """log2(2**x + 2**y) without overflow, as ``torch.logaddexp2``; broadcasts."""
    ln2 = math.log(2.0)
    a, b = _floating(_tensor_arg("logaddexp2", input)), _floating(_tensor_arg("logaddexp2", other, "other"))
    return logaddexp(a * ln2, b * ln2) / ln2


def _g_xlogy(ctx, g):
    from flow.ops._grad_util import sum_to_shape
    from flow.ops.clamp_where import where

    x, y = ctx.inputs
    gx = gy = None
    if ctx.next[0][0] is not None:
        # as PyTorch: d/dx = log(y), except 0 where x == 0 and y <= 0 (where x log y is taken as 0)
        gx = sum_to_shape(where((x == 0) & (y <= 0), 0.0, call(XLOGY, g, y)), ctx.input_shape(0))
    if ctx.next[1][0] is not None:
        gy = sum_to_shape(g * x / y, ctx.input_shape(1))
    return gx, gy


XLOGY = defop(
    "xlogy",
    ["input", "other"],
    meta=M.elementwise("xlogy"),
    dtypes=FLOAT_PROMOTE,
    grad=_g_xlogy,
    save="inputs",
    elementwise=True,
)


@kernel(XLOGY)
def _xlogy_kernel(xp):
    def run(x, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            out = x * xp.log(y)
        # 0 where x == 0, even for y == 0 or inf; a NaN y stays NaN
        return xp.where((x == 0) & ~xp.isnan(y), xp.zeros((), dtype=out.dtype), out).astype(x.dtype, copy=False)

    return run


def xlogy(input, other):
    """x * log(y), 0 where x == 0 (even for y == 0 or inf; NaN y stays NaN), as ``torch.xlogy``; broadcasts.

    Either argument may be a number.

    >>> flow.xlogy(flow.tensor([0.0, 2.0]), flow.tensor([0.0, 1.0]))
    tensor([0., 0.])
    """
    from flow import _dtype as D
    from flow._creation import tensor

    if not isinstance(input, _t()) and not isinstance(other, _t()):
        raise OpTypeError("xlogy", "'input' or 'other' must be a Tensor")
    ref = input if isinstance(input, _t()) else other
    if not isinstance(input, _t()):
        input = tensor(float(input), dtype=ref.dtype if ref.dtype.is_floating_point else None, device=ref.device)
    if not isinstance(other, _t()):
        other = tensor(float(other), dtype=ref.dtype if ref.dtype.is_floating_point else None, device=ref.device)
    dtype = D.promote_types(input.dtype, other.dtype)
    if not dtype.is_floating_point:
        dtype = D._default_dtype
    return call(XLOGY, input.to(dtype), other.to(dtype))


def _addc(op: str, input, tensor1, tensor2, value):
    for arg, t in (("input", input), ("tensor1", tensor1), ("tensor2", tensor2)):
        _tensor_arg(op, t, arg)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OpTypeError(op, f"'value' must be a number, got {type(value).__name__}")
    if op == "addcdiv" and not tensor1.dtype.is_floating_point and not tensor2.dtype.is_floating_point:
        raise OpTypeError(op, "integer division with addcdiv is not supported: give floating-point tensors")
    if isinstance(value, float) and not (input.dtype.is_floating_point or tensor1.dtype.is_floating_point):
        raise OpTypeError(op, f"a float 'value' ({value}) needs floating-point tensors, got {input.dtype}")


def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2`` (broadcasting), as ``torch.addcmul``."""
    _addc("addcmul", input, tensor1, tensor2, value)
    prod = tensor1 * tensor2
    return input + (prod * value if value != 1 else prod)


def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2`` (broadcasting), as ``torch.addcdiv``."""
    _addc("addcdiv", input, tensor1, tensor2, value)
    q = tensor1 / tensor2
    return input + (q * value if value != 1 else q)


# -- opcheck samples --------------------------------------------------------------------------------
def _samples_of(values_of):
    from flow.ops import _samples as S
    from flow.testing import SampleInput

    def samples():
        for i, shape in enumerate(((3, 4), (5,), ())):
            yield SampleInput((S.t(values_of(S.rng(40 + i), shape)),))

    return samples


set_samples(LGAMMA, _samples_of(lambda r, s: r.uniform(0.2, 4.0, s) * r.choice([-1.0, 1.0], s) + 0.05))
set_samples(DIGAMMA, _samples_of(lambda r, s: r.uniform(0.2, 4.0, s) - r.integers(0, 2, s) * 2.5))
set_samples(ERFC, _samples_of(lambda r, s: r.uniform(-3.0, 3.0, s)))
set_samples(ERFINV, _samples_of(lambda r, s: r.uniform(-0.9, 0.9, s)))


def _polygamma_samples():
    from flow.ops import _samples as S
    from flow.testing import ErrorInput, SampleInput

    x = S.uniform((3, 4), 0.3, 4.0, seed=45)
    yield SampleInput((x,), {"n": 1})
    yield SampleInput((x,), {"n": 2})
    yield SampleInput((S.uniform((), 0.5, 2.0, seed=46),), {"n": 3})
    yield ErrorInput((x,), {"n": 0}, OpError, "'n' must be at least 1")


set_samples(POLYGAMMA, _polygamma_samples)


def _xlogy_samples():
    from flow.ops import _samples as S
    from flow.testing import SampleInput

    x = S.uniform((3, 4), seed=47)
    yield SampleInput((x, S.uniform((3, 4), 0.2, 3.0, seed=48)))
    yield SampleInput((S.uniform((2, 1, 4), seed=49), S.uniform((3, 4), 0.2, 3.0, seed=50)))
    yield SampleInput((S.t(np.array([0.0, 0.0, 1.5])), S.t(np.array([0.0, 2.0, 0.5]))), grad=False)
    yield from S.broadcast_errors(x, S.uniform((2, 4), 0.2, 3.0, seed=51))


set_samples(XLOGY, _xlogy_samples)
