"""sum's eager fast paths: the NumPy kernel calls ``np.add.reduce`` itself for float32/float64
inputs, and the gradient of a sum over leading dims is one ``expand`` (no ``reshape``).

Values, dtypes, shapes and gradients are compared with PyTorch where it is importable, and with
NumPy's ``np.sum`` always (the reference the fast path replaces).
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import OpTypeError

CASES = [
    # (shape, dim, keepdim)
    ((), None, False),
    ((), None, True),
    ((5,), None, False),
    ((5,), 0, True),
    ((3, 4), None, False),
    ((3, 4), 0, False),
    ((3, 4), 1, False),
    ((3, 4), -1, True),
    ((2, 3, 4), (0, 1), False),
    ((2, 3, 4), (1, 0), False),  # leading dims named out of order
    ((2, 3, 4), (0, 2), False),
    ((2, 3, 4), (1, 2), True),
    ((0, 3), None, False),
    ((0, 3), 0, False),
    ((0, 3), 1, False),
]


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "bool"])
@pytest.mark.parametrize("shape,dim,keepdim", CASES)
def test_sum_matches_numpy_sum(dtype, shape, dim, keepdim):
    rng = np.random.default_rng(0)
    a = np.asarray((rng.standard_normal(shape) * 3).astype(dtype) if dtype != "bool" else rng.random(shape) > 0.5)
    out = flow.from_numpy(a).sum(dim=dim, keepdim=keepdim)
    ax = None if dim is None or not shape else tuple(d % len(shape) for d in np.atleast_1d(dim))
    if a.dtype.kind in "biu":
        ref = np.sum(a, axis=ax, keepdims=keepdim, dtype=np.int64)
    elif a.dtype.itemsize < 4:
        ref = np.sum(a.astype(np.float32), axis=ax, keepdims=keepdim).astype(a.dtype)
    else:
        ref = np.sum(a, axis=ax, keepdims=keepdim)
    got = out.numpy()
    assert got.dtype == np.asarray(ref).dtype
    assert got.shape == np.shape(ref)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
@pytest.mark.parametrize("shape,dim,keepdim", CASES)
def test_sum_matches_torch(dtype, shape, dim, keepdim):
    torch = _torch()
    rng = np.random.default_rng(1)
    a = np.asarray((rng.standard_normal(shape) * 3).astype(dtype) if dtype != "bool" else rng.random(shape) > 0.5)
    f = flow.from_numpy(a).sum(dim=dim, keepdim=keepdim)
    t = torch.from_numpy(a).sum(dim=dim, keepdim=keepdim) if dim is not None else torch.from_numpy(a).sum()
    if dim is None and keepdim:
        t = t.reshape((1,) * len(shape))
    assert str(f.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    assert tuple(f.shape) == tuple(t.shape)
    np.testing.assert_allclose(f.numpy(), t.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,dim,keepdim", CASES)
def test_sum_gradient_matches_torch(shape, dim, keepdim):
    torch = _torch()
    rng = np.random.default_rng(2)
    a = np.asarray(rng.standard_normal(shape))
    fx = flow.tensor(a, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    fy = fx.sum(dim=dim, keepdim=keepdim)
    ty = tx.sum(dim=dim, keepdim=keepdim) if dim is not None else tx.sum()
    g = rng.standard_normal(tuple(fy.shape))
    fy.backward(flow.tensor(g))
    ty.backward(torch.tensor(g).reshape(ty.shape))
    assert tuple(fx.grad.shape) == tuple(tx.grad.shape) == shape
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=0, atol=0)


def test_the_gradient_of_a_whole_sum_is_a_writable_grad_that_accumulates():
    x = flow.randn(3, 4, requires_grad=True)
    x.sum().backward()
    x.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), 2.0, np.float32))
    x.grad.zero_()  # the engine copied the broadcast gradient: the .grad owns writable memory
    assert float(x.grad.sum()) == 0.0


def test_the_gradient_of_a_sum_over_leading_dims_is_differentiable():
    torch = _torch()
    a = np.random.default_rng(3).standard_normal((2, 3, 4))
    fx = flow.tensor(a, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    for x, lib in ((fx, flow), (tx, torch)):
        y = (x * x).sum(dim=(0, 1))
        (g,) = lib.autograd.grad(y.sum() * 1.0, x, create_graph=True)
        (g * g).sum().backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_sum_grad_is_one_expand_for_leading_dims():
    x = flow.randn(2, 3, requires_grad=True)
    y = x.sum()
    g = flow.tensor(5.0, requires_grad=True)  # so that the gradient's own history is recorded
    (gx,) = flow.autograd.grad(y, x, g, create_graph=True)
    assert gx.grad_fn is not None and gx.grad_fn.name() == "expandBackward"
    assert [n.name() for n, _ in gx.grad_fn.next_functions if n is not None] == []  # straight from the seed
    x2 = flow.randn(2, 3, requires_grad=True)
    (gx2,) = flow.autograd.grad(x2.sum(1), x2, flow.ones(2, requires_grad=True), create_graph=True)
    assert gx2.grad_fn.name() == "expandBackward"
    assert [n.name() for n, _ in gx2.grad_fn.next_functions if n is not None] == ["reshapeBackward"]


def test_sum_of_a_non_tensor_names_the_argument():
    with pytest.raises(OpTypeError, match="'input' must be a Tensor, got list"):
        flow.sum([1.0, 2.0])
