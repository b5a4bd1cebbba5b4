"""Matrix products (flow.ops.linalg): einsum and the products built on matmul.

References: NumPy always, PyTorch (values and gradients) where importable, opcheck for every op.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import OpError, OpTypeError
from flow.testing import gradcheck, opcheck

OPS = ["einsum", "matmul"]


def rand(shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def T(a, requires_grad=False, dtype=None):
    t = flow.tensor(np.asarray(a), dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t


def N(t):
    return np.asarray(t.detach().numpy())


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def check_vs_torch(torch, f_flow, f_torch, *arrays, grad=True, seed=7, rtol=1e-10):
    """Same values and (float64) gradients from flow and PyTorch for inputs built from ``arrays``."""
    fa = [T(a, requires_grad=grad and np.asarray(a).dtype.kind == "f") for a in arrays]
    ta = [torch.tensor(np.asarray(a), requires_grad=grad and np.asarray(a).dtype.kind == "f") for a in arrays]
    fo, to = f_flow(*fa), f_torch(*ta)
    assert tuple(fo.shape) == tuple(to.shape)
    assert fo.dtype.name == str(to.dtype).replace("torch.", "")
    np.testing.assert_allclose(N(fo), to.detach().numpy(), rtol=rtol, atol=1e-12)
    if not grad:
        return
    w = np.random.default_rng(seed).standard_normal(tuple(to.shape))
    (fo * flow.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    for x, y in zip(fa, ta):
        if y.requires_grad:
            gy = y.grad.numpy() if y.grad is not None else np.zeros(y.shape)
            gx = N(x.grad) if x.grad is not None else np.zeros(tuple(x.shape))
            np.testing.assert_allclose(gx, gy, rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    assert opcheck(name)["samples"] > 0


# ---------------------------------------------------------------------------------------------
# einsum
EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ba,cb", [(2, 3), (4, 2)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iji->j", [(3, 2, 3)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bjk->bik", [(1, 3, 4), (5, 4, 2)]),
    ("ij,jk->ik", [(2, 1), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 4)]),
    ("...ij,...jk", [(2, 1, 2, 3), (5, 3, 4)]),
    ("i...->...", [(3, 4, 5)]),
    ("...i,...i->...", [(2, 3, 4), (3, 4)]),
    ("b...,b->...", [(3, 2, 2), (3,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ab,cd->abcd", [(2, 3), (2, 2)]),
    ("ijk,k->", [(2, 3, 4), (4,)]),
    ("Ab,bC->AC", [(2, 3), (3, 2)]),
    (" i j , j k -> i k ", [(2, 3), (3, 2)]),
    ("ijj,k->ik", [(2, 3, 3), (2,)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e[0].replace(" ", "_") for e in EINSUM])
def test_einsum_vs_torch(torch, eq, shapes):
    arrays = [rand(s, seed=i) for i, s in enumerate(shapes)]
    check_vs_torch(torch, lambda *xs: flow.einsum(eq, *xs), lambda *xs: torch.einsum(eq, *xs), *arrays)


@pytest.mark.parametrize("eq,shapes", EINSUM[:12], ids=[e[0] for e in EINSUM[:12]])
def test_einsum_vs_numpy(eq, shapes):
    arrays = [rand(s, seed=i) for i, s in enumerate(shapes)]
    np.testing.assert_allclose(N(flow.einsum(eq, *[T(a) for a in arrays])), np.einsum(eq, *arrays), rtol=1e-12)


def test_einsum_list_form_promotion_and_copies():
    a, b = rand((2, 3), 1), rand((3,), 2)
    np.testing.assert_allclose(N(flow.einsum("ij,j->i", [T(a), T(b)])), a @ b)
    out = flow.einsum("ij,j->i", T(a, dtype=flow.float32), T(np.arange(3)))
    assert out.dtype is flow.float32
    assert flow.einsum("ij,j", T(np.ones((2, 3), dtype=np.int64)), T(np.arange(3))).tolist() == [3, 3]
    x = T(a)
    y = flow.einsum("ij->ji", x)  # never a view of the input
    y[...] = 0.0
    np.testing.assert_array_equal(N(x), a)


def test_einsum_second_order():
    a, b = T(rand((2, 3), 1), requires_grad=True), T(rand((3, 3), 2), requires_grad=True)
    assert gradcheck(lambda x, y: flow.einsum("ij,jk,ik->i", x, y, x), [a, b])

    def first(x, y):
        with flow.enable_grad():
            x2 = x if x.requires_grad else x.detach().requires_grad_(True)
            y2 = y if y.requires_grad else y.detach().requires_grad_(True)
            out = flow.einsum("ij,jj,ik->k", x2, y2, x2)
            gx, gy = flow.autograd.grad((out * out).sum(), [x2, y2], create_graph=True)
        return gx, gy

    assert gradcheck(first, [a, b])


def test_einsum_errors():
    a, b = T(rand((2, 3))), T(rand((4, 5)))
    with pytest.raises(OpError, match=r"subscript 'j' has size 3 \(operand 0, dim 1\) but 4 \(operand 1, dim 0\)"):
        flow.einsum("ij,jk->ik", a, b)
    with pytest.raises(OpError, match="names 2 operands, got 1 tensors"):
        flow.einsum("ij,jk", a)
    with pytest.raises(OpError, match="operand 0 has 2 dims but its subscripts 'ijk' name 3"):
        flow.einsum("ijk->i", a)
    with pytest.raises(OpError, match="output subscript 'z' does not appear"):
        flow.einsum("ij->z", a)
    with pytest.raises(OpError, match="repeat a letter"):
        flow.einsum("ij->ii", a)
    with pytest.raises(OpError, match="invalid characters"):
        flow.einsum("i1->i", a)
    with pytest.raises(OpError, match="dot must be part of"):
        flow.einsum("i.j->i", a)
    with pytest.raises(OpTypeError, match="operand 1 must be a Tensor"):
        flow.einsum("ij,jk", a, np.ones((3, 2)))
    with pytest.raises(OpTypeError, match=r"\(not bool\)"):
        flow.einsum("i->", T(np.array([True])))
    with pytest.raises(OpError, match=r"subscript 'i' has size 2 \(operand 0, dim 0\) but 3 \(operand 0, dim 1\)"):
        flow.einsum("ii->i", T(rand((2, 3))))
    with pytest.raises(OpError, match="repeats subscript 'i' over dims of different sizes"):
        flow.einsum("ii->i", T(rand((1, 3))))


# ---------------------------------------------------------------------------------------------
# products built on matmul
PRODUCTS = [
    ("dot", lambda a, b: flow.dot(a, b), lambda a, b: a.dot(b), [(4,), (4,)]),
    ("vdot", lambda a, b: a.vdot(b), lambda a, b: a.vdot(b), [(4,), (4,)]),
    ("outer", lambda a, b: flow.outer(a, b), lambda a, b: a.outer(b), [(3,), (4,)]),
    ("ger", lambda a, b: a.ger(b), lambda a, b: a.outer(b), [(3,), (4,)]),
    ("inner", lambda a, b: flow.inner(a, b), lambda a, b: a.inner(b), [(2, 3, 4), (5, 4)]),
    ("inner_1d", lambda a, b: a.inner(b), lambda a, b: a.inner(b), [(4,), (4,)]),
    ("inner_0d", lambda a, b: flow.inner(a, b), lambda a, b: a.inner(b), [(), (2, 3)]),
    ("tensordot2", lambda a, b: flow.tensordot(a, b), None, [(2, 3, 4), (3, 4, 5)]),
    ("tensordot_list", lambda a, b: flow.tensordot(a, b, ([0, 2], [2, 1])), None, [(2, 3, 4), (5, 4, 2)]),
    ("tensordot0", lambda a, b: flow.tensordot(a, b, 0), None, [(2, 3), (4,)]),
    ("mv", lambda a, b: flow.mv(a, b), lambda a, b: a.mv(b), [(3, 4), (4,)]),
    ("mm", lambda a, b: a.mm(b), lambda a, b: a.mm(b), [(3, 4), (4, 2)]),
    ("bmm", lambda a, b: flow.bmm(a, b), lambda a, b: a.bmm(b), [(2, 3, 4), (2, 4, 2)]),
]


def _torch_fn(torch, name):
    return {
        "tensordot2": lambda a, b: torch.tensordot(a, b),
        "tensordot_list": lambda a, b: torch.tensordot(a, b, ([0, 2], [2, 1])),
        "tensordot0": lambda a, b: torch.tensordot(a, b, 0),
    }[name]


@pytest.mark.parametrize("name,ff,tf,shapes", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_products_vs_torch(torch, name, ff, tf, shapes):
    if tf is None:
        tf = _torch_fn(torch, name)
    arrays = [rand(s, seed=i) for i, s in enumerate(shapes)]
    check_vs_torch(torch, ff, tf, *arrays)


ADDS = [
    (
        "addmm",
        lambda i, a, b: flow.addmm(i, a, b),
        lambda i, a, b: torch_mod().addmm(i, a, b),
        [(3, 2), (3, 4), (4, 2)],
    ),
    (
        "addmm_scaled",
        lambda i, a, b: i.addmm(a, b, beta=0.5, alpha=-2.0),
        lambda i, a, b: i.addmm(a, b, beta=0.5, alpha=-2.0),
        [(2,), (3, 4), (4, 2)],
    ),
    (
        "addmm_beta0",
        lambda i, a, b: flow.addmm(i, a, b, beta=0),
        lambda i, a, b: torch_mod().addmm(i, a, b, beta=0),
        [(1, 2), (3, 4), (4, 2)],
    ),
    (
        "addmv",
        lambda i, a, b: flow.addmv(i, a, b, alpha=3.0),
        lambda i, a, b: torch_mod().addmv(i, a, b, alpha=3.0),
        [(3,), (3, 4), (4,)],
    ),
    ("addr", lambda i, a, b: i.addr(a, b, beta=2.0), lambda i, a, b: i.addr(a, b, beta=2.0), [(3, 4), (3,), (4,)]),
    (
        "baddbmm",
        lambda i, a, b: flow.baddbmm(i, a, b, beta=0.5),
        lambda i, a, b: torch_mod().baddbmm(i, a, b, beta=0.5),
        [(2, 3, 2), (2, 3, 4), (2, 4, 2)],
    ),
    ("addbmm", lambda i, a, b: i.addbmm(a, b), lambda i, a, b: i.addbmm(a, b), [(3, 2), (2, 3, 4), (2, 4, 2)]),
]


def torch_mod():
    import torch

    return torch


@pytest.mark.parametrize("name,ff,tf,shapes", ADDS, ids=[p[0] for p in ADDS])
def test_scaled_adds_vs_torch(torch, name, ff, tf, shapes):
    arrays = [rand(s, seed=i) for i, s in enumerate(shapes)]
    check_vs_torch(torch, ff, tf, *arrays)


def test_products_vs_numpy():
    a, b, c = rand(4, 1), rand(4, 2), rand((3, 4), 3)
    np.testing.assert_allclose(N(flow.dot(T(a), T(b))), a @ b, rtol=1e-12)
    np.testing.assert_allclose(N(flow.outer(T(a), T(b))), np.outer(a, b), rtol=1e-12)
    np.testing.assert_allclose(N(flow.inner(T(c), T(c))), np.inner(c, c), rtol=1e-12)
    np.testing.assert_allclose(N(flow.tensordot(T(c), T(c.T), 1)), np.tensordot(c, c.T, 1), rtol=1e-12)
    np.testing.assert_allclose(N(flow.mv(T(c), T(a))), c @ a, rtol=1e-12)
    beta_zero = flow.addmm(T(np.full((3, 3), np.nan)), T(c), T(c.T), beta=0)
    assert not np.isnan(N(beta_zero)).any()  # beta=0 ignores the input, NaNs included


def test_addmm_inplace():
    x = T(rand((3, 2)))
    before = N(x).copy()
    a, b = rand((3, 4), 1), rand((4, 2), 2)
    x.addmm_(T(a), T(b), alpha=2.0)
    np.testing.assert_allclose(N(x), before + 2 * a @ b, rtol=1e-12)
    assert x._version[0] == 1
    y = T(rand((2, 3, 2)))
    y.baddbmm_(T(rand((2, 3, 4))), T(rand((2, 4, 2))), beta=0)
    assert y._version[0] == 1


def test_product_errors():
    with pytest.raises(OpError, match=r"'input' must be 1-d, got shape \(2, 2\)"):
        flow.dot(T(rand((2, 2))), T(rand(2)))
    with pytest.raises(OpTypeError, match="same dtype"):
        flow.dot(T(rand(2)), T(rand(2), dtype=flow.float32))
    with pytest.raises(OpError, match="inconsistent sizes"):
        flow.dot(T(rand(2)), T(rand(3)))
    with pytest.raises(OpError, match="'vec2' must be 1-d"):
        flow.outer(T(rand(2)), T(rand((2, 2))))
    with pytest.raises(OpError, match="last dims must match"):
        flow.inner(T(rand((2, 3))), T(rand((2, 2))))
    with pytest.raises(OpError, match="contracted dims differ in size"):
        flow.tensordot(T(rand((2, 3))), T(rand((2, 3))), 1)
    with pytest.raises(OpError, match="same length"):
        flow.tensordot(T(rand((2, 3))), T(rand((2, 3))), ([0], [0, 1]))
    with pytest.raises(OpError, match=r"'input' of shape \(4,\) cannot be broadcast to the product's shape \(3, 2\)"):
        flow.addmm(T(rand(4)), T(rand((3, 4))), T(rand((4, 2))))
    with pytest.raises(OpError, match="'vec' must be 1-d"):
        flow.mv(T(rand((3, 4))), T(rand((4, 1))))
