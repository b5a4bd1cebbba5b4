"""flow.special against torch.special: values and gradients, float32 and float64, including poles,
tails and non-finite input; and the errors on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
import flow.special as fs
from flow.errors import OpError, OpTypeError

torch = pytest.importorskip("torch")
ts = torch.special

DTYPES = [("float32", 2e-6), ("float64", 1e-12)]


def _grid(low, high, n=41, seed=0):
    return np.random.default_rng(seed).uniform(low, high, size=(n,))


def compare(ff, tf, arrays, dtype, tol, grad=True, gtol=None):
    fx = [flow.tensor(a, dtype=getattr(flow, dtype), requires_grad=grad) for a in arrays]
    tx = [torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=grad) for a in arrays]
    fo, to = ff(*fx), tf(*tx)
    assert fo.dtype.name == str(to.dtype).split(".")[-1]
    np.testing.assert_allclose(fo.detach().numpy(), to.detach().numpy(), rtol=tol, atol=tol)
    if not grad:
        return
    w = np.linspace(0.5, 1.5, fo.numel()).reshape(tuple(fo.shape))
    (fo * flow.tensor(w, dtype=fo.dtype)).sum().backward()
    (to * torch.tensor(w, dtype=to.dtype)).sum().backward()
    g = gtol or tol * 10
    for a, b in zip(fx, tx):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=g, atol=g)


UNARY = [
    ("erf", (-3, 3)),
    ("erfc", (-3, 3)),
    ("erfinv", (-0.95, 0.95)),
    ("expit", (-6, 6)),
    ("logit", (0.05, 0.95)),
    ("gammaln", (0.1, 8)),
    ("digamma", (0.1, 8)),
    ("psi", (0.1, 8)),
    ("i0", (-8, 8)),
    ("i0e", (-8, 8)),
    ("i1", (-8, 8)),
    ("i1e", (-8, 8)),
    ("ndtr", (-5, 5)),
    ("ndtri", (0.02, 0.98)),
    ("log_ndtr", (-30, 6)),
    ("sinc", (-3, 3)),
    ("entr", (0.05, 3)),
    ("exp2", (-3, 3)),
    ("expm1", (-2, 2)),
    ("log1p", (-0.5, 2)),
]


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("name,rng", UNARY, ids=[u[0] for u in UNARY])
def test_unary_matches_torch(name, rng, dtype, tol):
    x = _grid(*rng)
    # the gradient of digamma is PyTorch's trigamma, accurate to about 1e-10 only
    gtol = 1e-9 if name in ("digamma", "psi") and dtype == "float64" else None
    compare(getattr(fs, name), getattr(ts, name), [x], dtype, tol * 5, gtol=gtol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_polygamma_multigammaln_round_match_torch(dtype, tol):
    x = _grid(0.3, 6)
    for n in (0, 1, 2, 3):
        # PyTorch's trigamma (n = 1) is accurate to about 1e-10 only
        compare(lambda t, n=n: fs.polygamma(n, t), lambda t, n=n: ts.polygamma(n, t), [x], dtype, max(tol, 1e-9))
    compare(lambda t: fs.multigammaln(t, 3), lambda t: ts.multigammaln(t, 3), [x + 1.5], dtype, tol * 10)
    compare(fs.round, ts.round, [x * 3], dtype, tol, grad=False)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_binary_functions_match_torch_with_broadcasting(dtype, tol):
    x, y = _grid(-2, 2, 12).reshape(3, 4), _grid(0.1, 3, 4, seed=1)
    x[0, 0] = 0.0
    compare(fs.xlogy, ts.xlogy, [x, y], dtype, tol)
    compare(fs.xlog1py, ts.xlog1py, [x, y], dtype, tol)
    s, q = _grid(1.2, 6, 12, seed=2).reshape(3, 4), _grid(0.2, 5, 4, seed=3)
    compare(fs.zeta, ts.zeta, [s, q], dtype, tol * 10, grad=False)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_reductions_and_softmax_match_torch(dtype, tol):
    x = _grid(-3, 3, 12).reshape(3, 4)
    compare(lambda t: fs.logsumexp(t, 1), lambda t: ts.logsumexp(t, 1), [x], dtype, tol)
    compare(lambda t: fs.softmax(t, 0), lambda t: ts.softmax(t, 0), [x], dtype, tol)
    compare(lambda t: fs.log_softmax(t, -1), lambda t: ts.log_softmax(t, -1), [x], dtype, tol)


SPECIAL_POINTS = {
    "erfinv": [-1.0, 1.0, 1.5, -1 + 1e-15, 1 - 1e-12, 0.0, math.nan],
    "i0": [0.0, 30.0, 31.0, -100.0, 700.0, math.inf, -math.inf, math.nan],
    "i0e": [0.0, 30.0, 31.0, -100.0, 1e4, math.inf, math.nan],
    "i1": [0.0, 30.0, -31.0, 100.0, -700.0, math.inf, math.nan],
    "i1e": [0.0, -30.0, 31.0, 1e4, -math.inf, math.nan],
    "log_ndtr": [-1e3, -40.0, -20.0, -19.9, 0.0, 10.0, 40.0, math.inf, -math.inf, math.nan],
    "ndtr": [-40.0, 0.0, 40.0, math.inf, -math.inf],
    "ndtri": [0.0, 1.0, 0.5, 1.5, -0.1],
    "gammaln": [0.0, -1.0, -2.5, 1e-8, 200.0, math.inf],
    "digamma": [0.0, -1.0, -2.5, 1e-8, 200.0],
    "sinc": [0.0, 1.0, -2.0, 1e-20],
    "entr": [0.0, -1.0, 1.0, math.inf, math.nan],
    "xlogy": [(0.0, 0.0), (0.0, math.nan), (1.0, 0.0), (0.0, math.inf), (2.0, -1.0)],
    "xlog1py": [(0.0, -1.0), (0.0, math.nan), (1.0, -1.0), (0.0, math.inf), (2.0, -2.0), (0.0, -3.0)],
    "zeta": [(1.0, 2.0), (0.5, 2.0), (2.0, 0.0), (2.0, -1.0), (3.0, 1.0), (2.0, 1e3)],
}


@pytest.mark.parametrize("name", sorted(SPECIAL_POINTS))
def test_poles_tails_and_non_finite_values_match_torch(name):
    pts = SPECIAL_POINTS[name]
    if isinstance(pts[0], tuple):
        a, b = (np.array(v) for v in zip(*pts))
        got = getattr(fs, name)(flow.tensor(a), flow.tensor(b)).numpy()
        want = getattr(ts, name)(torch.tensor(a), torch.tensor(b)).numpy()
    else:
        got = getattr(fs, name)(flow.tensor(np.array(pts))).numpy()
        want = getattr(ts, name)(torch.tensor(np.array(pts))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_ints_are_promoted_like_torch():
    for name in ("i0", "sinc", "entr", "ndtr", "log_ndtr", "i1e"):
        got = getattr(fs, name)(flow.tensor([1, 2, 3]))
        want = getattr(ts, name)(torch.tensor([1, 2, 3]))
        assert got.dtype is flow.float32
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_gradients_at_zero_match_torch():
    for name in ("i1", "i1e", "sinc", "i0e"):
        fx = flow.tensor([0.0, 1.0], dtype=flow.float64, requires_grad=True)
        tx = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)
        getattr(fs, name)(fx).sum().backward()
        getattr(ts, name)(tx).sum().backward()
        np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-12, err_msg=name)
    fx = flow.tensor([0.0, 2.0], dtype=flow.float64, requires_grad=True)
    tx = torch.tensor([0.0, 2.0], dtype=torch.float64, requires_grad=True)
    fs.xlog1py(fx, flow.tensor([-1.0, 1.0], dtype=flow.float64)).sum().backward()
    ts.xlog1py(tx, torch.tensor([-1.0, 1.0], dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy())


def test_top_level_names():
    x = flow.tensor([0.5, 2.0])
    np.testing.assert_allclose(flow.i0(x).numpy(), torch.i0(torch.tensor([0.5, 2.0])).numpy(), rtol=1e-6)
    np.testing.assert_allclose(flow.sinc(x).numpy(), torch.sinc(torch.tensor([0.5, 2.0])).numpy(), atol=1e-7)
    np.testing.assert_allclose(
        flow.mvlgamma(x + 2, 2).numpy(), torch.mvlgamma(torch.tensor([2.5, 4.0]), 2).numpy(), rtol=1e-6
    )


def test_errors():
    with pytest.raises(OpTypeError, match="must be a Tensor"):
        fs.i0([1.0])
    with pytest.raises(OpTypeError, match="at least one Tensor"):
        fs.zeta(2.0, 1.0)
    with pytest.raises(OpError, match="greater than"):
        fs.multigammaln(flow.tensor([0.4]), 2)
    with pytest.raises(OpError, match="'p' must be a positive int"):
        fs.multigammaln(flow.tensor([3.0]), 0)
    with pytest.raises(OpError, match="cannot be broadcast"):
        fs.zeta(flow.ones(3), flow.ones(4))
    with pytest.raises(OpError, match="cannot be broadcast"):
        fs.xlog1py(flow.ones(3), flow.ones(4))
    with pytest.raises(OpTypeError, match="bool"):
        flow.ops.call("i0", flow.tensor([True]))
