"""The NumPy kernels of lgamma, digamma, polygamma and erfinv (used where SciPy is absent, as on a
lean install), against PyTorch over wide ranges, poles and non-finite values, whether or not SciPy
is installed here; and that no input makes them loop (polygamma once did on -inf)."""

from __future__ import annotations

import numpy as np
import pytest

from flow.ops import extra_math as EM

torch = pytest.importorskip("torch")

EDGES = [0.0, -0.0, -1.0, -2.0, -2.5, -0.3, 0.3, 0.5, 1.0, 3.7, 12.0, 200.0, 1e-8, -1e3 - 0.25, np.inf, np.nan]


def _wide(seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(-30, 30, 400), rng.uniform(0.01, 5, 200), np.geomspace(1e-6, 1e6, 100)])


def _close(got, want, rtol):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=1e-300)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_polygamma(n):
    x = _wide()
    x = x[np.abs(x - np.round(x)) > 1e-3]  # away from the poles, where both sides are ill-conditioned
    _close(EM._np_polygamma(n, x), torch.polygamma(n, torch.tensor(x)).numpy(), rtol=1e-9)
    edges = np.array([v for v in EDGES if v == v and v != np.inf and not (v <= 0 and v == np.floor(v))])
    _close(EM._np_polygamma(n, edges), torch.polygamma(n, torch.tensor(edges)).numpy(), rtol=1e-8)
    poles = EM._np_polygamma(n, np.array([0.0, -1.0, -7.0]))
    assert np.all(poles == (-1.0) ** (n + 1) * np.inf)


@pytest.mark.parametrize("n", [2, 4])
def test_polygamma_at_large_negative_halves_is_its_reflection(n):
    # cot(pi x) and its even derivatives vanish at half-integers: psi_n(x) = psi_n(1 - x) exactly there
    # (PyTorch's value is off by ~0.2% at x = -1e6 - 0.5: its cot is not exactly 0)
    x = np.array([-1e6 - 0.5, -20.5])
    np.testing.assert_allclose(EM._np_polygamma(n, x), EM._np_polygamma(n, 1 - x), rtol=1e-14)


def test_polygamma_ends_on_any_input():
    out = EM._np_polygamma(1, np.array([-np.inf, np.inf, np.nan, -1e300, 1e300, -1e20 - 0.5]))
    assert np.isnan(out[0]) and out[1] == 0 and np.isnan(out[2]) and out[4] >= 0


def test_digamma_and_lgamma():
    x = np.concatenate([_wide(1), EDGES, [-np.inf]])
    _close(EM._np_digamma(x), torch.digamma(torch.tensor(x)).numpy(), rtol=1e-10)
    _close(EM._np_lgamma(x), torch.lgamma(torch.tensor(x)).numpy(), rtol=1e-10)


def test_erfinv():
    y = np.concatenate(
        [
            np.linspace(-0.999999, 0.999999, 20001),
            1 - np.geomspace(1e-16, 0.5, 200),
            [-1.0, 1.0, 1.5, -2.0, 0.0, np.nan],
        ]
    )
    _close(EM._np_erfinv(y), torch.erfinv(torch.tensor(y)).numpy(), rtol=1e-13)
