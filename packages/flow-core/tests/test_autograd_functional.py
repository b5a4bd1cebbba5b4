"""flow.autograd.functional (jacobian, hessian, vjp, jvp, hvp, vhp) against torch.autograd.functional."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.autograd import functional as AF
from flow.errors import AutogradError


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 3))
Y = RNG.normal(size=(2, 3))
V1 = RNG.normal(size=(2, 3))
V2 = RNG.normal(size=(2, 3))
W = RNG.normal(size=(2,))


def N(t):
    return np.asarray(t.detach().numpy())


def _both(torch):
    return (flow.tensor(X), flow.tensor(Y)), (torch.tensor(X), torch.tensor(Y))


def two_out(x, y):
    return (x.sin() * y).sum(-1), x * y.exp()


def one_out(x, y):
    return (x.tanh() * y**2).sum(-1)


def scalar(x, y):
    return (x.sin() * y * x).sum() + (y**3).sum()


def _close(a, b):
    if isinstance(b, tuple):
        assert isinstance(a, tuple) and len(a) == len(b)
        for p, q in zip(a, b):
            _close(p, q)
    else:
        np.testing.assert_allclose(N(a), b.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fn", [two_out, one_out])
def test_jacobian_tuple_structures_match_torch(torch, fn):
    (fx, fy), (tx, ty) = _both(torch)
    _close(AF.jacobian(fn, (fx, fy)), torch.autograd.functional.jacobian(fn, (tx, ty)))
    _close(AF.jacobian(lambda x: fn(x, fy), fx), torch.autograd.functional.jacobian(lambda x: fn(x, ty), tx))


def test_hessian_matches_torch(torch):
    (fx, fy), (tx, ty) = _both(torch)
    _close(AF.hessian(scalar, (fx, fy)), torch.autograd.functional.hessian(scalar, (tx, ty)))
    f1 = lambda x: (x**3 * x.exp()).sum()  # noqa: E731
    _close(AF.hessian(f1, fx), torch.autograd.functional.hessian(f1, tx))


@pytest.mark.parametrize("name", ["vjp", "jvp", "vhp", "hvp"])
def test_products_match_torch(torch, name):
    (fx, fy), (tx, ty) = _both(torch)
    f = getattr(AF, name)
    tf = getattr(torch.autograd.functional, name)
    if name == "vjp":
        fv, tv = (flow.tensor(W), flow.tensor(V1)), (torch.tensor(W), torch.tensor(V1))
        fn = two_out
    elif name == "jvp":
        fv, tv = (flow.tensor(V1), flow.tensor(V2)), (torch.tensor(V1), torch.tensor(V2))
        fn = two_out
    else:
        fv, tv = (flow.tensor(V1), flow.tensor(V2)), (torch.tensor(V1), torch.tensor(V2))
        fn = scalar
    out, res = f(fn, (fx, fy), fv)
    tout, tres = tf(fn, (tx, ty), tv)
    _close(out, tout)
    _close(res, tres)


def test_single_tensor_and_implicit_v(torch):
    f = lambda x: (x**2).sum()  # noqa: E731
    out, g = AF.vjp(f, flow.tensor(X))
    _, tg = torch.autograd.functional.vjp(f, torch.tensor(X))
    _close(g, tg)
    assert isinstance(g, flow.Tensor)
    _, j = AF.jvp(lambda x: x * 3, flow.tensor([2.0]))
    assert j.tolist() == [3.0]


def test_create_graph_allows_differentiating_the_result(torch):
    x = flow.tensor(X, requires_grad=True)
    tx = torch.tensor(X, requires_grad=True)
    f = lambda x: (x.sin() ** 2).sum()  # noqa: E731
    _, h = AF.vhp(f, x, flow.ones_like(x), create_graph=True)
    _, th = torch.autograd.functional.vhp(f, tx, torch.ones_like(tx), create_graph=True)
    assert h.requires_grad
    h.sum().backward()
    th.sum().backward()
    np.testing.assert_allclose(N(x.grad), tx.grad.numpy(), rtol=1e-10)
    j = AF.jacobian(lambda x: x.exp(), x)
    assert not j.requires_grad  # without create_graph the result is detached


def test_strict_and_non_strict_independent_input(torch):
    fx, fy = flow.tensor(X), flow.tensor(Y)
    jac = AF.jacobian(lambda x, y: x * 2, (fx, fy))
    np.testing.assert_array_equal(N(jac[1]), np.zeros((2, 3, 2, 3)))
    with pytest.raises(AutogradError, match="independent of input 1"):
        AF.jacobian(lambda x, y: x * 2, (fx, fy), strict=True)
    with pytest.raises(AutogradError, match="does not require gradients"):
        AF.vjp(lambda x: flow.ones(3), fx, flow.ones(3), strict=True)
    _, g = AF.vjp(lambda x: flow.ones(3), fx, flow.ones(3))
    np.testing.assert_array_equal(N(g), np.zeros((2, 3)))


def test_bad_arguments_raise_clear_errors():
    fx = flow.tensor(X)
    with pytest.raises(TypeError, match="must be a Tensor"):
        AF.jacobian(lambda x: x, [1.0, 2.0])
    with pytest.raises(TypeError, match="outputs of the user-provided function"):
        AF.jacobian(lambda x: 3.0, fx)
    with pytest.raises(AutogradError, match="can only be None"):
        AF.vjp(lambda x: x * 2, fx)
    with pytest.raises(AutogradError, match="mismatch in shape"):
        AF.vjp(lambda x: x * 2, fx, flow.ones(3))
    with pytest.raises(AutogradError, match="single element"):
        AF.hessian(lambda x: x * 2, fx)
    with pytest.raises(AutogradError, match="vectorize=True"):
        AF.jacobian(lambda x: x, fx, vectorize=True)
    with pytest.raises(AutogradError, match="reverse-mode"):
        AF.jacobian(lambda x: x, fx, strategy="forward-mode")


def test_inputs_are_not_modified_and_grads_not_accumulated():
    x = flow.tensor(X, requires_grad=True)
    AF.jacobian(lambda x: x.sin(), x)
    AF.hessian(lambda x: (x**3).sum(), x)
    assert x.grad is None
