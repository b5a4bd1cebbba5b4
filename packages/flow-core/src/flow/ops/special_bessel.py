"""The Bessel functions of ``torch.special``: ``bessel_j0``/``j1``, ``bessel_y0``/``y1``, ``modified_bessel_i0``/
``i1``/``k0``/``k1``, ``scaled_modified_bessel_k0``/``k1``, ``spherical_bessel_j0``, and the Airy function
``airy_ai`` (computed from Bessel functions of order 1/3). The namespace is
:mod:`flow.special` (PyTorch has none of them at top level or as Tensor methods).

Ops with NumPy kernels computing in float64 and casting back, on the host (:mod:`flow.ops._bessel_np`,
accuracy documented there; ``modified_bessel_i0``/``i1`` share the kernel of ``i0``/``i1``). PyTorch
declares them non-differentiable, so they have no gradient: their output does not require grad.
"""

from __future__ import annotations

from flow._dispatch import call
from flow.ops import _bessel_np as B
from flow.ops import _special_np as K
from flow.ops import meta as M
from flow.ops._define import defop, generic, promote_float
from flow.ops.special import _host, _tensor_arg
from flow.registry.ops import FLOAT_PROMOTE


def _i1(x):
    # + 0.0 turns I1(-0.0) = -0.0 into PyTorch's +0.0
    return K.bessel_i(1, x, False) + 0.0


def _def(name: str, fn, doc: str):
    h = defop(name, ["input"], meta=M.same, dtypes=FLOAT_PROMOTE, elementwise=True)
    generic(h, _host(fn))

    def api(input):
        return call(h, promote_float(h, _tensor_arg(name, input)))

    api.__name__ = api.__qualname__ = name
    api.__doc__ = doc
    return h, api


BESSEL_J0, bessel_j0 = _def("bessel_j0", lambda x: B.bessel_j(0, x), "The Bessel function of the first kind J0.")
BESSEL_J1, bessel_j1 = _def("bessel_j1", lambda x: B.bessel_j(1, x), "The Bessel function of the first kind J1.")
BESSEL_Y0, bessel_y0 = _def(
    "bessel_y0", lambda x: B.bessel_y(0, x), "The Bessel function of the second kind Y0 (nan for x < 0)."
)
BESSEL_Y1, bessel_y1 = _def(
    "bessel_y1", lambda x: B.bessel_y(1, x), "The Bessel function of the second kind Y1 (nan for x < 0)."
)
MODIFIED_BESSEL_I0, modified_bessel_i0 = _def(
    "modified_bessel_i0", lambda x: K.bessel_i(0, x, False), "The modified Bessel function of the first kind I0."
)
MODIFIED_BESSEL_I1, modified_bessel_i1 = _def(
    "modified_bessel_i1", _i1, "The modified Bessel function of the first kind I1."
)
MODIFIED_BESSEL_K0, modified_bessel_k0 = _def(
    "modified_bessel_k0",
    lambda x: B.bessel_k(0, x, False),
    "The modified Bessel function of the second kind K0 (nan for x < 0).",
)
MODIFIED_BESSEL_K1, modified_bessel_k1 = _def(
    "modified_bessel_k1",
    lambda x: B.bessel_k(1, x, False),
    "The modified Bessel function of the second kind K1 (nan for x < 0).",
)
SCALED_MODIFIED_BESSEL_K0, scaled_modified_bessel_k0 = _def(
    "scaled_modified_bessel_k0", lambda x: B.bessel_k(0, x, True), "exp(x) K0(x), finite for large x."
)
SCALED_MODIFIED_BESSEL_K1, scaled_modified_bessel_k1 = _def(
    "scaled_modified_bessel_k1", lambda x: B.bessel_k(1, x, True), "exp(x) K1(x), finite for large x."
)
SPHERICAL_BESSEL_J0, spherical_bessel_j0 = _def(
    "spherical_bessel_j0", B.spherical_j0, "The spherical Bessel function of the first kind j0(x) = sin(x) / x."
)

AIRY_AI, airy_ai = _def(
    "airy_ai", B.airy_ai, "The Airy function of the first kind Ai (0 above x = 103.892, as PyTorch)."
)


# -- opcheck samples -------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import SampleInput  # noqa: E402


def _samples(low: float, high: float):
    # grad=False: the ops have no gradient (as PyTorch's); the ranges cover each kernel's regimes (series,
    # quadrature, asymptotic)
    def samples():
        yield SampleInput((S.uniform((3, 4), low, high, 1),), grad=False)
        yield SampleInput((S.uniform((5,), low, high, 2),), grad=False)
        yield SampleInput((S.uniform((), low, high, 3),), grad=False)
        yield SampleInput((S.uniform((0, 3), low, high, 4),), grad=False)

    return samples


for _h in (BESSEL_J0, BESSEL_J1, MODIFIED_BESSEL_I0, MODIFIED_BESSEL_I1, SPHERICAL_BESSEL_J0, AIRY_AI):
    set_samples(_h, _samples(-30.0, 30.0))
_POSITIVE = (
    BESSEL_Y0,
    BESSEL_Y1,
    MODIFIED_BESSEL_K0,
    MODIFIED_BESSEL_K1,
    SCALED_MODIFIED_BESSEL_K0,
    SCALED_MODIFIED_BESSEL_K1,
)
for _h in _POSITIVE:  # defined for x > 0 only
    set_samples(_h, _samples(0.05, 40.0))

__all__: list[str] = []
