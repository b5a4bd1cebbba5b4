"""Top-level functions PyTorch has at ``torch.*``: special functions, elementwise composites, the
neural-network aliases, distances, products and differences, counts. Each is compared with torch
value for value and gradient for gradient (float32 and float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
from flow.errors import OpError, OpIndexError, OpTypeError

torch = pytest.importorskip("torch")

from _toplevel_parity import check  # noqa: E402

R = np.random.default_rng(7)


def _u(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, size=shape)


# -- special functions and elementwise math ---------------------------------------------------------
@pytest.mark.parametrize(
    "name, values",
    [
        ("lgamma", lambda: np.concatenate([_u(6, lo=0.1, hi=5.0), -_u(4, lo=0.1, hi=0.9) - 1.0])),
        ("digamma", lambda: np.concatenate([_u(6, lo=0.1, hi=5.0), -_u(4, lo=0.1, hi=0.9) - 2.0])),
        ("erfc", lambda: _u(3, 4, lo=-3.0, hi=5.0)),
        ("erfinv", lambda: _u(3, 4, lo=-0.95, hi=0.95)),
        ("exp2", lambda: _u(2, 3, 2)),
        ("frac", lambda: _u(3, 4, lo=-5.0, hi=5.0)),
        ("rad2deg", lambda: _u(4)),
        ("deg2rad", lambda: _u(4, lo=-360, hi=360)),
    ],
)
def test_unary_functions_and_methods_match_torch(name, values):
    x = values()
    check(getattr(flow, name), getattr(torch, name), x)
    check(lambda t: getattr(t, name)(), lambda t: getattr(t, name)(), x, grad=False)


def test_polygamma_orders_match_torch_with_gradients():
    x = _u(3, 4, lo=0.2, hi=4.0)
    for n in (0, 1, 2, 3):
        check(lambda t, n=n: flow.polygamma(n, t), lambda t, n=n: torch.polygamma(n, t), x, rtol=1e-4)
    check(lambda t: t.polygamma(2), lambda t: t.polygamma(2), x, grad=False, rtol=1e-4)


def test_special_values_match_torch():
    x = np.array([0.0, -1.0, -2.0, 1.0, 2.0, math.inf])
    check(flow.lgamma, torch.lgamma, x, grad=False)
    check(flow.digamma, torch.digamma, x[:5], grad=False)
    check(flow.erfinv, torch.erfinv, np.array([-1.0, 1.0, 0.0, 1.5, -2.0]), grad=False)
    check(flow.erfc, torch.erfc, np.array([-math.inf, 30.0, 0.0]), grad=False)


def test_integer_input_is_promoted_to_the_default_float():
    i = flow.tensor([1, 2, 3])
    for name in ("lgamma", "digamma", "erfc", "exp2", "rad2deg", "deg2rad"):
        out = getattr(flow, name)(i)
        assert out.dtype is flow.float32
        np.testing.assert_allclose(out.numpy(), getattr(torch, name)(torch.tensor([1, 2, 3])).numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2", "xlogy"])
def test_binary_functions_broadcast_and_match_torch(name):
    a, b = _u(3, 1, 4), _u(2, 4, lo=0.1, hi=3.0)
    if name == "xlogy":
        a[0, 0, :2] = 0.0
    check(getattr(flow, name), getattr(torch, name), a, b)
    check(lambda x, y: getattr(x, name)(y), lambda x, y: getattr(x, name)(y), a, b, grad=False)


def test_logaddexp_and_xlogy_at_infinities_zeros_and_nan():
    a = np.array([-math.inf, math.inf, -math.inf, 1.0, math.nan, 1000.0])
    b = np.array([-math.inf, math.inf, 2.0, math.inf, 0.0, 1000.0])
    check(flow.logaddexp, torch.logaddexp, a, b, grad=False)
    check(flow.logaddexp2, torch.logaddexp2, a, b, grad=False)
    x = np.array([0.0, 0.0, 0.0, 2.0, 0.0, 1.0])
    y = np.array([0.0, math.inf, math.nan, 0.0, -1.0, 3.0])
    check(flow.xlogy, torch.xlogy, x, y, grad=False)
    np.testing.assert_allclose(flow.xlogy(2.0, flow.tensor([3.0])).numpy(), [2 * math.log(3.0)], rtol=1e-6)
    np.testing.assert_allclose(flow.xlogy(flow.tensor([3.0]), 2).numpy(), [3 * math.log(2.0)], rtol=1e-6)


def test_in_place_methods_match_torch():
    x = _u(3, 4, lo=0.1, hi=0.9)
    for name in ("lgamma_", "digamma_", "erfc_", "erfinv_", "exp2_", "frac_", "rad2deg_", "deg2rad_"):
        f, t = flow.tensor(x), torch.tensor(x)
        assert getattr(f, name)() is f
        getattr(t, name)()
        np.testing.assert_allclose(f.numpy(), t.numpy(), rtol=1e-10)
    f, t = flow.tensor(x), torch.tensor(x)
    f.xlogy_(flow.tensor(x[0]))
    t.xlogy_(torch.tensor(x[0]))
    np.testing.assert_allclose(f.numpy(), t.numpy(), rtol=1e-10)


def test_addcmul_addcdiv_functions_methods_and_in_place():
    a, b, c = _u(3, 4), _u(1, 4), _u(3, 1, lo=0.5, hi=2.0)
    for name in ("addcmul", "addcdiv"):
        for value in (1, 0.5, -2):
            check(
                lambda x, y, z, n=name, v=value: getattr(flow, n)(x, y, z, value=v),
                lambda x, y, z, n=name, v=value: getattr(torch, n)(x, y, z, value=v),
                a,
                b,
                c,
            )
        f, t = flow.tensor(a), torch.tensor(a)
        getattr(f, name + "_")(flow.tensor(b), flow.tensor(c), value=0.25)
        getattr(t, name + "_")(torch.tensor(b), torch.tensor(c), value=0.25)
        np.testing.assert_allclose(f.numpy(), t.numpy(), rtol=1e-12)
    with pytest.raises(OpTypeError, match="integer division with addcdiv"):
        flow.addcdiv(flow.tensor([1]), flow.tensor([2]), flow.tensor([3]))
    with pytest.raises(OpTypeError, match="'tensor1' must be a Tensor"):
        flow.addcmul(flow.ones(2), 2.0, flow.ones(2))


# -- neural-network aliases with torch's top-level signatures ---------------------------------------
def test_softmax_family_and_dtype_argument():
    x = _u(2, 3, 4)
    for dim in (0, 1, -1):
        check(lambda t, d=dim: flow.softmax(t, d), lambda t, d=dim: torch.softmax(t, d), x)
        check(lambda t, d=dim: flow.log_softmax(t, d), lambda t, d=dim: torch.log_softmax(t, d), x)
    out = flow.softmax(flow.tensor(x, dtype=flow.float32), 1, dtype=flow.float64)
    assert out.dtype is flow.float64
    np.testing.assert_allclose(out.numpy(), torch.softmax(torch.tensor(x), 1, dtype=torch.float64).numpy())


def test_convolutions():
    check(
        lambda x, w, b: flow.conv1d(x, w, b, 2, 1, 1, 1),
        lambda x, w, b: torch.conv1d(x, w, b, 2, 1, 1, 1),
        _u(2, 3, 9),
        _u(4, 3, 3),
        _u(4),
        rtol=1e-4,
    )
    check(
        lambda x, w: flow.conv2d(x, w, None, 1, 1, 2, 2),
        lambda x, w: torch.conv2d(x, w, None, 1, 1, 2, 2),
        _u(1, 4, 7, 6),
        _u(2, 2, 3, 3),
        rtol=1e-4,
    )


def test_layer_norm_and_batch_norm_top_level_argument_order():
    x, w, b = _u(4, 3, 5), _u(5), _u(5)
    check(
        lambda *t: flow.layer_norm(t[0], (5,), t[1], t[2], 1e-5, True),
        lambda *t: torch.layer_norm(t[0], (5,), t[1], t[2], 1e-5, True),
        x,
        w,
        b,
        rtol=1e-4,
    )
    x, w, b = _u(4, 3, 5), _u(3), _u(3)
    for training in (True, False):
        rm, rv = _u(3), _u(3, lo=0.5, hi=2.0)
        f_rm, f_rv, t_rm, t_rv = flow.tensor(rm), flow.tensor(rv), torch.tensor(rm), torch.tensor(rv)
        check(
            lambda *t, m=f_rm, v=f_rv, tr=training: flow.batch_norm(t[0], t[1], t[2], m, v, tr, 0.1, 1e-5, True),
            lambda *t, m=t_rm, v=t_rv, tr=training: torch.batch_norm(t[0], t[1], t[2], m, v, tr, 0.1, 1e-5, True),
            x,
            w,
            b,
            dtypes=("float64",),
        )
        np.testing.assert_allclose(f_rm.numpy(), t_rm.numpy(), rtol=1e-10)
        np.testing.assert_allclose(f_rv.numpy(), t_rv.numpy(), rtol=1e-10)


def test_embedding_takes_weight_first_and_minus_one_padding():
    w, idx = _u(6, 3), np.array([[0, 2, 5], [2, 2, 1]])
    check(lambda w, i: flow.embedding(w, i), lambda w, i: torch.embedding(w, i), w, idx)
    check(lambda w, i: flow.embedding(w, i, 2), lambda w, i: torch.embedding(w, i, 2), w, idx)
    check(
        lambda w, i: flow.embedding(w, i, -1, True),
        lambda w, i: torch.embedding(w, i, -1, True),
        w,
        idx,
    )


def test_dropout_top_level():
    x = flow.ones(100, 100)
    np.testing.assert_array_equal(flow.dropout(x, 0.3, False).numpy(), x.numpy())
    np.testing.assert_array_equal(flow.dropout(x, 1.0, True).numpy(), np.zeros((100, 100)))
    kept = flow.dropout(x, 0.5, True).numpy()
    assert set(np.unique(kept)) <= {0.0, 2.0} and 0.4 < (kept > 0).mean() < 0.6


def test_cosine_similarity_broadcasts():
    check(
        lambda a, b: flow.cosine_similarity(a, b, -1),
        lambda a, b: torch.cosine_similarity(a, b, -1),
        _u(3, 1, 5),
        _u(4, 5),
    )
    check(flow.cosine_similarity, torch.cosine_similarity, _u(2, 6), _u(2, 6))


# -- distances ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, 0.5, math.inf])
def test_cdist_and_pdist(p):
    grad = p not in (0.0,)
    check(
        lambda a, b: flow.cdist(a, b, p),
        lambda a, b: torch.cdist(a, b, p),
        _u(2, 1, 4, 3),
        _u(3, 5, 3),
        grad=grad,
        rtol=1e-4,
    )
    check(lambda a: flow.pdist(a, p), lambda a: torch.pdist(a, p), _u(5, 3), grad=grad, rtol=1e-4)


def test_cdist_zero_distance_has_zero_gradient():
    a = _u(3, 4)
    b = np.concatenate([a[:1], _u(2, 4)])
    check(flow.cdist, torch.cdist, a, b, rtol=1e-4)


def test_distance_errors():
    with pytest.raises(OpError, match="same number of columns"):
        flow.cdist(flow.ones(2, 3), flow.ones(2, 4))
    with pytest.raises(OpError, match="'p' must be non-negative"):
        flow.cdist(flow.ones(2, 3), flow.ones(2, 3), -1.0)
    with pytest.raises(OpError, match="at least 2-d"):
        flow.cdist(flow.ones(3), flow.ones(2, 3))
    with pytest.raises(OpError, match="'input' must be 2-d"):
        flow.pdist(flow.ones(2, 3, 4))
    with pytest.raises(OpTypeError, match="floating-point"):
        flow.pdist(flow.ones(2, 3, dtype=flow.int64))


# -- products, differences, integrals ----------------------------------------------------------------
def test_kron_and_trace():
    check(flow.kron, torch.kron, _u(2, 3), _u(3, 1))
    check(flow.kron, torch.kron, _u(2, 1, 2), _u(3, 2))
    check(flow.kron, torch.kron, _u(3), _u(2, 2))
    check(lambda a, b: a.kron(b), lambda a, b: a.kron(b), _u(2), _u(2), grad=False)
    check(flow.trace, torch.trace, _u(3, 4))
    check(lambda a: a.trace(), lambda a: a.trace(), _u(4, 2))
    i = flow.trace(flow.tensor([[1, 2], [3, 4]]))
    assert i.dtype is flow.int64 and i.item() == 5
    with pytest.raises(OpError, match="expected a 2-d tensor"):
        flow.trace(flow.ones(3))


def test_cross_default_and_explicit_dims():
    a, b = _u(3, 4), _u(3, 1)
    check(flow.cross, lambda x, y: torch.cross(x, y, dim=0), a, b)
    check(lambda x, y: flow.cross(x, y, dim=-1), lambda x, y: torch.cross(x, y, dim=-1), _u(2, 5, 3), _u(1, 5, 3))
    check(lambda x, y: x.cross(y, 1), lambda x, y: x.cross(y, 1), _u(2, 3), _u(2, 3), grad=False)
    with pytest.raises(OpError, match="dimension 0 must have size 3"):
        flow.cross(flow.ones(4, 3), flow.ones(4, 3), dim=0)
    with pytest.raises(OpError, match="no dimension of size 3"):
        flow.cross(flow.ones(4, 2), flow.ones(4, 2))
    with pytest.raises(OpError, match="same number of dims"):
        flow.cross(flow.ones(4, 3), flow.ones(3))


def test_diff():
    x = _u(3, 5, 4)
    for n, dim in ((1, -1), (2, 1), (3, 0), (0, 0), (6, 1)):
        check(lambda t, n=n, d=dim: flow.diff(t, n, d), lambda t, n=n, d=dim: torch.diff(t, n, d), x)
    check(
        lambda t, p, a: flow.diff(t, 2, 1, p, a),
        lambda t, p, a: torch.diff(t, 2, 1, p, a),
        x,
        _u(3, 2, 4),
        _u(3, 1, 4),
    )
    ints, bools = np.array([1, 4, 9, 16, 25]), np.array([True, False, False, True])
    check(lambda t: flow.diff(t, 2), lambda t: torch.diff(t, 2), ints, grad=False)
    check(flow.diff, torch.diff, bools, grad=False)
    check(lambda t: t.diff(dim=0), lambda t: t.diff(dim=0), x, grad=False)
    with pytest.raises(OpError, match="must match the input's shape"):
        flow.diff(flow.ones(3, 4), prepend=flow.ones(2, 4))
    with pytest.raises(OpError, match="at least one-dimensional"):
        flow.diff(flow.tensor(1.0))
    with pytest.raises(OpError, match="non-negative"):
        flow.diff(flow.ones(3), -1)


def test_trapezoid_trapz_and_cumulative_trapezoid():
    y, x1, xs = _u(3, 6), np.sort(_u(6)), np.sort(_u(3, 6), axis=-1)
    for f, t in ((flow.trapezoid, torch.trapezoid), (flow.cumulative_trapezoid, torch.cumulative_trapezoid)):
        check(f, t, y)
        check(lambda a, f=f: f(a, dx=0.5, dim=0), lambda a, t=t: t(a, dx=0.5, dim=0), y)
        check(f, t, y, x1)
        check(f, t, y, xs)
    check(flow.trapz, torch.trapz, y, x1)
    check(lambda a: flow.trapz(a, dx=2.0), lambda a: torch.trapz(a, dx=2.0), y)
    check(flow.trapezoid, torch.trapezoid, np.array([1, 2, 4]), grad=False)
    with pytest.raises(OpError, match="'x' has 5 samples but dim 1 of y has 6"):
        flow.trapezoid(flow.tensor(y), flow.tensor(x1[:5]))
    with pytest.raises(OpError, match="not both"):
        flow.trapezoid(flow.tensor(y), flow.tensor(x1), dx=1.0)


@pytest.mark.parametrize("row, col, offset", [(3, 3, 0), (4, 6, 1), (5, 3, -2), (0, 4, 0), (3, 4, 10), (3, 4, -10)])
def test_tril_and_triu_indices(row, col, offset):
    for name in ("tril_indices", "triu_indices"):
        f, t = getattr(flow, name)(row, col, offset), getattr(torch, name)(row, col, offset)
        assert f.dtype is flow.int64
        np.testing.assert_array_equal(f.numpy(), t.numpy())
    assert flow.tril_indices(3, 3, dtype=flow.int32).dtype is flow.int32
    with pytest.raises(OpError, match="non-negative"):
        flow.triu_indices(-1, 3)


# -- counting ------------------------------------------------------------------------------------------
def test_histc_matches_torch():
    x = _u(200, lo=-3.0, hi=3.0)
    x[:3] = [np.nan, 3.0, -3.0]
    for bins, lo, hi in ((10, -2.0, 2.0), (7, 0, 0), (1, -5.0, 5.0), (4, 3.0, 3.0)):
        check(
            lambda t, b=bins, a=lo, c=hi: flow.histc(t, b, a, c),
            lambda t, b=bins, a=lo, c=hi: torch.histc(t, b, a, c),
            x[3:] if lo == hi else x,
            grad=False,
        )
    check(lambda t: t.histc(5), lambda t: t.histc(5), np.array([1.0, 1.0, 1.0]), grad=False)
    with pytest.raises(OpError, match="is not finite"):
        flow.histc(flow.tensor([1.0, math.nan]), 3)
    with pytest.raises(OpError, match="'bins' must be positive"):
        flow.histc(flow.ones(3), 0)
    with pytest.raises(OpError, match="must not be smaller"):
        flow.histc(flow.ones(3), 3, 2.0, 1.0)
    with pytest.raises(OpTypeError, match="floating-point"):
        flow.histc(flow.tensor([1, 2]))


def test_bincount_matches_torch():
    x = R.integers(0, 7, size=30)
    check(flow.bincount, torch.bincount, x, grad=False)
    check(lambda t: flow.bincount(t, minlength=12), lambda t: torch.bincount(t, minlength=12), x, grad=False)
    check(lambda t, w: flow.bincount(t, w), lambda t, w: torch.bincount(t, w), x, _u(30), grad=False)
    check(lambda t: t.bincount(), lambda t: t.bincount(), np.zeros(0, dtype=np.int64), grad=False)
    fw = flow.bincount(flow.tensor([0, 1, 1]), flow.tensor([1, 2, 3]))
    assert fw.dtype is flow.float64 and fw.tolist() == [1.0, 5.0]
    with pytest.raises(OpIndexError, match="non-negative"):
        flow.bincount(flow.tensor([1, -1]))
    with pytest.raises(OpError, match="must be 1-d"):
        flow.bincount(flow.tensor([[1]]))
    with pytest.raises(OpTypeError, match="integer tensor"):
        flow.bincount(flow.tensor([1.0]))


def test_numpy_fallbacks_without_scipy_match_torch():
    # SciPy is optional: the kernels fall back to these when it is absent
    from flow.ops import extra_math as E

    x = np.concatenate([_u(20, lo=0.05, hi=30.0), -_u(10, lo=0.1, hi=0.9) - 3.0])
    np.testing.assert_allclose(E._np_digamma(x), torch.digamma(torch.tensor(x)).numpy(), rtol=1e-12, atol=1e-12)
    pos = x[:20]
    for n in (1, 2, 3):
        want = torch.polygamma(n, torch.tensor(pos)).numpy()
        # torch's own trigamma (n=1) is good to about 5e-10 relative; scipy agrees with the fallback to 1e-15
        np.testing.assert_allclose(E._np_polygamma(n, pos), want, rtol=2e-9)
    y = np.concatenate([_u(30, lo=-0.999999, hi=0.999999), [-1.0, 1.0, 0.0, 1.5]])
    np.testing.assert_allclose(E._np_erfinv(y), torch.erfinv(torch.tensor(y)).numpy(), rtol=1e-12, atol=1e-12)
