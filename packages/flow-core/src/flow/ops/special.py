"""Special functions (``torch.special``): ops with NumPy kernels (zeta, i0/i0e/i1/i1e, log_ndtr) and
functions written with flow ops (ndtr, ndtri, xlog1py, sinc, entr, multigammaln). erfc, erfinv,
lgamma, digamma, polygamma, exp2 and xlogy are in :mod:`flow.ops.extra_math`. The namespace is
:mod:`flow.special`; the names PyTorch also has at top level (``torch.i0`` ...) are in ``__all__``.

The kernels compute in float64 (:mod:`flow.ops._special_np`, accuracy documented there) and cast
back, on the host: on a device whose array module is not NumPy the data makes a round trip.
"""

from __future__ import annotations

import math

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import _special_np as K
from flow.ops import meta as M
from flow.ops._define import defop, generic, promote_float
from flow.ops.extra_math import erfc, erfinv, lgamma
from flow.registry.ops import FLOAT_PROMOTE


def _host(fn):
    """A generic kernel factory running the float64 NumPy function ``fn`` and casting back."""

    def factory(xp):
        to_np = (lambda a: a) if xp is np else getattr(xp, "asnumpy", np.asarray)

        def run(*arrays, **attrs):
            with np.errstate(all="ignore"):
                r = fn(*[to_np(a) for a in arrays], **attrs)
            return xp.asarray(np.asarray(r).astype(arrays[0].dtype, copy=False))

        return run

    return factory


def _floating(x):
    # float functions: integer and bool input is promoted to the default dtype, as PyTorch does
    if x.dtype.is_floating_point:
        return x
    from flow import _dtype as D

    return x.to(D._default_dtype)


def _tensor_arg(op: str, x, arg: str = "input"):
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
    return x


def _def(name: str, fn, grad, save: str, doc: str, attrs=()):
    h = defop(name, ["input"], attrs, meta=M.same, dtypes=FLOAT_PROMOTE, grad=grad, save=save, elementwise=True)
    generic(h, _host(fn))

    def api(input):
        return call(h, promote_float(h, _tensor_arg(name, input)))

    api.__name__ = api.__qualname__ = name
    api.__doc__ = doc
    return h, api


# gradients, written with flow ops so they are differentiable again
def _g_i0(ctx, g):
    return (g * i1(ctx.inputs[0]),)


def _g_i0e(ctx, g):
    x, out = ctx.inputs[0], ctx.outputs[0]
    return (g * (i1e(x) - x.sign() * out),)


def _safe_recip(x):
    from flow.ops.clamp_where import where

    return where(x == 0, 0.0, 1.0 / where(x == 0, 1.0, x))


def _g_i1(ctx, g):
    from flow.ops.clamp_where import where

    x, out = ctx.inputs[0], ctx.outputs[0]
    return (g * where(x == 0, 0.5, i0(x) - out * _safe_recip(x)),)  # I1'(0) = 1/2


def _g_i1e(ctx, g):
    from flow.ops.clamp_where import where

    x, out = ctx.inputs[0], ctx.outputs[0]
    return (g * where(x == 0, 0.5, i0e(x) - out * (x.sign() + _safe_recip(x))),)


def _g_log_ndtr(ctx, g):
    x, out = ctx.inputs[0], ctx.outputs[0]
    # pdf / cdf = exp(log pdf - log cdf): finite deep in the left tail, where both underflow
    return (g * (x * x * -0.5 - 0.5 * math.log(2 * math.pi) - out).exp(),)


I0, i0 = _def("i0", lambda x: K.bessel_i(0, x, False), _g_i0, "inputs", "Modified Bessel function I0.")
I0E, i0e = _def("i0e", lambda x: K.bessel_i(0, x, True), _g_i0e, "both", "exp(-|x|) I0(x).")
I1, i1 = _def("i1", lambda x: K.bessel_i(1, x, False), _g_i1, "both", "Modified Bessel function I1.")
I1E, i1e = _def("i1e", lambda x: K.bessel_i(1, x, True), _g_i1e, "both", "exp(-|x|) I1(x).")
LOG_NDTR, log_ndtr = _def("log_ndtr", K.log_ndtr, _g_log_ndtr, "both", "log of the standard normal CDF.")


# PyTorch has no derivative for zeta (in either argument): neither has flow
ZETA = defop("zeta", ["input", "other"], meta=M.elementwise("zeta"), dtypes=FLOAT_PROMOTE, elementwise=True)
generic(ZETA, _host(K.zeta))


