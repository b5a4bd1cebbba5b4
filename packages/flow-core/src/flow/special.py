"""``flow.special``: special functions with PyTorch's names (``torch.special``), with gradients where
PyTorch has them (none for ``zeta``).

Kernels are NumPy-only (flow-core does not depend on SciPy); their accuracy is documented in
:mod:`flow.ops._special_np` and :mod:`flow.ops._bessel_np`. Not provided: the orthogonal-polynomial
functions of ``torch.special``.
"""

from __future__ import annotations

from flow.ops.clamp_where import logit
from flow.ops.extra_math import digamma, erfc, erfinv, exp2, lgamma, polygamma, xlogy
from flow.ops.nn_act import log_softmax as _log_softmax
from flow.ops.nn_act import softmax as _softmax
from flow.ops.reduction_stats import logsumexp
from flow.ops.special import (
    entr,
    i0,
    i0e,
    i1,
    i1e,
    log_ndtr,
    multigammaln,
    ndtr,
    ndtri,
    sinc,
    xlog1py,
    zeta,
)
from flow.ops.special_bessel import (
    airy_ai,
    bessel_j0,
    bessel_j1,
    bessel_y0,
    bessel_y1,
    modified_bessel_i0,
    modified_bessel_i1,
    modified_bessel_k0,
    modified_bessel_k1,
    scaled_modified_bessel_k0,
    scaled_modified_bessel_k1,
    spherical_bessel_j0,
)
from flow.ops.unary import erf, expm1, log1p, round
from flow.ops.unary import sigmoid as expit

gammaln = lgamma
psi = digamma


def softmax(input, dim: int, *, dtype=None):
    """``torch.special.softmax``: exp(x) / sum(exp(x), dim), computed stably."""
    return _softmax(input, dim, dtype=dtype)


def log_softmax(input, dim: int, *, dtype=None):
    """``torch.special.log_softmax``: log(softmax(x, dim)), computed stably."""
    return _log_softmax(input, dim, dtype=dtype)


__all__ = [
    "airy_ai",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfinv",
    "exp2",
    "expit",
    "expm1",
    "gammaln",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "log1p",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "multigammaln",
    "ndtr",
    "ndtri",
    "polygamma",
    "psi",
    "round",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
    "sinc",
    "softmax",
    "spherical_bessel_j0",
    "xlog1py",
    "xlogy",
    "zeta",
]
