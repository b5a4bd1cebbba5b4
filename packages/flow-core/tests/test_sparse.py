"""Sparse COO tensors (flow.sparse) against torch.sparse: construction, coalesce, conversions, sparse.mm
and its gradients, sparse.sum, errors, and a 2-layer GCN trained step for step."""

import numpy as np
import pytest

import flow
from flow.errors import OpError, OpIndexError, OpTypeError

torch = pytest.importorskip("torch")

IDX = [[0, 1, 1, 0, 2], [2, 0, 2, 2, 1]]  # (0, 2) twice: coalesce must sum it
VAL = [3.0, 4.0, 5.0, 1.0, -2.0]


def _pair(dtype=np.float64, requires_grad=False):
    f = flow.sparse_coo_tensor(IDX, flow.tensor(np.array(VAL, dtype=dtype)), (3, 4), requires_grad=requires_grad)
    t = torch.sparse_coo_tensor(torch.tensor(IDX), torch.tensor(np.array(VAL, dtype=dtype)), (3, 4))
    if requires_grad:
        t.requires_grad_()
    return f, t


def test_construction_matches_torch():
    f, t = _pair()
    assert f.is_sparse and not flow.zeros(2).is_sparse
    assert tuple(f.shape) == tuple(t.shape) == (3, 4)
    assert f.dtype == flow.float64
    assert f._nnz() == t._nnz() == 5
    assert f.sparse_dim() == t.sparse_dim() == 2 and f.dense_dim() == t.dense_dim() == 0
    assert f.is_coalesced() == t.is_coalesced() is False
    np.testing.assert_array_equal(f._indices().numpy(), t._indices().numpy())
    np.testing.assert_array_equal(f._values().numpy(), t._values().numpy())
    np.testing.assert_array_equal(f.to_dense().numpy(), t.to_dense().numpy())


def test_size_inferred_and_dtype():
    f = flow.sparse_coo_tensor(IDX, VAL, dtype=flow.float64)
    t = torch.sparse_coo_tensor(torch.tensor(IDX), torch.tensor(VAL, dtype=torch.float64))
    assert tuple(f.shape) == tuple(t.shape) == (3, 3)
    assert f.dtype == flow.float64


def test_coalesce_sums_duplicates():
    f, t = _pair()
    fc, tc = f.coalesce(), t.coalesce()
    assert fc.is_coalesced() and fc._nnz() == tc._nnz() == 4
    np.testing.assert_array_equal(fc.indices().numpy(), tc.indices().numpy())
    np.testing.assert_array_equal(fc.values().numpy(), tc.values().numpy())
    assert fc.coalesce() is fc


def test_values_of_uncoalesced_raises():
    f, _ = _pair()
    with pytest.raises(OpError, match="coalesce"):
        f.values()
    with pytest.raises(OpError, match="coalesce"):
        f.indices()


def test_to_sparse_to_dense_round_trip():
    x = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    fs, ts = flow.tensor(x).to_sparse(), torch.tensor(x).to_sparse()
    assert fs.is_coalesced() and ts.is_coalesced()
    np.testing.assert_array_equal(fs.indices().numpy(), ts.indices().numpy())
    np.testing.assert_array_equal(fs.values().numpy(), ts.values().numpy())
    np.testing.assert_array_equal(fs.to_dense().numpy(), x)
    f, t = _pair()
    back = f.to_dense().to_sparse()
    np.testing.assert_array_equal(back.indices().numpy(), t.to_dense().to_sparse().indices().numpy())
    np.testing.assert_array_equal(back.to_dense().numpy(), t.to_dense().numpy())