def _binary_args(op: str, a, b):
    from flow import _dtype as D
    from flow._creation import tensor
    from flow._tensor import Tensor

    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise OpTypeError(op, f"expected at least one Tensor, got {type(a).__name__} and {type(b).__name__}")
    ref = a if isinstance(a, Tensor) else b
    a = a if isinstance(a, Tensor) else tensor(a, dtype=ref.dtype if ref.dtype.is_floating_point else None)
    b = b if isinstance(b, Tensor) else tensor(b, dtype=ref.dtype if ref.dtype.is_floating_point else None)
    dt = D.promote_types(a.dtype, b.dtype)
    if not dt.is_floating_point:
        dt = D._default_dtype
    return a.to(dt), b.to(dt)


def zeta(input, other):
    """The Hurwitz zeta function sum_k (k + other)^-input (``zeta(x, 1)`` is Riemann's)."""
    return call(ZETA, *_binary_args("zeta", input, other))


# -- written with flow ops -------------------------------------------------------------------------
def ndtr(input):
    """The standard normal CDF."""
    return erfc(_tensor_arg("ndtr", input) * (-1.0 / math.sqrt(2.0))) * 0.5


def ndtri(input):
    """The inverse of the standard normal CDF: sqrt(2) erfinv(2p - 1). Relative accuracy degrades below
    p ~ 1e-8 (2p - 1 rounds); inf / -inf at 1 / 0, nan outside [0, 1]."""
    return erfinv(_tensor_arg("ndtri", input) * 2.0 - 1.0) * math.sqrt(2.0)


def xlog1py(input, other):
    """``input * log1p(other)``, 0 where ``input`` is 0 (unless ``other`` is nan)."""
    from flow.ops.clamp_where import where

    x, y = _binary_args("xlog1py", input, other)
    # where x == 0 the product is taken as 0 even if log1p(y) is not finite; there the gradient in x is 0,
    # elsewhere log1p(y), as PyTorch's
    bad = (x == 0) & ((y <= -1) | (y == math.inf))
    return x * where(bad, 0.0, y).log1p()


def sinc(input):
    """The normalized sinc, sin(pi x) / (pi x), 1 at 0."""
    from flow.ops.clamp_where import where

    x = _floating(_tensor_arg("sinc", input))
    z = x == 0
    px = where(z, 1.0, x) * math.pi
    return where(z, 1.0, px.sin() / px)


def entr(input):
    """The elementwise entropy -x log x: 0 at 0, -inf for x < 0."""
    from flow.ops.clamp_where import where

    x = _floating(_tensor_arg("entr", input))
    pos = x > 0
    val = -x * where(pos, x, 1.0).log()
    return where(pos, val, where(x == 0, 0.0, where(x < 0, -math.inf, x)))  # nan stays nan


def multigammaln(input, p: int):
    """The multivariate log-gamma log Gamma_p(a) = p(p-1)/4 log(pi) + sum_j lgamma(a - j/2); every element
    must be greater than (p - 1) / 2."""
    op = "multigammaln"
    x = _floating(_tensor_arg(op, input))
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise OpError(op, f"'p' must be a positive int, got {p!r}")
    from flow.autograd import no_grad

    with no_grad():
        if x.numel() and bool((x <= (p - 1) / 2).any()):
            raise OpError(op, f"all elements must be greater than (p - 1) / 2 = {(p - 1) / 2}")
    out = lgamma(x)
    for j in range(1, int(p)):
        out = out + lgamma(x - j / 2.0)
    return out + p * (p - 1) / 4.0 * math.log(math.pi)


mvlgamma = multigammaln


# -- opcheck samples -------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import SampleInput  # noqa: E402

for _h in (I0, I0E):
    set_samples(_h, S.unary(-3.0, 3.0))
for _h in (I1, I1E):  # the gradient's 1/x form needs x away from 0
    set_samples(_h, S.unary(-3.0, 3.0, kinks=(0.0,)))
set_samples(LOG_NDTR, S.unary(-8.0, 4.0))


def _zeta_samples():
    yield SampleInput((S.uniform((3, 4), 1.5, 6.0, 1), S.uniform((3, 4), 0.2, 4.0, 2)), grad=False)
    yield SampleInput((S.uniform((2, 3), 1.5, 6.0, 3), S.uniform((3,), 0.2, 4.0, 4)), grad=False)
    yield from S.broadcast_errors(S.uniform((3, 4), 2, 3, 1), S.uniform((2, 4), 1, 2, 2))


set_samples(ZETA, _zeta_samples)

__all__ = ["i0", "sinc", "mvlgamma"]
