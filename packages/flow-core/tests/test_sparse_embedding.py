"""Sparse embedding gradients: hybrid COO tensors, Embedding / EmbeddingBag(sparse=True), the optimizers
that take sparse gradients (SGD, Adagrad, SparseAdam) and clip_grad_norm_, compared with PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import OpError
from flow.optim.errors import OptimizerError

torch = pytest.importorskip("torch")

V, D = 12, 4


def _coalesced(g):
    c = g.coalesce()
    return np.asarray(c.indices().numpy()), np.asarray(c.values().detach().numpy())


def _tcoalesced(g):
    c = g.coalesce()
    return c.indices().numpy(), c.values().numpy()


def _assert_same_grad(fg, tg):
    assert fg.is_sparse and tg.is_sparse
    assert fg.sparse_dim() == tg.sparse_dim() == 1 and fg.dense_dim() == tg.dense_dim() == 1
    fi, fv = _coalesced(fg)
    ti, tv = _tcoalesced(tg)
    np.testing.assert_array_equal(fi, ti)
    np.testing.assert_allclose(fv, tv, rtol=0, atol=1e-12)


# -- hybrid COO tensors --------------------------------------------------------------------------------------
def test_hybrid_construction_coalesce_to_dense():
    idx = [[3, 0, 3, 1]]
    vals = np.arange(12.0).reshape(4, 3)
    s = flow.sparse_coo_tensor(idx, flow.tensor(vals), (5, 3))
    t = torch.sparse_coo_tensor(idx, torch.tensor(vals), (5, 3), check_invariants=True)
    assert (s.sparse_dim(), s.dense_dim(), s._nnz(), tuple(s.shape)) == (1, 1, 4, (5, 3))
    assert not s.is_coalesced()
    c = s.coalesce()
    assert c.is_coalesced() and c._nnz() == 3
    np.testing.assert_array_equal(c.indices().numpy(), t.coalesce().indices().numpy())
    np.testing.assert_array_equal(c.values().numpy(), t.coalesce().values().numpy())
    np.testing.assert_array_equal(s.to_dense().numpy(), t.to_dense().numpy())
    # default size: one past the largest index, then the dense dims
    assert tuple(flow.sparse_coo_tensor(idx, flow.tensor(vals)).shape) == (4, 3)


def test_hybrid_bad_input():
    vals = flow.ones(2, 3)
    with pytest.raises(OpError, match="does not fit indices with sparse_dim 1"):
        flow.sparse_coo_tensor([[0, 1]], vals, (4, 2))
    with pytest.raises(OpError, match="does not fit"):
        flow.sparse_coo_tensor([[0, 1]], vals, (4,))
    with pytest.raises(OpError, match="at least 1-d"):
        flow.sparse_coo_tensor(np.zeros((1, 0), np.int64), flow.tensor(1.0), (4,))
    s = flow.sparse_coo_tensor([[0, 1]], vals, (4, 3))
    with pytest.raises(OpError, match="two sparse dims"):
        s @ flow.ones(3, 2)
    with pytest.raises(OpError, match="hybrid"):
        flow.sparse.sum(s, 0)


def test_sparse_plus_sparse_and_dense():
    a = flow.sparse_coo_tensor([[0, 2]], flow.tensor([[1.0, 2.0], [3.0, 4.0]]), (4, 2))
    b = flow.sparse_coo_tensor([[2, 3, 0]], flow.tensor([[1.0, 1.0], [5.0, 6.0], [7.0, 8.0]]), (4, 2))
    ta = torch.sparse_coo_tensor([[0, 2]], torch.tensor([[1.0, 2.0], [3.0, 4.0]]), (4, 2))
    tb = torch.sparse_coo_tensor([[2, 3, 0]], torch.tensor([[1.0, 1.0], [5.0, 6.0], [7.0, 8.0]]), (4, 2))
    s = a + b
    assert s.is_sparse and s._nnz() == 5
    np.testing.assert_array_equal(s.coalesce().values().numpy(), (ta + tb).coalesce().values().numpy())
    dense = flow.ones(4, 2)
    for r in (dense + a, a + dense):
        assert not r.is_sparse
        np.testing.assert_array_equal(r.numpy(), (torch.ones(4, 2) + ta).numpy())
    with pytest.raises(OpError, match="cannot be added"):
        a + flow.sparse_coo_tensor([[0]], flow.ones(1, 2), (5, 2))


# -- gradients ----------------------------------------------------------------------------------------------
def _tables(seed=0, **kw):
    w = np.random.default_rng(seed).standard_normal((V, D))
    fe = flow.nn.Embedding(V, D, sparse=True, _weight=flow.tensor(w), **kw)
    te = torch.nn.Embedding(V, D, sparse=True, _weight=torch.tensor(w), **kw)
    return fe, te


def test_embedding_grad_duplicates_padding_and_accumulation():
    fe, te = _tables(padding_idx=1)
    idx = [[0, 2, 2], [1, 5, 0]]
    up = np.random.default_rng(1).standard_normal((2, 3, D))
    (fe(flow.tensor(idx)) * flow.tensor(up)).sum().backward()
    (te(torch.tensor(idx)) * torch.tensor(up)).sum().backward()
    fg = fe.weight.grad
    assert not fg.is_coalesced() and fg._nnz() == te.weight.grad._nnz() == 5  # padding entries left out
    _assert_same_grad(fg, te.weight.grad)
    # a second lookup accumulates: sparse + sparse stays sparse
    fe(flow.tensor([3, 2])).sum().backward()
    te(torch.tensor([3, 2])).sum().backward()
    _assert_same_grad(fe.weight.grad, te.weight.grad)
    # two lookups of one table in one backward also add up sparse
    fe.weight.grad = None
    te.weight.grad = None
    (fe(flow.tensor([4, 4])).sum() * 2 + fe(flow.tensor([7])).sum()).backward()
    (te(torch.tensor([4, 4])).sum() * 2 + te(torch.tensor([7])).sum()).backward()
    _assert_same_grad(fe.weight.grad, te.weight.grad)


def test_sparse_grad_plus_dense_grad_becomes_dense():
    fe, te = _tables()
    (fe(flow.tensor([1, 3])).sum() + (fe.weight * 2).sum()).backward()
    (te(torch.tensor([1, 3])).sum() + (te.weight * 2).sum()).backward()
    assert not fe.weight.grad.is_sparse
    np.testing.assert_allclose(fe.weight.grad.numpy(), te.weight.grad.to_dense().numpy(), atol=1e-12)


def test_functional_embedding_and_max_norm():
    w = np.random.default_rng(2).standard_normal((V, D)) * 3
    fw = flow.tensor(w, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    idx = [0, 0, 5, 9]
    flow.nn.functional.embedding(flow.tensor(idx), fw, max_norm=1.0, sparse=True).sum().backward()
    torch.nn.functional.embedding(torch.tensor(idx), tw, max_norm=1.0, sparse=True).sum().backward()
    _assert_same_grad(fw.grad, tw.grad)
    np.testing.assert_allclose(fw.detach().numpy(), tw.detach().numpy(), atol=1e-12)  # rows renormalised
    with pytest.raises(OpError, match="scale_grad_by_freq is not supported with sparse"):
        flow.nn.functional.embedding(flow.tensor(idx), fw, scale_grad_by_freq=True, sparse=True)


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_grad(mode, padding_idx):
    w = np.random.default_rng(3).standard_normal((V, D))
    kw = dict(mode=mode, sparse=True, padding_idx=padding_idx)
    fb = flow.nn.EmbeddingBag(V, D, _weight=flow.tensor(w), **kw)
    tb = torch.nn.EmbeddingBag(V, D, _weight=torch.tensor(w), **kw)
    idx, offs = [0, 2, 2, 3, 1, 7, 2, 7], [0, 2, 2, 5]
    up = np.random.default_rng(4).standard_normal((4, D))
    psw = np.random.default_rng(5).uniform(0.5, 1.5, 8) if mode == "sum" else None
    fargs = (flow.tensor(idx), flow.tensor(offs)) + ((flow.tensor(psw),) if psw is not None else ())
    targs = (torch.tensor(idx), torch.tensor(offs)) + ((torch.tensor(psw),) if psw is not None else ())
    (fb(*fargs) * flow.tensor(up)).sum().backward()
    (tb(*targs) * torch.tensor(up)).sum().backward()
    _assert_same_grad(fb.weight.grad, tb.weight.grad)


def test_embedding_bag_max_sparse_refused():
    with pytest.raises(OpError, match="mode='max' does not support sparse"):
        flow.nn.EmbeddingBag(V, D, mode="max", sparse=True)(flow.tensor([[0, 1]]))


# -- optimizers: 5 steps vs torch ------------------------------------------------------------------------------
class _Model:
    """An Embedding and an EmbeddingBag table plus a dense layer (its gradient stays dense)."""

    def __init__(self, lib, seed=0):
        rng = np.random.default_rng(seed)
        t = lib.tensor
        self.lib = lib
        self.emb = lib.nn.Embedding(V, D, sparse=True, padding_idx=0, _weight=t(rng.standard_normal((V, D))))
        self.bag = lib.nn.EmbeddingBag(V, D, mode="mean", sparse=True, _weight=t(rng.standard_normal((V, D))))
        self.lin = lib.nn.Linear(D, 1, dtype=lib.float64)
        with lib.no_grad():
            self.lin.weight.copy_(t(rng.standard_normal((1, D))))
            self.lin.bias.copy_(t(rng.standard_normal(1)))

    def params(self):
        return [self.emb.weight, self.bag.weight, self.lin.weight, self.lin.bias]

    def loss(self, step):
        rng = np.random.default_rng(100 + step)
        t = self.lib.tensor
        idx = t(rng.integers(0, V, (3, 2)))  # duplicates and the padding row appear
        bag_idx, offs = t(rng.integers(0, V, 7)), t(np.array([0, 3, 3]))
        x = self.emb(idx).sum(1) + self.bag(bag_idx, offs)
        return ((self.lin(x) - 1.0) ** 2).sum() * 0.01  # small steps: the weights stay of order 1


OPTIMS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
    ("SparseAdam", dict(lr=0.05, betas=(0.8, 0.9))),
]


@pytest.mark.parametrize("name,kw", OPTIMS)
def test_optimizer_steps_match_torch(name, kw):
    fm, tm = _Model(flow), _Model(torch)
    if name == "SparseAdam":  # SparseAdam takes the tables; the dense layer gets Adam, as in DLRM
        fo = [flow.optim.SparseAdam(fm.params()[:2], **kw), flow.optim.Adam(fm.params()[2:], lr=0.01)]
        to = [torch.optim.SparseAdam(tm.params()[:2], **kw), torch.optim.Adam(tm.params()[2:], lr=0.01)]
    else:
        fo = [getattr(flow.optim, name)(fm.params(), **kw)]
        to = [getattr(torch.optim, name)(tm.params(), **kw)]
    for step in range(5):
        for o in fo + to:
            o.zero_grad()
        fm.loss(step).backward()
        tm.loss(step).backward()
        assert fm.emb.weight.grad.is_sparse
        for o in fo + to:
            o.step()
        for fp, tp in zip(fm.params(), tm.params()):
            np.testing.assert_allclose(fp.detach().numpy(), tp.detach().numpy(), rtol=0, atol=1e-12)


def test_sparse_rows_only_touched():
    fe, _ = _tables()
    before = fe.weight.detach().numpy().copy()
    opt = flow.optim.Adagrad([fe.weight], lr=0.5)
    fe(flow.tensor([3, 3, 7])).sum().backward()
    opt.step()
    after = fe.weight.detach().numpy()
    changed = np.flatnonzero((after != before).any(1))
    np.testing.assert_array_equal(changed, [3, 7])
    np.testing.assert_array_equal(opt.state[fe.weight]["sum"].numpy()[3], np.full(D, 4.0))


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda p: flow.optim.SGD([p], lr=0.1, weight_decay=0.1), "SGD: weight_decay is not supported with sparse"),
        (lambda p: flow.optim.Adagrad([p], weight_decay=0.1), "Adagrad: weight_decay is not supported with sparse"),
        (lambda p: flow.optim.Adam([p]), "this optimizer does not support sparse gradients"),
        (lambda p: flow.optim.RMSprop([p]), "RMSprop does not support sparse gradients"),
    ],
)
def test_optimizers_refuse_sparse(make, match):
    fe, _ = _tables()
    before = fe.weight.detach().numpy().copy()
    opt = make(fe.weight)
    fe(flow.tensor([1, 2])).sum().backward()
    with pytest.raises((OptimizerError, OpError), match=match):
        opt.step()
    np.testing.assert_array_equal(fe.weight.detach().numpy(), before)


def test_sparse_adam_dense_path_kept():
    w = flow.nn.Parameter(flow.tensor(np.ones((4, 2))))
    opt = flow.optim.SparseAdam([w], lr=0.1)
    w.grad = flow.tensor(np.array([[1.0, 0.0], [0.0, 0.0], [2.0, 3.0], [0.0, 0.0]]))
    opt.step()
    moved = np.flatnonzero((w.detach().numpy() != 1).any(1))
    np.testing.assert_array_equal(moved, [0, 2])


# -- clipping -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_sparse(norm_type):
    fe, te = _tables()
    lin = np.random.default_rng(6).standard_normal((2, 3, D))
    (fe(flow.tensor([[1, 1, 4], [4, 4, 9]])) * flow.tensor(lin)).sum().backward()
    (te(torch.tensor([[1, 1, 4], [4, 4, 9]])) * torch.tensor(lin)).sum().backward()
    # torch's clip_grad_norm_ refuses sparse gradients: compare with it on the dense equivalent
    dense = te.weight.grad.to_dense()
    te.weight.grad = dense
    ft = flow.nn.utils.clip_grad_norm_([fe.weight], 0.5, norm_type)
    tt = torch.nn.utils.clip_grad_norm_([te.weight], 0.5, norm_type)
    np.testing.assert_allclose(float(ft), float(tt), rtol=1e-6)  # the norm is accumulated in float32
    assert fe.weight.grad.is_sparse
    np.testing.assert_allclose(fe.weight.grad.to_dense().numpy(), te.weight.grad.numpy(), rtol=1e-6)
