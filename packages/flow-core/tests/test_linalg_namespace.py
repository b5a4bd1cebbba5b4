"""flow.linalg and the top-level linear-algebra names against torch: values and gradients, float32 and
float64, batched; and the errors on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
import flow.linalg as L
from flow.errors import OpError, OpTypeError

torch = pytest.importorskip("torch")

DTYPES = [("float32", 1e-4), ("float64", 1e-9)]


def _rand(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape)


def _wellcond(shape, seed=0):
    return _rand(shape, seed) + shape[-1] * np.eye(shape[-1])


def _spd(shape, seed=0):
    a = _rand(shape, seed)
    return a @ np.swapaxes(a, -1, -2) + np.diag(np.arange(1.0, shape[-1] + 1.0))


def _outputs(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def compare(ff, tf, arrays, dtype, tol, square=()):
    """Run ``ff`` on flow tensors and ``tf`` on torch tensors made from ``arrays``; compare every output and
    the gradients of a weighted sum of them. Outputs listed in ``square`` enter squared (their sign is
    convention: singular vectors, eigenvectors)."""
    fx = [flow.tensor(a, dtype=getattr(flow, dtype), requires_grad=True) for a in arrays]
    tx = [torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=True) for a in arrays]
    fo, to = _outputs(ff(*fx)), _outputs(tf(*tx))
    assert len(fo) == len(to)
    floss, tloss = 0.0, 0.0
    rng = np.random.default_rng(7)
    for i, (f, t) in enumerate(zip(fo, to)):
        assert tuple(f.shape) == tuple(t.shape), (i, f.shape, t.shape)
        fv, tv = f.detach().numpy(), t.detach().numpy()
        if i in square:
            fv, tv = fv**2, tv**2
        np.testing.assert_allclose(fv, tv, rtol=tol * 10, atol=tol * 10, err_msg=f"output {i}")
        if not t.dtype.is_floating_point or t.numel() == 0:
            continue
        w = rng.uniform(0.5, 1.5, size=tuple(t.shape))
        fw, tw = flow.tensor(w, dtype=f.dtype), torch.tensor(w, dtype=t.dtype)
        floss = floss + ((f * f if i in square else f) * fw).sum()
        tloss = tloss + ((t * t if i in square else t) * tw).sum()
    floss.backward()
    tloss.backward()
    for i, (a, b) in enumerate(zip(fx, tx)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=tol * 100, atol=tol * 100, err_msg=f"grad {i}")


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_inv_det_slogdet_match_torch(dtype, tol, shape):
    a = _wellcond(shape, 1)
    compare(L.inv, torch.linalg.inv, [a], dtype, tol)
    compare(L.det, torch.linalg.det, [a], dtype, tol)
    compare(L.slogdet, torch.linalg.slogdet, [a], dtype, tol)
    compare(flow.inverse, torch.inverse, [a], dtype, tol)
    compare(flow.logdet, torch.logdet, [a], dtype, tol)
    compare(lambda x: x.det(), lambda x: x.det(), [-a], dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_solve_matches_torch_with_vectors_broadcasting_and_left(dtype, tol):
    a = _wellcond((2, 3, 3), 2)
    compare(L.solve, torch.linalg.solve, [a, _rand((2, 3, 2), 3)], dtype, tol)
    compare(L.solve, torch.linalg.solve, [a, _rand((2, 3), 4)], dtype, tol)  # a batch of vectors
    compare(L.solve, torch.linalg.solve, [a[0], _rand((4, 3, 1), 5)], dtype, tol)  # A broadcast over B's batch
    compare(
        lambda x, y: L.solve(x, y, left=False), lambda x, y: torch.linalg.solve(x, y, left=False),
        [a, _rand((2, 4, 3), 6)], dtype, tol,
    )  # fmt: skip


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_torch(dtype, tol, upper):
    a = _spd((2, 4, 4), 3)
    compare(lambda x: L.cholesky(x, upper=upper), lambda x: torch.linalg.cholesky(x, upper=upper), [a], dtype, tol)
    compare(lambda x: flow.cholesky(x, upper), lambda x: torch.cholesky(x, upper), [a], dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("shape,mode", [((5, 3), "reduced"), ((2, 3, 3), "complete"), ((3, 5), "reduced")])
def test_qr_matches_torch(dtype, tol, shape, mode):
    a = _rand(shape, 4)
    compare(lambda x: L.qr(x, mode), lambda x: torch.linalg.qr(x, mode), [a], dtype, tol, square=(0, 1))
    q, r = L.qr(flow.tensor(a), mode)
    np.testing.assert_allclose((q @ r).numpy(), a, atol=1e-12)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_eigh_eigvalsh_match_torch(dtype, tol):
    a = _spd((2, 4, 4), 5)
    compare(L.eigh, torch.linalg.eigh, [a], dtype, tol, square=(1,))
    compare(L.eigvalsh, torch.linalg.eigvalsh, [a], dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (3, 3)])
def test_svd_svdvals_match_torch(dtype, tol, shape):
    a = _rand(shape, 6)
    sq = (0, 2)
    compare(lambda x: L.svd(x, False), lambda x: torch.linalg.svd(x, False), [a], dtype, tol, square=sq)
    compare(L.svdvals, torch.linalg.svdvals, [a], dtype, tol)
    compare(lambda x: flow.svd(x), lambda x: torch.svd(x), [a], dtype, tol, square=sq)
    compare(lambda x: x.svd(some=True), lambda x: x.svd(some=True), [a], dtype, tol, square=sq)


def test_svd_full_matrices_and_legacy_compute_uv_shapes():
    a = flow.tensor(_rand((2, 4, 3), 7))
    u, s, vh = L.svd(a)
    assert tuple(u.shape) == (2, 4, 4) and tuple(vh.shape) == (2, 3, 3)
    u, s, v = flow.svd(a, some=False, compute_uv=False)
    assert tuple(u.shape) == (2, 4, 4) and tuple(v.shape) == (2, 3, 3) and not u.numpy().any()
    np.testing.assert_allclose(s.numpy(), torch.linalg.svdvals(torch.tensor(a.numpy())).numpy(), atol=1e-12)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_pinv_lstsq_matrix_rank_match_torch(dtype, tol):
    a = _rand((2, 5, 3), 8)
    compare(L.pinv, torch.linalg.pinv, [a], dtype, tol)
    compare(flow.pinverse, torch.pinverse, [a[0]], dtype, tol)
    # through (X + X^T) / 2: PyTorch's gradient for hermitian=True is that of the general pinv, flow's the symmetric one
    compare(
        lambda x: L.pinv((x + x.mT) / 2, hermitian=True),
        lambda x: torch.linalg.pinv((x + x.mT) / 2, hermitian=True), [_spd((3, 3))], dtype, tol,
    )  # fmt: skip
    b = _rand((2, 5, 2), 9)
    compare(lambda x, y: L.lstsq(x, y).solution, lambda x, y: torch.linalg.lstsq(x, y).solution, [a, b], dtype, tol)
    r = L.lstsq(flow.tensor(a), flow.tensor(b))
    t = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b))
    assert r.rank.tolist() == t.rank.tolist() and tuple(r.residuals.shape) == tuple(t.residuals.shape)
    low = np.ones((4, 3)) + np.outer(np.arange(4.0), [1.0, 0.0, 0.0])  # rank 2
    for m, h in ((low, False), (_rand((3, 6, 4), 1), False), (_spd((4, 4)), True)):
        assert (
            L.matrix_rank(flow.tensor(m), hermitian=h).tolist()
            == torch.linalg.matrix_rank(torch.tensor(m), hermitian=h).tolist()
        )
    assert L.matrix_rank(flow.tensor(low), atol=10.0).tolist() == 0
    sing = flow.tensor(low)
    np.testing.assert_allclose(L.pinv(sing).numpy(), torch.linalg.pinv(torch.tensor(low)).numpy(), atol=1e-10)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("ord", ["fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2])
def test_matrix_norm_matches_torch(dtype, tol, ord):
    a = _rand((2, 3, 4), 10)
    compare(lambda x: L.matrix_norm(x, ord), lambda x: torch.linalg.matrix_norm(x, ord), [a], dtype, tol)
    compare(
        lambda x: L.matrix_norm(x, ord, dim=(0, 2), keepdim=True),
        lambda x: torch.linalg.matrix_norm(x, ord, dim=(0, 2), keepdim=True), [a], dtype, tol,
    )  # fmt: skip
    compare(lambda x: L.norm(x, ord), lambda x: torch.linalg.norm(x, ord), [a[0]], dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("ord", [2, 1, 3.5, math.inf, -math.inf])
def test_vector_norm_and_norm_match_torch(dtype, tol, ord):
    a = _rand((3, 4), 11)
    compare(lambda x: L.vector_norm(x, ord), lambda x: torch.linalg.vector_norm(x, ord), [a], dtype, tol)
    compare(lambda x: L.vector_norm(x, ord, dim=1, keepdim=True),
            lambda x: torch.linalg.vector_norm(x, ord, dim=1, keepdim=True), [a], dtype, tol)  # fmt: skip
    compare(lambda x: L.norm(x, ord, dim=0), lambda x: torch.linalg.norm(x, ord, dim=0), [a], dtype, tol)
    compare(L.norm, torch.linalg.norm, [a], dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_cross_multi_dot_matrix_power_match_torch(dtype, tol):
    compare(L.cross, torch.linalg.cross, [_rand((4, 3), 1), _rand((1, 3), 2)], dtype, tol)
    compare(lambda x, y: L.cross(x, y, dim=0), lambda x, y: torch.linalg.cross(x, y, dim=0),
            [_rand((3, 2), 3), _rand((3, 2), 4)], dtype, tol)  # fmt: skip
    compare(lambda *t: L.multi_dot(t), lambda *t: torch.linalg.multi_dot(t),
            [_rand((4,), 1), _rand((4, 3), 2), _rand((3, 5), 3), _rand((5,), 4)], dtype, tol)  # fmt: skip
    compare(lambda *t: L.multi_dot(t), lambda *t: torch.linalg.multi_dot(t),
            [_rand((2, 4), 1), _rand((4, 3), 2)], dtype, tol)  # fmt: skip
    a = _wellcond((2, 3, 3), 5) / 3.0
    for n in (0, 1, 2, 5, -1, -3):
        compare(lambda x, n=n: L.matrix_power(x, n), lambda x, n=n: torch.linalg.matrix_power(x, n), [a], dtype, tol)
    compare(lambda x: x.matrix_power(3), lambda x: x.matrix_power(3), [a], dtype, tol)


@pytest.mark.filterwarnings("ignore:torch.qr is deprecated", "ignore:torch.cholesky is deprecated")
def test_tensor_methods_match_torch():
    a = _wellcond((3, 3), 12)
    fa, ta = flow.tensor(a), torch.tensor(a)
    np.testing.assert_allclose(fa.inverse().numpy(), ta.inverse().numpy(), atol=1e-12)
    np.testing.assert_allclose(fa.slogdet()[1].numpy(), ta.slogdet()[1].numpy(), atol=1e-12)
    np.testing.assert_allclose(fa.pinverse().numpy(), ta.pinverse().numpy(), atol=1e-12)
    np.testing.assert_allclose(fa.logdet().numpy(), ta.logdet().numpy(), atol=1e-12)
    s = _spd((3, 3))
    np.testing.assert_allclose(flow.tensor(s).cholesky().numpy(), torch.tensor(s).cholesky().numpy(), atol=1e-12)
    q, r = fa.qr()
    np.testing.assert_allclose(np.abs(r.numpy()), np.abs(ta.qr()[1].numpy()), atol=1e-12)
    np.testing.assert_allclose(fa.norm(2, 1, True).numpy(), ta.norm(2, 1, True).numpy(), atol=1e-12)


def test_logdet_of_negative_and_zero_determinants():
    assert math.isnan(flow.logdet(flow.tensor(-np.eye(3))).item())
    assert flow.logdet(flow.zeros(2, 2, dtype=flow.float64)).item() == -math.inf


# -- errors ---------------------------------------------------------------------------------------------
def test_non_square_and_wrong_rank_raise():
    for fn in (L.inv, L.det, L.slogdet, L.cholesky, L.eigh, L.eigvalsh, flow.inverse, flow.logdet):
        with pytest.raises(OpError, match="square matrices"):
            fn(flow.ones(3, 4, dtype=flow.float64))
        with pytest.raises(OpError, match="at least 2 dimensions"):
            fn(flow.ones(3, dtype=flow.float64))
    for fn in (L.svd, L.svdvals, L.qr, L.pinv, L.matrix_rank, flow.svd):
        with pytest.raises(OpError, match="at least 2 dimensions"):
            fn(flow.ones(3, dtype=flow.float64))
    with pytest.raises(OpError, match="at least 2 dimensions"):
        L.matrix_norm(flow.ones(3))
    with pytest.raises(OpError, match="must be \\(..., 3, k\\)"):
        L.solve(flow.eye(3, dtype=flow.float64), flow.ones(4, 2, dtype=flow.float64))


def test_singular_matrices_raise_like_torch():
    sing = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(torch.tensor(sing))
    with pytest.raises(OpError, match="linalg_inv.*singular"):
        L.inv(flow.tensor(sing))
    with pytest.raises(OpError, match="singular"):
        L.solve(flow.tensor(sing), flow.ones(2, dtype=flow.float64))
    with pytest.raises(OpError, match="not positive-definite"):
        L.cholesky(flow.tensor(-np.eye(2)))


def test_dtype_and_argument_errors():
    with pytest.raises(OpTypeError, match="float32 or float64"):
        L.inv(flow.eye(2, dtype=flow.int64))
    with pytest.raises(OpTypeError, match="float32 or float64"):
        L.det(flow.eye(2, dtype=flow.float16))
    with pytest.raises(OpTypeError, match="must be a Tensor"):
        L.det([[1.0, 0.0], [0.0, 1.0]])
    x = flow.ones(3, 3, dtype=flow.float64)
    with pytest.raises(OpError, match="'ord' must be one of"):
        L.matrix_norm(x, 3)
    with pytest.raises(OpError, match="'mode' must be one of"):
        L.qr(x, "full")
    with pytest.raises(OpError, match="'UPLO'"):
        L.eigh(x, "X")
    with pytest.raises(OpError, match="size 3"):
        L.cross(flow.ones(4), flow.ones(4))
    with pytest.raises(OpError, match="same number of dims"):
        L.cross(flow.ones(2, 3), flow.ones(3))
    with pytest.raises(OpError, match="must be 2-d"):
        L.multi_dot([flow.ones(3), flow.ones(3), flow.ones(3)])
    with pytest.raises(OpTypeError, match="'n' must be an int"):
        L.matrix_power(x, 1.5)
    with pytest.raises(OpError, match="driver"):
        L.lstsq(x, x, driver="gelsd")


def test_qr_mode_r_has_no_gradient_and_complete_tall_is_not_differentiable():
    x = flow.tensor(_rand((4, 3)), requires_grad=True)
    _, r = L.qr(x, "r")
    with pytest.raises(OpError, match="mode='r'"):
        r.sum().backward()
    q, r = L.qr(x, "complete")
    with pytest.raises(OpError, match="mode='complete'"):
        (q.sum() + r.sum()).backward()
