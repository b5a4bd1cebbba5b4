"""flow.distributions: values against torch.distributions, rsample gradients against finite
differences, sample statistics, seeded reproducibility and parameter validation."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.distributions as D
from flow.testing import gradcheck


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def T(a, requires_grad=False):
    t = flow.tensor(np.asarray(a))
    return t.requires_grad_(True) if requires_grad else t


def N(t):
    return np.asarray(t.detach().numpy())


RNG = np.random.default_rng(0)
LOC = RNG.normal(size=(2, 3))
SCALE = RNG.uniform(0.5, 2.0, size=(2, 3))
VALUE = RNG.normal(size=(4, 2, 3))
LOGITS = RNG.normal(size=(2, 5))
PROBS = RNG.uniform(0.05, 0.95, size=(2, 3))
A = RNG.normal(size=(2, 3, 3))
COV = A @ A.transpose(0, 2, 1) + np.eye(3)
A2 = RNG.normal(size=(3, 3))
COV2 = A2 @ A2.T + 0.5 * np.eye(3)
MLOC = RNG.normal(size=(2, 3))


def _pairs(torch):
    """(flow distribution, torch distribution, a value in the support) for every family."""
    td = torch.distributions
    tt = torch.tensor
    low = LOC - SCALE
    high = LOC + SCALE
    return {
        "normal": (D.Normal(T(LOC), T(SCALE)), td.Normal(tt(LOC), tt(SCALE)), VALUE),
        "uniform": (D.Uniform(T(low), T(high)), td.Uniform(tt(low), tt(high)), LOC + 0.5 * SCALE),
        "bernoulli_p": (D.Bernoulli(T(PROBS)), td.Bernoulli(tt(PROBS)), (VALUE > 0).astype(np.float64)[:, :, :3]),
        "bernoulli_l": (D.Bernoulli(logits=T(LOC)), td.Bernoulli(logits=tt(LOC)), (VALUE > 0).astype(np.float64)),
        "categorical_l": (
            D.Categorical(logits=T(LOGITS)),
            td.Categorical(logits=tt(LOGITS)),
            np.array([[0, 4], [2, 1]]),
        ),
        "categorical_p": (
            D.Categorical(probs=T(np.exp(LOGITS))),
            td.Categorical(probs=tt(np.exp(LOGITS))),
            np.array([3, 1]),
        ),
        "mvn_cov": (
            D.MultivariateNormal(T(MLOC), covariance_matrix=T(COV)),
            td.MultivariateNormal(tt(MLOC), covariance_matrix=tt(COV)),
            VALUE,
        ),
        "mvn_prec": (
            D.MultivariateNormal(T(MLOC), precision_matrix=T(COV)),
            td.MultivariateNormal(tt(MLOC), precision_matrix=tt(COV)),
            VALUE,
        ),
        "mvn_tril": (
            D.MultivariateNormal(T(MLOC[0]), scale_tril=T(np.linalg.cholesky(COV2))),
            td.MultivariateNormal(tt(MLOC[0]), scale_tril=tt(np.linalg.cholesky(COV2))),
            VALUE,
        ),
        "independent": (
            D.Independent(D.Normal(T(LOC), T(SCALE)), 1),
            td.Independent(td.Normal(tt(LOC), tt(SCALE)), 1),
            VALUE,
        ),
    }


NAMES = [
    "normal",
    "uniform",
    "bernoulli_p",
    "bernoulli_l",
    "categorical_l",
    "categorical_p",
    "mvn_cov",
    "mvn_prec",
    "mvn_tril",
    "independent",
]


@pytest.mark.parametrize("name", NAMES)
def test_values_match_torch(torch, name):
    fd, td, value = _pairs(torch)[name]
    assert tuple(fd.batch_shape) == tuple(td.batch_shape)
    assert tuple(fd.event_shape) == tuple(td.event_shape)
    np.testing.assert_allclose(N(fd.log_prob(T(value))), td.log_prob(torch.tensor(value)).numpy(), rtol=1e-10)
    np.testing.assert_allclose(N(fd.entropy()), td.entropy().numpy(), rtol=1e-10)
    if not name.startswith("categorical"):
        np.testing.assert_allclose(N(fd.mean), td.mean.numpy(), rtol=1e-10)
        np.testing.assert_allclose(N(fd.variance), td.variance.numpy(), rtol=1e-10)
        np.testing.assert_allclose(N(fd.stddev), td.stddev.numpy(), rtol=1e-10)
    assert tuple(fd.sample((7,)).shape) == tuple(td.sample((7,)).shape)
    e = fd.expand((4,) + tuple(fd.batch_shape))
    te = td.expand((4,) + tuple(td.batch_shape))
    assert tuple(e.batch_shape) == tuple(te.batch_shape)
    np.testing.assert_allclose(N(e.entropy()), te.entropy().numpy(), rtol=1e-10)


def test_derived_parameters_match_torch(torch):
    td = torch.distributions
    c, tc = D.Categorical(logits=T(LOGITS)), td.Categorical(logits=torch.tensor(LOGITS))
    np.testing.assert_allclose(N(c.probs), tc.probs.numpy(), rtol=1e-10)
    np.testing.assert_allclose(N(c.logits), tc.logits.numpy(), rtol=1e-10)
    b, tb = D.Bernoulli(T(PROBS)), td.Bernoulli(torch.tensor(PROBS))
    np.testing.assert_allclose(N(b.logits), tb.logits.numpy(), rtol=1e-10)
    m = D.MultivariateNormal(T(MLOC), precision_matrix=T(COV))
    tm = td.MultivariateNormal(torch.tensor(MLOC), precision_matrix=torch.tensor(COV))
    for attr in ("scale_tril", "covariance_matrix", "precision_matrix"):
        np.testing.assert_allclose(N(getattr(m, attr)), getattr(tm, attr).numpy(), rtol=1e-8, atol=1e-10)
    n, tn = D.Normal(T(LOC), T(SCALE)), td.Normal(torch.tensor(LOC), torch.tensor(SCALE))
    np.testing.assert_allclose(N(n.cdf(T(VALUE))), tn.cdf(torch.tensor(VALUE)).numpy(), rtol=1e-10)


def _kl_cases(torch):
    td, tt = torch.distributions, torch.tensor
    p2 = np.clip(PROBS[::-1] * 0.9, 0.01, 0.99)
    return [
        (D.Normal(T(LOC), T(SCALE)), D.Normal(T(LOC[::-1]), T(SCALE[::-1]))),
        (td.Normal(tt(LOC), tt(SCALE)), td.Normal(tt(LOC[::-1].copy()), tt(SCALE[::-1].copy()))),
        (D.Categorical(logits=T(LOGITS)), D.Categorical(logits=T(LOGITS[::-1]))),
        (td.Categorical(logits=tt(LOGITS)), td.Categorical(logits=tt(LOGITS[::-1].copy()))),
        (D.Bernoulli(T(PROBS)), D.Bernoulli(T(p2))),
        (td.Bernoulli(tt(PROBS)), td.Bernoulli(tt(p2.copy()))),
        (D.Uniform(T(LOC), T(LOC + 1)), D.Uniform(T(LOC - 1), T(LOC + 2))),
        (td.Uniform(tt(LOC), tt(LOC + 1)), td.Uniform(tt(LOC - 1), tt(LOC + 2))),
        (
            D.MultivariateNormal(T(MLOC), T(COV)),
            D.MultivariateNormal(T(MLOC[0]), scale_tril=T(np.linalg.cholesky(COV2))),
        ),
        (
            td.MultivariateNormal(tt(MLOC), tt(COV)),
            td.MultivariateNormal(tt(MLOC[0]), scale_tril=tt(np.linalg.cholesky(COV2))),
        ),
        (D.Independent(D.Normal(T(LOC), T(SCALE)), 1), D.Independent(D.Normal(T(LOC * 0), T(SCALE * 0 + 1)), 1)),
        (
            td.Independent(td.Normal(tt(LOC), tt(SCALE)), 1),
            td.Independent(td.Normal(tt(LOC * 0), tt(SCALE * 0 + 1)), 1),
        ),
    ]


def test_kl_matches_torch(torch):
    cases = _kl_cases(torch)
    for (fp, fq), (tp, tq) in zip(cases[0::2], cases[1::2]):
        np.testing.assert_allclose(
            N(D.kl_divergence(fp, fq)), torch.distributions.kl_divergence(tp, tq).numpy(), rtol=1e-9
        )


def test_kl_infinite_where_torch_is(torch):
    td, tt = torch.distributions, torch.tensor
    lo, hi = np.array([0.0, 0.0]), np.array([1.0, 3.0])
    got = N(D.kl_divergence(D.Uniform(T(lo), T(hi)), D.Uniform(T(lo), T(np.array([2.0, 2.0])))))
    want = td.kl_divergence(td.Uniform(tt(lo), tt(hi)), td.Uniform(tt(lo), tt(np.array([2.0, 2.0])))).numpy()
    np.testing.assert_array_equal(got, want)
    p, q = np.array([[0.5, 0.5, 0.0]]), np.array([[0.5, 0.0, 0.5]])
    np.testing.assert_array_equal(
        N(D.kl_divergence(D.Categorical(T(p)), D.Categorical(T(q)))),
        td.kl_divergence(td.Categorical(tt(p)), td.Categorical(tt(q))).numpy(),
    )
    np.testing.assert_allclose(
        N(D.kl_divergence(D.Categorical(T(q)), D.Categorical(T(q)))),
        td.kl_divergence(td.Categorical(tt(q)), td.Categorical(tt(q))).numpy(),
        atol=1e-12,
    )


def test_register_kl_picks_most_specific_and_rejects_unknown():
    class MyNormal(D.Normal):
        pass

    @D.register_kl(MyNormal, D.Normal)
    def _kl(p, q):
        return flow.tensor(42.0)

    assert D.kl_divergence(MyNormal(0.0, 1.0), D.Normal(0.0, 1.0)).item() == 42.0
    assert D.kl_divergence(D.Normal(0.0, 1.0), MyNormal(0.0, 1.0)).item() == 0.0
    with pytest.raises(NotImplementedError, match="Normal.*Bernoulli"):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Bernoulli(0.5))
    with pytest.raises(TypeError, match="type_q"):
        D.register_kl(D.Normal, int)


def _seeded(fn):
    def run(*args):
        flow.manual_seed(3)
        return fn(*args)

    return run


def test_rsample_gradients_finite_differences():
    loc, scale = T(LOC, True), T(SCALE, True)
    assert gradcheck(_seeded(lambda m, s: D.Normal(m, s).rsample((3,))), [loc, scale])
    assert gradcheck(_seeded(lambda lo, w: D.Uniform(lo, lo + w).rsample((3,))), [loc, scale])
    tril = T(np.linalg.cholesky(COV2), True)
    assert gradcheck(_seeded(lambda m, L: D.MultivariateNormal(m, scale_tril=L.tril()).rsample((2,))), [loc, tril])
    cov = T(COV2, True)
    assert gradcheck(
        _seeded(lambda m, c: D.MultivariateNormal(m, covariance_matrix=(c + c.mT) / 2).rsample((2,))), [loc, cov]
    )
    # and through log_prob of the factorised covariance
    assert gradcheck(lambda c: D.MultivariateNormal(T(MLOC), (c + c.mT) / 2).log_prob(T(VALUE)), [cov])


def test_log_prob_gradients_match_torch(torch):
    td = torch.distributions
    c = T(COV2, True)
    tc = torch.tensor(COV2, requires_grad=True)
    D.MultivariateNormal(T(MLOC), c).log_prob(T(VALUE)).sum().backward()
    td.MultivariateNormal(torch.tensor(MLOC), tc).log_prob(torch.tensor(VALUE)).sum().backward()
    np.testing.assert_allclose(N(c.grad), tc.grad.numpy(), rtol=1e-8)
    lg, tlg = T(LOGITS, True), torch.tensor(LOGITS, requires_grad=True)
    D.Categorical(logits=lg).entropy().sum().backward()
    td.Categorical(logits=tlg).entropy().sum().backward()
    np.testing.assert_allclose(N(lg.grad), tlg.grad.numpy(), rtol=1e-9)


def test_sample_statistics():
    flow.manual_seed(0)
    n = 20000
    s = N(D.Normal(T([1.0, -2.0]), T([0.5, 2.0])).sample((n,)))
    np.testing.assert_allclose(s.mean(0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(s.std(0), [0.5, 2.0], rtol=0.03)
    u = N(D.Uniform(T([0.0]), T([4.0])).sample((n,)))
    assert u.min() >= 0 and u.max() < 4
    np.testing.assert_allclose(u.var(), 16 / 12, rtol=0.05)
    b = N(D.Bernoulli(T([0.2, 0.7])).sample((n,)))
    np.testing.assert_allclose(b.mean(0), [0.2, 0.7], atol=0.02)
    p = np.array([0.1, 0.6, 0.3])
    c = N(D.Categorical(T(p)).sample((n,)))
    np.testing.assert_allclose(np.bincount(c, minlength=3) / n, p, atol=0.02)
    m = N(D.MultivariateNormal(T(MLOC[0]), T(COV2)).sample((n,)))
    np.testing.assert_allclose(m.mean(0), MLOC[0], atol=0.1)
    np.testing.assert_allclose(np.cov(m.T), COV2, atol=0.15)


def test_seeded_reproducibility():
    def draw():
        flow.manual_seed(123)
        return [
            N(D.Normal(T(LOC), T(SCALE)).rsample((2,))),
            N(D.Categorical(logits=T(LOGITS)).sample((3,))),
            N(D.Bernoulli(T(PROBS)).sample()),
            N(D.MultivariateNormal(T(MLOC), T(COV)).sample()),
        ]

    for a, b in zip(draw(), draw()):
        np.testing.assert_array_equal(a, b)
    flow.manual_seed(124)
    assert not np.array_equal(N(D.Normal(T(LOC), T(SCALE)).rsample((2,))), draw()[0])


def test_validation_rejects_bad_parameters_and_values():
    with pytest.raises(ValueError, match="scale.*GreaterThan"):
        D.Normal(T([0.0]), T([-1.0]))
    with pytest.raises(ValueError, match="parameter low"):
        D.Uniform(1.0, 0.0)
    with pytest.raises(ValueError, match="probs"):
        D.Bernoulli(T([1.5]))
    with pytest.raises(ValueError, match="probs"):
        D.Categorical(T([[0.7, -0.3]]))
    with pytest.raises(ValueError, match="covariance_matrix.*PositiveDefinite"):
        D.MultivariateNormal(T([0.0, 0.0]), T([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="scale_tril.*LowerCholesky"):
        D.MultivariateNormal(T([0.0, 0.0]), scale_tril=T([[1.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="exactly one"):
        D.MultivariateNormal(T([0.0, 0.0]))
    with pytest.raises(ValueError, match="not both"):
        D.Bernoulli(probs=T([0.5]), logits=T([0.0]))
    with pytest.raises(ValueError, match="within the support"):
        D.Bernoulli(T([0.5])).log_prob(T([2.0]))
    with pytest.raises(ValueError, match="within the support"):
        D.Categorical(logits=T([0.0, 1.0])).log_prob(T(5))
    with pytest.raises(ValueError, match="must be a Tensor"):
        D.Normal(0.0, 1.0).log_prob(0.5)
    with pytest.raises(ValueError, match="reinterpreted_batch_ndims"):
        D.Independent(D.Normal(T(LOC), T(SCALE)), 3)
    # validation off: as torch, the bad parameter is accepted
    assert D.Normal(T([0.0]), T([-1.0]), validate_args=False).batch_shape == (1,)
    D.Distribution.set_default_validate_args(False)
    try:
        assert D.Uniform(1.0, 0.0).batch_shape == ()
    finally:
        D.Distribution.set_default_validate_args(True)


def test_sample_has_no_graph_rsample_has_one():
    loc = T(LOC, True)
    d = D.Normal(loc, T(SCALE))
    assert not d.sample().requires_grad
    assert d.rsample().requires_grad
    assert D.Normal.has_rsample and not D.Categorical.has_rsample
    assert D.Independent(d, 1).has_rsample


def test_mvn_log_prob_hessian_matches_torch(torch):
    # second derivatives through the Cholesky factorisation and the triangular solves
    from flow.autograd.functional import hessian

    def f(c):
        return D.MultivariateNormal(T(MLOC[0]), (c + c.mT) / 2).log_prob(T(VALUE[0, 0]))

    def tf(c):
        return torch.distributions.MultivariateNormal(torch.tensor(MLOC[0]), (c + c.mT) / 2).log_prob(
            torch.tensor(VALUE[0, 0])
        )

    np.testing.assert_allclose(
        N(hessian(f, T(COV2))), torch.autograd.functional.hessian(tf, torch.tensor(COV2)).numpy(), atol=1e-10
    )
