"""flow.func (grad, grad_and_value, vjp, jacrev, jacfwd, hessian, vmap, functional_call) against torch.func."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.func as ff
import flow.nn as nn
from flow.errors import AutogradError


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


RNG = np.random.default_rng(1)
X = RNG.normal(size=(3,))
Y = RNG.normal(size=(3,))
B = RNG.normal(size=(4, 3))
M = RNG.normal(size=(3, 2))


def N(t):
    return np.asarray(t.detach().numpy())


def close(a, b):
    if isinstance(b, (tuple, list)):
        assert len(a) == len(b)
        for p, q in zip(a, b):
            close(p, q)
    else:
        np.testing.assert_allclose(N(a), b.detach().numpy(), rtol=1e-10, atol=1e-12)


def f(x, y):
    return (x.sin() * y.exp()).sum()


def test_grad_and_argnums_match_torch(torch):
    fx, fy, tx, ty = flow.tensor(X), flow.tensor(Y), torch.tensor(X), torch.tensor(Y)
    close(ff.grad(f)(fx, fy), torch.func.grad(f)(tx, ty))
    close(ff.grad(f, argnums=(0, 1))(fx, fy), torch.func.grad(f, argnums=(0, 1))(tx, ty))
    close(ff.grad(f, argnums=-1)(fx, fy), torch.func.grad(f, argnums=-1)(tx, ty))
    g, v = ff.grad_and_value(f)(fx, fy)
    tg, tv = torch.func.grad_and_value(f)(tx, ty)
    close((g, v), (tg, tv))
    assert not g.requires_grad and not v.requires_grad


def test_has_aux(torch):
    def h(x):
        return (x**2).sum(), x.mean()

    fx, tx = flow.tensor(X), torch.tensor(X)
    g, aux = ff.grad(h, has_aux=True)(fx)
    tg, taux = torch.func.grad(h, has_aux=True)(tx)
    close((g, aux), (tg, taux))
    (g, (val, aux)) = ff.grad_and_value(h, has_aux=True)(fx)
    (tg, (tval, taux)) = torch.func.grad_and_value(h, has_aux=True)(tx)
    close((g, val, aux), (tg, tval, taux))
    with pytest.raises(AutogradError, match="has_aux"):
        ff.grad(lambda x: (x**2).sum(), has_aux=True)(fx)


def test_nested_grad_matches_torch(torch):
    fx, tx = flow.tensor(X), torch.tensor(X)
    inner = lambda x: (x.sin() ** 3).sum()  # noqa: E731
    close(
        ff.grad(lambda x: ff.grad(inner)(x).sum())(fx), torch.func.grad(lambda x: torch.func.grad(inner)(x).sum())(tx)
    )
    # a closure over the outer variable: the inner grad must keep its graph
    g = ff.grad(lambda x: ff.grad(lambda y: (x * y**2).sum())(flow.tensor(Y)).sum())(fx)
    tg = torch.func.grad(lambda x: torch.func.grad(lambda y: (x * y**2).sum())(torch.tensor(Y)).sum())(tx)
    close(g, tg)


def test_vjp_matches_torch(torch):
    fx, tx = flow.tensor(X), torch.tensor(X)
    fm, tm = flow.tensor(M), torch.tensor(M)
    out, fn = ff.vjp(lambda x, m: (x @ m).tanh(), fx, fm)
    tout, tfn = torch.func.vjp(lambda x, m: (x @ m).tanh(), tx, tm)
    close(out, tout)
    ct = RNG.normal(size=(2,))
    close(fn(flow.tensor(ct)), tfn(torch.tensor(ct)))
    close(fn(flow.tensor(ct)), tfn(torch.tensor(ct)))  # callable twice
    with pytest.raises(AutogradError, match="shape"):
        fn(flow.ones(3))


@pytest.mark.parametrize("which", ["jacrev", "jacfwd"])
def test_jacobians_match_torch(torch, which):
    fx, fy, tx, ty = flow.tensor(X), flow.tensor(Y), torch.tensor(X), torch.tensor(Y)

    def g(x, y):
        return x.sin() * y, (x * y).sum()

    close(getattr(ff, which)(g, argnums=(0, 1))(fx, fy), getattr(torch.func, which)(g, argnums=(0, 1))(tx, ty))
    close(getattr(ff, which)(g)(fx, fy), getattr(torch.func, which)(g)(tx, ty))


def test_hessian_matches_torch(torch):
    fx, fy, tx, ty = flow.tensor(X), flow.tensor(Y), torch.tensor(X), torch.tensor(Y)
    close(ff.hessian(f)(fx, fy), torch.func.hessian(f)(tx, ty))
    close(ff.hessian(f, argnums=(0, 1))(fx, fy), torch.func.hessian(f, argnums=(0, 1))(tx, ty))


def test_vmap_in_dims_out_dims_match_torch(torch):
    fb, fm, tb, tm = flow.tensor(B), flow.tensor(M), torch.tensor(B), torch.tensor(M)
    g = lambda x, m: (x @ m).relu()  # noqa: E731
    close(ff.vmap(g, in_dims=(0, None))(fb, fm), torch.func.vmap(g, in_dims=(0, None))(tb, tm))
    close(ff.vmap(g, in_dims=(1, None))(fb.T, fm), torch.func.vmap(g, in_dims=(1, None))(tb.T, tm))
    close(ff.vmap(g, in_dims=(0, None), out_dims=1)(fb, fm), torch.func.vmap(g, in_dims=(0, None), out_dims=1)(tb, tm))
    two = lambda x: (x.sum(), x * 2)  # noqa: E731
    close(ff.vmap(two, out_dims=(0, 1))(fb), torch.func.vmap(two, out_dims=(0, 1))(tb))
    # per-example gradients: vmap over grad
    pe = ff.vmap(ff.grad(lambda w, x: (x @ w).tanh().sum()), in_dims=(None, 0))(fm, fb)
    tpe = torch.func.vmap(torch.func.grad(lambda w, x: (x @ w).tanh().sum()), in_dims=(None, 0))(tm, tb)
    close(pe, tpe)


def test_vmap_is_differentiable():
    b = flow.tensor(B, requires_grad=True)
    ff.vmap(lambda x: (x**2).sum())(b).sum().backward()
    np.testing.assert_allclose(N(b.grad), 2 * B)


def test_vmap_randomness_modes():
    flow.manual_seed(0)
    x = flow.zeros(5, 3)
    with pytest.raises(AutogradError, match="randomness"):
        ff.vmap(lambda r: r + flow.randn(3))(x)
    same = N(ff.vmap(lambda r: r + flow.randn(3), randomness="same")(x))
    assert np.all(same == same[0]) and not np.all(same == 0)
    diff = N(ff.vmap(lambda r: r + flow.randn(3), randomness="different")(x))
    assert not np.allclose(diff[0], diff[1])
    with pytest.raises(ValueError, match="randomness"):
        ff.vmap(lambda r: r, randomness="sometimes")


def test_vmap_bad_dims():
    with pytest.raises(ValueError, match="different sizes"):
        ff.vmap(lambda a, b: a + b)(flow.ones(3, 2), flow.ones(4, 2))
    with pytest.raises(ValueError, match="out of range"):
        ff.vmap(lambda a: a, in_dims=2)(flow.ones(3, 2))
    with pytest.raises(ValueError, match="every in_dim is None"):
        ff.vmap(lambda a: a, in_dims=None)(flow.ones(3))
    with pytest.raises(ValueError, match="in_dims has 1 entries"):
        ff.vmap(lambda a, b: a, in_dims=(0,))(flow.ones(3), flow.ones(3))


def test_functional_call_matches_torch_and_restores(torch):
    flow.manual_seed(0)
    m = nn.Linear(3, 2)
    tm = torch.nn.Linear(3, 2)
    w, b = RNG.normal(size=(2, 3)), RNG.normal(size=(2,))
    params = {"weight": flow.tensor(w, requires_grad=True), "bias": flow.tensor(b)}
    out = ff.functional_call(m, params, (flow.tensor(B),))
    tout = torch.func.functional_call(tm, {"weight": torch.tensor(w), "bias": torch.tensor(b)}, (torch.tensor(B),))
    close(out, tout)
    assert m.weight.shape == (2, 3) and m.weight is not params["weight"]
    out.sum().backward()
    np.testing.assert_allclose(N(params["weight"].grad), B.sum(0)[None, :].repeat(2, 0))
    assert m.weight.grad is None
    # the gradient of a loss with respect to a substituted parameter, through grad
    gw = ff.grad(lambda w_: ff.functional_call(m, {"weight": w_, "bias": flow.tensor(b)}, flow.tensor(B)).pow(2).sum())(
        flow.tensor(w)
    )
    tgw = torch.func.grad(
        lambda w_: torch.func.functional_call(tm, {"weight": w_, "bias": torch.tensor(b)}, torch.tensor(B)).pow(2).sum()
    )(torch.tensor(w))
    close(gw, tgw)
    with pytest.raises(ValueError, match="unexpected key"):
        ff.functional_call(m, {"nope": flow.ones(1)}, flow.tensor(B))
    with pytest.raises(ValueError, match="missing key"):
        ff.functional_call(m, {"weight": flow.tensor(w)}, flow.tensor(B), strict=True)


def test_functional_call_ties_shared_weights():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2, bias=False)
            self.b = nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    m = Tied()
    x = flow.ones(1, 2)
    out = ff.functional_call(m, {"a.weight": flow.eye(2) * 2}, (x,))
    np.testing.assert_allclose(N(out), [[4.0, 4.0]])
    out = ff.functional_call(m, {"a.weight": flow.eye(2) * 2}, (x,), tie_weights=False)
    assert not np.allclose(N(out), [[4.0, 4.0]])


def test_grad_errors():
    with pytest.raises(AutogradError, match="one-element"):
        ff.grad(lambda x: x * 2)(flow.tensor(X))
    with pytest.raises(ValueError, match="argnums=2"):
        ff.grad(f, argnums=2)(flow.tensor(X), flow.tensor(Y))
    with pytest.raises(TypeError, match="floating-point"):
        ff.grad(lambda x: x.sum())(flow.tensor([1, 2]))
