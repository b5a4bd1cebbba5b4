"""flow.nn.init: gains, fans, distributions (statistical checks with generous tolerances and fixed seeds),
reproducibility through flow.manual_seed, and the default initialisation of the layers."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
import flow.nn as nn
from flow.nn import init


def _np(t):
    return t.detach().numpy().astype(np.float64)


# -- gains and fans ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,param,expected",
    [
        ("linear", None, 1.0),
        ("conv2d", None, 1.0),
        ("sigmoid", None, 1.0),
        ("tanh", None, 5.0 / 3),
        ("relu", None, math.sqrt(2.0)),
        ("leaky_relu", None, math.sqrt(2.0 / (1 + 0.01**2))),
        ("leaky_relu", math.sqrt(5), math.sqrt(2.0 / 6)),
        ("selu", None, 0.75),
    ],
)
def test_calculate_gain(name, param, expected):
    assert init.calculate_gain(name, param) == pytest.approx(expected)


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="not a valid number"):
        init.calculate_gain("leaky_relu", "x")


def test_fan_in_and_fan_out():
    assert init._calculate_fan_in_and_fan_out(flow.empty(5, 3)) == (3, 5)
    assert init._calculate_fan_in_and_fan_out(flow.empty(8, 4, 3, 3)) == (36, 72)
    assert init._calculate_fan_in_and_fan_out(flow.empty(8, 4, 5)) == (20, 40)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(flow.empty(5))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(flow.empty(3, 3), mode="fan_avg")


# -- simple fills ----------------------------------------------------------------------------------
def test_constant_zeros_ones_eye():
    t = flow.empty(3, 4)
    assert init.constant_(t, 2.5) is t
    assert np.all(_np(t) == 2.5)
    assert not _np(init.zeros_(t)).any()
    assert np.all(_np(init.ones_(t)) == 1)
    np.testing.assert_array_equal(_np(init.eye_(flow.empty(3, 4))), np.eye(3, 4))
    with pytest.raises(ValueError):
        init.eye_(flow.empty(2, 2, 2))


def test_dirac_is_identity_kernel():
    w = init.dirac_(flow.empty(4, 4, 3, 3))
    a = _np(w)
    assert a.sum() == 4
    for i in range(4):
        assert a[i, i, 1, 1] == 1
    g = _np(init.dirac_(flow.empty(6, 3, 3), groups=2))
    assert g.sum() == 6 and g[3, 0, 1] == 1
    with pytest.raises(ValueError):
        init.dirac_(flow.empty(3, 3))


def test_in_place_under_no_grad_on_parameters():
    p = nn.Parameter(flow.empty(50, 40))
    for fn in (
        init.uniform_,
        init.normal_,
        init.xavier_uniform_,
        init.xavier_normal_,
        init.kaiming_uniform_,
        init.kaiming_normal_,
        init.trunc_normal_,
        init.orthogonal_,
        init.zeros_,
        init.ones_,
    ):
        assert fn(p) is p
        assert p.requires_grad and p.is_leaf and p.grad_fn is None
    (p * 2).sum().backward()
    assert p.grad is not None


@pytest.mark.parametrize("dtype", [flow.float64, flow.float16, flow.bfloat16])
def test_other_dtypes(dtype):
    t = flow.empty(100, 100, dtype=dtype)
    init.uniform_(t, -1, 1)
    assert t.dtype == dtype
    a = t.float().numpy()
    assert a.min() >= -1 and a.max() <= 1 and a.std() > 0.5


# -- distributions ---------------------------------------------------------------------------------
N = 200_000


def test_uniform_moments_and_bounds():
    flow.manual_seed(0)
    a = _np(init.uniform_(flow.empty(N), -2.0, 3.0))
    assert a.min() >= -2.0 and a.max() <= 3.0
    assert a.mean() == pytest.approx(0.5, abs=0.03)
    assert a.var() == pytest.approx(25 / 12, rel=0.03)
    hist = np.histogram(a, bins=10, range=(-2, 3))[0] / N
    np.testing.assert_allclose(hist, 0.1, atol=0.01)


def test_normal_moments():
    flow.manual_seed(1)
    a = _np(init.normal_(flow.empty(N), mean=1.5, std=0.5))
    assert a.mean() == pytest.approx(1.5, abs=0.01)
    assert a.std() == pytest.approx(0.5, rel=0.02)
    assert abs(((a - 1.5) / 0.5 > 1.96).mean() - 0.025) < 0.004


def test_trunc_normal_bounds_and_moments():
    flow.manual_seed(2)
    a = _np(init.trunc_normal_(flow.empty(N)))  # N(0, 1) truncated to [-2, 2]
    assert a.min() >= -2 and a.max() <= 2
    phi = math.exp(-2.0) / math.sqrt(2 * math.pi)
    mass = math.erf(2 / math.sqrt(2))
    assert a.mean() == pytest.approx(0.0, abs=0.01)
    assert a.var() == pytest.approx(1 - 2 * 2 * phi / mass, rel=0.03)
    b = _np(init.trunc_normal_(flow.empty(N), mean=0.0, std=0.02, a=-0.04, b=0.04))
    assert b.min() >= -0.04 and b.max() <= 0.04 and b.std() == pytest.approx(0.02 * 0.8796, rel=0.03)
    c = _np(init.trunc_normal_(flow.empty(1000), mean=10.0, std=1.0, a=0.0, b=1.0))  # almost no mass there
    assert c.min() >= 0.0 and c.max() <= 1.0
    with pytest.raises(ValueError):
        init.trunc_normal_(flow.empty(3), a=1, b=0)


def test_xavier():
    flow.manual_seed(3)
    w = flow.empty(400, 600)
    bound = math.sqrt(6 / 1000)
    a = _np(init.xavier_uniform_(w))
    assert bound * 0.99 < np.abs(a).max() <= bound * (1 + 1e-6)
    assert a.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    a = _np(init.xavier_uniform_(w, gain=2.0))
    assert np.abs(a).max() <= 2 * bound * (1 + 1e-6) and a.std() == pytest.approx(2 * bound / math.sqrt(3), rel=0.02)
    a = _np(init.xavier_normal_(w, gain=init.calculate_gain("tanh")))
    assert a.std() == pytest.approx(5 / 3 * math.sqrt(2 / 1000), rel=0.02)


def test_kaiming():
    flow.manual_seed(4)
    w = flow.empty(300, 200, 2)  # fan_in 400, fan_out 600
    a = _np(init.kaiming_uniform_(w))
    bound = math.sqrt(2) * math.sqrt(3 / 400)  # a=0: leaky_relu with slope 0 has the gain of relu
    assert np.abs(a).max() <= bound * (1 + 1e-6) and a.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    a = _np(init.kaiming_uniform_(w, a=math.sqrt(5)))  # the default of Linear and Conv: U(-1/sqrt(fan_in), ..)
    assert np.abs(a).max() <= 1 / 20 + 1e-7 and np.abs(a).max() > 0.049
    a = _np(init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu"))
    assert a.std() == pytest.approx(math.sqrt(2 / 600), rel=0.02)
    a = _np(init.kaiming_normal_(w, nonlinearity="linear"))
    assert a.std() == pytest.approx(math.sqrt(1 / 400), rel=0.02)
    init.kaiming_uniform_(flow.empty(0, 3))  # empty tensors are left alone


@pytest.mark.parametrize("shape", [(6, 6), (4, 9), (9, 4), (8, 2, 3, 3)])
def test_orthogonal(shape):
    flow.manual_seed(5)
    w = _np(init.orthogonal_(flow.empty(*shape), gain=2.0)).reshape(shape[0], -1)
    r, c = w.shape
    prod = w @ w.T if r <= c else w.T @ w
    np.testing.assert_allclose(prod, 4 * np.eye(min(r, c)), atol=1e-5)
    with pytest.raises(ValueError):
        init.orthogonal_(flow.empty(3))


def test_sparse():
    flow.manual_seed(6)
    a = _np(init.sparse_(flow.empty(10, 50), sparsity=0.3))
    assert np.all((a == 0).sum(0) >= 3)
    assert a[a != 0].std() == pytest.approx(0.01, rel=0.2)


# -- reproducibility --------------------------------------------------------------------------------
def test_manual_seed_reproduces_init_and_layers():
    def sample():
        w = flow.empty(20, 30)
        init.kaiming_uniform_(w)
        init.normal_(w)
        return _np(w)

    flow.manual_seed(123)
    x = sample()
    flow.manual_seed(123)
    np.testing.assert_array_equal(x, sample())
    assert not np.array_equal(x, sample())
    flow.manual_seed(7)
    l1 = nn.Linear(5, 6)
    flow.manual_seed(7)
    l2 = nn.Linear(5, 6)
    np.testing.assert_array_equal(_np(l1.weight), _np(l2.weight))
    np.testing.assert_array_equal(_np(l1.bias), _np(l2.bias))


def test_generator_argument():
    g1 = flow.Generator().manual_seed(9)
    g2 = flow.Generator().manual_seed(9)
    state = flow.get_rng_state()
    a = _np(init.uniform_(flow.empty(10), generator=g1))
    b = _np(init.uniform_(flow.empty(10), generator=g2))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(flow.get_rng_state().numpy(), state.numpy())  # default generator untouched


# -- default initialisation of layers ---------------------------------------------------------------
def _uniform_bound_check(a, bound):
    assert np.abs(a).max() <= bound * (1 + 1e-6)
    if a.size > 2000:
        assert np.abs(a).max() > 0.98 * bound
        assert a.std() == pytest.approx(bound / math.sqrt(3), rel=0.05)


def test_linear_and_conv_defaults():
    flow.manual_seed(10)
    lin = nn.Linear(256, 128)
    _uniform_bound_check(_np(lin.weight), 1 / 16)
    _uniform_bound_check(_np(lin.bias), 1 / 16)
    conv = nn.Conv2d(16, 64, 3)
    _uniform_bound_check(_np(conv.weight), 1 / 12)
    _uniform_bound_check(_np(conv.bias), 1 / 12)
    convt = nn.ConvTranspose2d(16, 32, 3)  # weight (16, 32, 3, 3): fan_in computed from dim 1 = 288
    _uniform_bound_check(_np(convt.weight), 1 / math.sqrt(288))
    _uniform_bound_check(_np(convt.bias), 1 / math.sqrt(288))
    c1 = nn.Conv1d(8, 4, 5, groups=2)
    _uniform_bound_check(_np(c1.weight), 1 / math.sqrt(20))


def test_other_layer_defaults():
    flow.manual_seed(11)
    emb = nn.Embedding(1000, 64, padding_idx=3)
    e = _np(emb.weight)
    assert not e[3].any()
    assert e.std() == pytest.approx(1.0, rel=0.03) and abs(e.mean()) < 0.02
    lstm = nn.LSTM(32, 100, num_layers=2)
    for p in lstm.parameters():
        _uniform_bound_check(_np(p), 0.1)
    mha = nn.MultiheadAttention(64, 4)
    _uniform_bound_check(_np(mha.in_proj_weight), math.sqrt(6 / (64 + 192)))
    assert not _np(mha.in_proj_bias).any() and not _np(mha.out_proj.bias).any()
    _uniform_bound_check(_np(mha.out_proj.weight), 1 / 8)
    bn = nn.BatchNorm2d(5)
    assert np.all(_np(bn.weight) == 1) and not _np(bn.bias).any()
    assert np.all(_np(bn.running_var) == 1) and not _np(bn.running_mean).any() and bn.num_batches_tracked.item() == 0
    ln = nn.LayerNorm((4, 5))
    assert np.all(_np(ln.weight) == 1) and not _np(ln.bias).any() and ln.weight.shape == (4, 5)
    assert np.all(_np(nn.PReLU(3).weight) == 0.25)


def test_layer_defaults_match_torch_spread():
    torch = pytest.importorskip("torch")
    flow.manual_seed(12)
    torch.manual_seed(12)
    pairs = [
        (nn.Linear(300, 200), torch.nn.Linear(300, 200)),
        (nn.Conv2d(8, 32, 5), torch.nn.Conv2d(8, 32, 5)),
        (nn.GRU(20, 60), torch.nn.GRU(20, 60)),
        (nn.MultiheadAttention(48, 4, add_bias_kv=True), torch.nn.MultiheadAttention(48, 4, add_bias_kv=True)),
        (nn.Embedding(500, 32), torch.nn.Embedding(500, 32)),
    ]
    for f, t in pairs:
        fsd, tsd = f.state_dict(), t.state_dict()
        assert list(fsd) == list(tsd)
        for k in tsd:
            fa, ta = _np(fsd[k]), tsd[k].detach().double().numpy()
            assert fa.shape == ta.shape, k
            if ta.size > 1000 and ta.std() > 0:
                assert fa.std() == pytest.approx(ta.std(), rel=0.1), k
                assert np.abs(fa).max() <= np.abs(ta).max() * 1.2 + 1e-6 or ta.size < 5000, k
            elif ta.std() == 0:
                np.testing.assert_array_equal(fa, ta)
