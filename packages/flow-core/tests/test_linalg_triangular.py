"""flow.linalg.solve_triangular against torch.linalg.solve_triangular: values, gradients (which read one
triangle only), broadcasting, left/unitriangular, graph mode and input errors; and MultivariateNormal
running on it under graph mode."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import flow
from flow.errors import OpError, OpTypeError
from flow.testing import gradcheck

RNG = np.random.default_rng(3)


def _tri(shape, upper: bool) -> np.ndarray:
    # well conditioned: a dominant diagonal, and the other triangle filled with junk that must be ignored
    a = RNG.normal(size=shape)
    n = shape[-1]
    return a + 4.0 * np.eye(n) * np.sign(RNG.normal(size=shape[:-2] + (n, 1)) + 0.1)


CASES = [
    ((3, 3), (3, 2)),
    ((2, 4, 4), (2, 4, 3)),
    ((4, 4), (5, 2, 4, 1)),  # A broadcast over B's batch
    ((2, 1, 3, 3), (4, 3, 2)),  # both broadcast
    ((3, 3), (0, 3, 2)),  # empty batch
]


@pytest.mark.parametrize(
    "shapes,upper,left,unit",
    [(c, u, le, un) for c in CASES for u, le, un in itertools.product([False, True], repeat=3)],
)
def test_matches_torch_values_and_grads(shapes, upper, left, unit):
    torch = pytest.importorskip("torch")
    sa, sb = shapes
    if not left:  # X A = B: B has the columns
        sb = sb[:-2] + (sb[-1], sb[-2])
    a, b = _tri(sa, upper), RNG.normal(size=sb)
    A, B = flow.tensor(a, requires_grad=True), flow.tensor(b, requires_grad=True)
    tA, tB = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    X = flow.linalg.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit)
    tX = torch.linalg.solve_triangular(tA, tB, upper=upper, left=left, unitriangular=unit)
    np.testing.assert_allclose(X.detach().numpy(), tX.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = RNG.normal(size=tuple(tX.shape))
    (X * flow.tensor(g)).sum().backward()
    (tX * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(A.grad.numpy(), tA.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(B.grad.numpy(), tB.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_only_the_named_triangle_is_read():
    a = _tri((4, 4), False)
    b = RNG.normal(size=(4, 2))
    lower = flow.linalg.solve_triangular(flow.tensor(a), flow.tensor(b), upper=False).numpy()
    np.testing.assert_allclose(np.tril(a) @ lower, b, atol=1e-12)
    upper = flow.linalg.solve_triangular(flow.tensor(a), flow.tensor(b), upper=True).numpy()
    np.testing.assert_allclose(np.triu(a) @ upper, b, atol=1e-12)
    unit = flow.linalg.solve_triangular(flow.tensor(a), flow.tensor(b), upper=False, unitriangular=True).numpy()
    np.testing.assert_allclose((np.tril(a, -1) + np.eye(4)) @ unit, b, atol=1e-12)


def test_double_gradient():
    a = flow.tensor(_tri((3, 3), True), requires_grad=True)
    b = flow.tensor(RNG.normal(size=(3, 2)), requires_grad=True)
    assert gradcheck(lambda A, B: flow.linalg.solve_triangular(A, B, upper=True), (a, b))
    (ga,) = flow.autograd.grad(flow.linalg.solve_triangular(a, b, upper=True).sum(), (a,), create_graph=True)
    (gb,) = flow.autograd.grad((ga**2).sum(), (b,))
    assert tuple(gb.shape) == (3, 2) and bool(flow.isfinite(gb).all())
    assert np.abs(np.tril(ga.detach().numpy(), -1)).max() == 0.0  # the gradient stays in the upper triangle


def test_float32():
    torch = pytest.importorskip("torch")
    a, b = _tri((3, 3), False).astype(np.float32), RNG.normal(size=(3, 3)).astype(np.float32)
    X = flow.linalg.solve_triangular(flow.tensor(a), flow.tensor(b), upper=False)
    assert X.dtype == flow.float32
    ref = torch.linalg.solve_triangular(torch.tensor(a), torch.tensor(b), upper=False).numpy()
    np.testing.assert_allclose(X.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_a_b_of_shape_a_without_last_dim_is_still_a_matrix():
    # linalg.solve would take B (n, n) against A (n, n, n) as a batch of vectors; solve_triangular never does
    a, b = _tri((3, 3, 3), False), RNG.normal(size=(3, 3))
    X = flow.linalg.solve_triangular(flow.tensor(a), flow.tensor(b), upper=False).numpy()
    np.testing.assert_allclose(np.tril(a) @ X, np.broadcast_to(b, (3, 3, 3)), atol=1e-12)


def test_graph_mode():
    a, b = flow.tensor(_tri((2, 3, 3), False)), flow.tensor(RNG.normal(size=(2, 3, 2)))
    fn = flow.compile(lambda A, B: flow.linalg.solve_triangular(A, B, upper=False))
    eager = flow.linalg.solve_triangular(a, b, upper=False)
    np.testing.assert_allclose(fn(a, b).numpy(), eager.numpy(), rtol=1e-12)


def test_multivariate_normal_under_graph_mode():
    import flow.distributions as D

    m = RNG.normal(size=(3, 3))
    cov = flow.tensor(m @ m.T + np.eye(3))
    loc, value = flow.tensor(RNG.normal(size=3)), flow.tensor(RNG.normal(size=(4, 3)))

    def log_prob(loc, cov, value):
        # validate_args=False: checking the arguments reads their values, which a traced graph has not
        return D.MultivariateNormal(loc, covariance_matrix=cov, validate_args=False).log_prob(value)

    np.testing.assert_allclose(
        flow.compile(log_prob)(loc, cov, value).numpy(), log_prob(loc, cov, value).numpy(), rtol=1e-12
    )


def test_errors():
    A, B = flow.tensor(_tri((3, 3), False)), flow.tensor(RNG.normal(size=(3, 2)))
    st = flow.linalg.solve_triangular
    with pytest.raises(OpTypeError, match="'A' must be a Tensor, got list"):
        st([[1.0]], B, upper=False)
    with pytest.raises(OpError, match="'B' must have at least 2 dimensions, got shape \\(3,\\)"):
        st(A, flow.ones(3, dtype=flow.float64), upper=False)
    with pytest.raises(OpError, match="'A' must be a batch of square matrices, got shape \\(3, 2\\)"):
        st(B, B, upper=False)
    with pytest.raises(OpError, match="'B' of shape \\(2, 3\\) must have 3 rows"):
        st(A, B.mT, upper=False)
    with pytest.raises(OpError, match="must have 3 columns"):
        st(A, B, upper=False, left=False)
    with pytest.raises(OpTypeError, match="same dtype, got flow.float64 and flow.float32"):
        st(A, B.float(), upper=False)
    with pytest.raises(OpTypeError, match="'upper' must be a bool, got NoneType"):
        st(A, B, upper=None)
    with pytest.raises(TypeError):
        st(A, B)  # upper is a required keyword, as in PyTorch