def test_to_sparse_and_to_dense_are_differentiable():
    x = np.array([[0.0, 1.5], [2.0, 0.0]])
    fx = flow.tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    (fx.to_sparse().to_dense() * flow.tensor(w)).sum().backward()
    (tx.to_sparse().to_dense() * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(fx.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("form", ["sparse.mm", "mm", "matmul", "@"])
def test_mm_values_and_grads(form):
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((4, 3))
    f, t = _pair(requires_grad=True)
    f, t = f.coalesce(), t.coalesce()  # a coalesced sparse operand: torch's gradient has its pattern
    fd, td = flow.tensor(dense, requires_grad=True), torch.tensor(dense, requires_grad=True)
    fo = {"sparse.mm": flow.sparse.mm, "mm": flow.mm, "matmul": flow.matmul, "@": lambda a, b: a @ b}[form](f, fd)
    to = torch.sparse.mm(t, td)
    np.testing.assert_allclose(fo.detach().numpy(), to.detach().numpy(), rtol=1e-12)
    g = rng.standard_normal((3, 3))
    fo.backward(flow.tensor(g))
    to.backward(torch.tensor(g))
    np.testing.assert_allclose(fd.grad.numpy(), td.grad.numpy(), rtol=1e-12)
    assert f.grad is None  # coalesce's result is no leaf: the gradient went on to the leaf's values
    # the leaf (uncoalesced): its gradient is reported on the coalesced pattern, as torch does
    fl, tl = _pair(requires_grad=True)
    fo = flow.sparse.mm(fl, fd)
    to = torch.sparse.mm(tl, td)
    fo.backward(flow.tensor(g))
    to.backward(torch.tensor(g))
    assert fl.grad.is_sparse and tl.grad.is_sparse
    np.testing.assert_array_equal(fl.grad.indices().numpy(), tl.grad.coalesce().indices().numpy())
    np.testing.assert_allclose(fl.grad.to_dense().numpy(), tl.grad.to_dense().numpy(), rtol=1e-12)


def test_mm_vector_and_dense_left():
    f, t = _pair()
    v = np.arange(4.0)
    np.testing.assert_allclose((f @ flow.tensor(v)).numpy(), (t @ torch.tensor(v)).numpy())
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose((flow.tensor(m) @ f).numpy(), (torch.tensor(m) @ t).numpy())


def test_values_gradient_flows_to_source_tensor():
    v = flow.tensor(np.array(VAL), requires_grad=True)
    tv = torch.tensor(VAL, dtype=torch.float64, requires_grad=True)
    s = flow.sparse_coo_tensor(IDX, v, (3, 4))
    ts = torch.sparse_coo_tensor(torch.tensor(IDX), tv, (3, 4))
    flow.sparse.mm(s, flow.ones(4, 2, dtype=flow.float64)).pow(2).sum().backward()
    torch.sparse.mm(ts, torch.ones(4, 2, dtype=torch.float64)).pow(2).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-12)


def test_sparse_sum():
    f, t = _pair()
    assert float(flow.sparse.sum(f)) == float(torch.sparse.sum(t))
    for dim in (0, 1, -1, (0, 1)):
        fr, tr = flow.sparse.sum(f, dim), torch.sparse.sum(t, dim)
        assert fr.is_sparse == tr.is_sparse
        fd = fr.to_dense() if fr.is_sparse else fr
        td = tr.to_dense() if tr.is_sparse else tr
        np.testing.assert_allclose(fd.numpy(), td.numpy())
    with pytest.raises(OpIndexError, match="dim 2"):
        flow.sparse.sum(f, 2)


def test_methods_sum_scale_and_cast_like_torch():
    f, t = _pair(dtype=np.float32)
    assert float(f.sum()) == float(t.sum())
    for fr, tr in ((f * 2.5, t * 2.5), (3 * f, 3 * t), (f * flow.tensor(2.0), t * torch.tensor(2.0))):
        assert fr.is_sparse and tr.is_sparse
        np.testing.assert_allclose(fr.to_dense().numpy(), tr.to_dense().numpy())
    d = f.double()
    assert d.is_sparse and d.dtype == flow.float64
    np.testing.assert_array_equal(d.to_dense().numpy(), t.double().to_dense().numpy())
    with pytest.raises(OpError, match="mul"):
        f * flow.ones(4)


def test_bad_construction_raises():
    with pytest.raises(OpIndexError, match="inconsistent"):
        flow.sparse_coo_tensor(IDX, VAL, (2, 4))
    with pytest.raises(OpError, match="entries"):
        flow.sparse_coo_tensor(IDX, VAL[:3], (3, 4))
    with pytest.raises(OpError, match="hybrid"):
        flow.sparse_coo_tensor(IDX, flow.ones(5, 2), (3, 4))
    with pytest.raises(OpTypeError, match="integer"):
        flow.sparse_coo_tensor([[0.5, 1.0]], [1.0, 2.0], (3,))
    with pytest.raises(OpIndexError, match="non-negative"):
        flow.sparse_coo_tensor([[-1, 1]], [1.0, 2.0], (3,))
    with pytest.raises(OpError, match="hybrid"):
        flow.zeros(2, 2).to_sparse(1)


def test_unsupported_ops_name_the_op_and_suggest_to_dense():
    f, _ = _pair()
    with pytest.raises(OpError, match=r"relu.*to_dense"):
        flow.relu(f)
    with pytest.raises(OpError, match=r"add.*to_dense"):
        f + 1
    with pytest.raises(OpError, match="sparse @ sparse"):
        f @ f.t()
    with pytest.raises(OpTypeError, match="dtype"):
        flow.sparse.mm(f, flow.ones(4, 2))  # float64 sparse, float32 dense
    with pytest.raises(OpError, match="cannot be multiplied"):
        flow.sparse.mm(f, flow.ones(3, 2, dtype=flow.float64))


def _graph(n: int, rng) -> tuple:
    """The symmetric-normalised adjacency D^-1/2 (A + I) D^-1/2 of a random graph, as COO parts."""
    a = (rng.random((n, n)) < 0.3).astype(np.float64)
    a = np.maximum(a, a.T)
    np.fill_diagonal(a, 1.0)
    dinv = 1.0 / np.sqrt(a.sum(1))
    norm = a * dinv[:, None] * dinv[None, :]
    idx = np.stack(np.nonzero(norm))
    return idx, norm[tuple(idx)]


def test_gcn_two_layers_trains_like_torch():
    rng = np.random.default_rng(1)
    n, fin, hid, ncls = 12, 5, 8, 3
    idx, val = _graph(n, rng)
    x = rng.standard_normal((n, fin))
    y = rng.integers(0, ncls, n)
    fa = flow.sparse_coo_tensor(idx, flow.tensor(val), (n, n))
    ta = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(val), (n, n))

    def gcn(nn, mm):
        class GCN(nn.Module):
            def __init__(self):
                super().__init__()
                self.l1 = nn.Linear(fin, hid, dtype=float64[nn])
                self.l2 = nn.Linear(hid, ncls, dtype=float64[nn])

            def forward(self, a, h):
                return mm(a, self.l2(mm(a, self.l1(h)).relu()))

        return GCN()

    float64 = {flow.nn: flow.float64, torch.nn: torch.float64}
    fm, tm = gcn(flow.nn, flow.sparse.mm), gcn(torch.nn, torch.sparse.mm)
    with torch.no_grad():
        for (_, fp), (_, tp) in zip(fm.named_parameters(), tm.named_parameters()):
            tp.copy_(torch.tensor(fp.detach().numpy()))
    fo = flow.optim.SGD(fm.parameters(), lr=0.5)
    to = torch.optim.SGD(tm.parameters(), lr=0.5)
    fx, tx = flow.tensor(x), torch.tensor(x)
    fy, ty = flow.tensor(y), torch.tensor(y)
    losses = []
    for _ in range(5):
        fo.zero_grad()
        to.zero_grad()
        fl = flow.nn.functional.cross_entropy(fm(fa, fx), fy)
        tl = torch.nn.functional.cross_entropy(tm(ta, tx), ty)
        fl.backward()
        tl.backward()
        fo.step()
        to.step()
        losses.append((float(fl), float(tl)))
    f_losses, t_losses = zip(*losses)
    np.testing.assert_allclose(f_losses, t_losses, rtol=1e-10)
    assert f_losses[-1] < f_losses[0]
