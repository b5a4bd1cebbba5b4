"""Sorting and selection (flow.ops.sorting): NumPy references, PyTorch where importable, opcheck."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.testing import opcheck

OPS = ["sort", "topk", "kthvalue", "median", "nanmedian", "mode", "searchsorted"]


def rand(shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def ints(shape, seed=0, low=0, high=4):
    return np.random.default_rng(seed).integers(low, high, size=shape)


def T(a, requires_grad=False, dtype=None):
    t = flow.tensor(np.asarray(a), dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t


def N(t):
    return np.asarray(t.detach().numpy())


def grad_of(fn, a, seed=1):
    x = T(a, requires_grad=True)
    out = fn(x)
    w = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    (out * flow.tensor(w)).sum().backward()
    return N(x.grad), w


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    assert opcheck(name)["samples"] > 0


# ---------------------------------------------------------------------------------------------
# sort argsort msort
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_numpy(dim, descending):
    a = ints((4, 6, 5), seed=2, high=3)  # many ties: the sort must be stable
    v, i = flow.sort(T(a), dim, descending)
    key = -a if descending else a
    ref_i = np.argsort(key, axis=dim, kind="stable")
    np.testing.assert_array_equal(N(i), ref_i)
    np.testing.assert_array_equal(N(v), np.take_along_axis(a, ref_i, dim))
    np.testing.assert_array_equal(N(flow.argsort(T(a), dim, descending)), ref_i)
    r = T(a).sort(dim=dim, descending=descending, stable=True)
    assert r.values is r[0] and "return_types.sort(" in repr(r)


def test_sort_nan_bool_and_0d():
    a = np.array([1.0, np.nan, -2.0, np.nan, 0.5])
    v, i = flow.sort(T(a))
    np.testing.assert_array_equal(N(v), [-2.0, 0.5, 1.0, np.nan, np.nan])
    assert N(i).tolist() == [2, 4, 0, 1, 3]
    v, i = flow.sort(T(a), descending=True)
    np.testing.assert_array_equal(N(v), [np.nan, np.nan, 1.0, 0.5, -2.0])
    assert N(i).tolist() == [1, 3, 0, 4, 2]
    b = flow.sort(T(np.array([True, False, True]))).values
    assert b.dtype is flow.bool and b.tolist() == [False, True, True]
    s = flow.sort(T(np.array(3.0)))
    assert s.values.shape == () and s.indices.item() == 0
    assert flow.msort(T(np.array([[3, 1], [2, 5]]))).tolist() == [[2, 1], [3, 5]]
    assert flow.argsort(T(a, requires_grad=True)).requires_grad is False


def test_sort_grad():
    a = rand((3, 5), seed=3)
    g, w = grad_of(lambda x: flow.sort(x, 1, descending=True).values, a)
    order = np.argsort(-a, 1)
    ref = np.zeros_like(a)
    np.put_along_axis(ref, order, w, 1)
    np.testing.assert_allclose(g, ref)


# ---------------------------------------------------------------------------------------------
# topk kthvalue
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dim", [0, -1])
def test_topk(largest, dim):
    a = rand((5, 6), seed=4)
    v, i = flow.topk(T(a), 3, dim, largest)
    order = np.argsort(-a if largest else a, axis=dim)
    ref_i = np.take(order, np.arange(3), axis=dim)
    np.testing.assert_array_equal(N(i), ref_i)
    np.testing.assert_array_equal(N(v), np.take_along_axis(a, ref_i, dim))
    assert T(a).topk(0, dim).values.shape[dim % 2] == 0
    g, w = grad_of(lambda x: flow.topk(x, 3, dim, largest).values, a)
    ref = np.zeros_like(a)
    np.put_along_axis(ref, ref_i, w, dim)
    np.testing.assert_allclose(g, ref)


def test_topk_kthvalue_errors():
    x = T(rand((2, 3)))
    with pytest.raises(OpIndexError, match=r"topk: 'k'=4 is out of range for dim 1 of size 3"):
        flow.topk(x, 4)
    with pytest.raises(OpIndexError, match="topk: 'k'=-1"):
        flow.topk(x, -1)
    with pytest.raises(OpTypeError, match="topk: 'k' must be an int"):
        flow.topk(x, 1.5)
    with pytest.raises(OpIndexError, match=r"kthvalue: 'k'=0 is out of range"):
        flow.kthvalue(x, 0)
    with pytest.raises(OpIndexError, match=r"kthvalue: 'k'=4"):
        flow.kthvalue(x, 4, 1)
    for fn in (
        lambda: flow.sort(x, 2),
        lambda: flow.topk(x, 1, dim=-3),
        lambda: flow.median(x, 5),
        lambda: flow.mode(x, 2),
        lambda: flow.kthvalue(x, 1, 2),
        lambda: flow.argsort(x, 7),
    ):
        with pytest.raises(OpIndexError, match="'dim'=.* is out of range"):
            fn()
    with pytest.raises(OpTypeError, match="sort: 'input' must be a Tensor"):
        flow.sort(np.array([1.0]))
    with pytest.raises(OpTypeError, match="sort: 'dim' must be an int"):
        flow.sort(x, dim=None)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_kthvalue(k):
    a = rand((4, 5), seed=5)
    v, i = flow.kthvalue(T(a), k, 1)
    ref_i = np.argsort(a, 1)[:, k - 1]
    np.testing.assert_array_equal(N(i), ref_i)
    np.testing.assert_array_equal(N(v), np.sort(a, 1)[:, k - 1])
    r = T(a.T).kthvalue(k, 0, keepdim=True)
    np.testing.assert_array_equal(N(r.values), np.sort(a.T, 0)[k - 1 : k])
    g, w = grad_of(lambda x: flow.kthvalue(x, k, 1).values, a)
    ref = np.zeros_like(a)
    ref[np.arange(4), ref_i] = w
    np.testing.assert_allclose(g, ref)


# ---------------------------------------------------------------------------------------------
# median nanmedian mode
def test_median():
    a = np.array([[4.0, 1.0, 3.0, 2.0], [0.5, -1.0, 7.0, 9.0]])
    assert flow.median(T(a)).item() == 2.0  # the lower of the two middle values of 8 elements
    r = flow.median(T(a), 1)
    assert r.values.tolist() == [2.0, 0.5] and r.indices.tolist() == [3, 0]
    assert T(a).median(0, keepdim=True).values.shape == (1, 4)
    assert flow.median(T(np.array([[3, 1, 2]]))).item() == 2
    nan = np.array([[1.0, np.nan, 0.0, np.nan], [1.0, 2.0, 3.0, 4.0]])
    r = flow.median(T(nan), 1)
    assert np.isnan(N(r.values)[0]) and r.indices.tolist() == [1, 1]
    assert np.isnan(flow.median(T(nan)).item())
    r = flow.nanmedian(T(nan), 1)
    assert r.values.tolist() == [0.0, 2.0] and r.indices.tolist() == [2, 1]
    assert flow.nanmedian(T(nan)).item() == 1.0
    allnan = flow.nanmedian(T(np.array([[np.nan, np.nan]])), 1)
    assert np.isnan(allnan.values.item()) and allnan.indices.item() == 0
    assert np.isnan(flow.median(T(np.zeros(0))).item())
    with pytest.raises(OpIndexError, match="median.*size 0"):
        flow.median(T(np.zeros((2, 0))), 1)


def test_median_grad():
    a = rand((3, 5), seed=6)
    g, w = grad_of(lambda x: flow.median(x), a)
    ref = np.zeros(a.size)
    ref[np.argsort(a, axis=None)[(a.size - 1) // 2]] = w
    np.testing.assert_allclose(g, ref.reshape(a.shape))
    g, w = grad_of(lambda x: flow.median(x, 0).values, a)
    ref = np.zeros_like(a)
    ref[np.argsort(a, 0)[1], np.arange(5)] = w
    np.testing.assert_allclose(g, ref)


def test_mode():
    r = flow.mode(T(np.array([[1, 2, 2, 1, 3], [5, 5, 4, 4, 4]])), 1)
    assert r.values.tolist() == [1, 4] and r.indices.tolist() == [3, 4]  # smallest on ties, last index
    r = T(np.array([[2.0, 2.0], [1.0, 3.0], [2.0, 1.0]])).mode(0, keepdim=True)
    assert r.values.tolist() == [[2.0, 1.0]] and r.indices.tolist() == [[2, 2]]
    g, w = grad_of(lambda x: flow.mode(x, 1).values, np.array([[0.5, 1.5, 0.5, 2.0]]))
    np.testing.assert_allclose(g, [[0.0, 0.0, w[0], 0.0]])


# ---------------------------------------------------------------------------------------------
# unique unique_consecutive
def test_unique():
    a = np.array([[3, 1, 2], [1, 3, 3]])
    u, inv, cnt = flow.unique(T(a), return_inverse=True, return_counts=True)
    assert u.tolist() == [1, 2, 3] and inv.tolist() == [[2, 0, 1], [0, 2, 2]] and cnt.tolist() == [2, 1, 3]
    assert inv.dtype is flow.int64 and u.dtype is flow.int64
    assert T(a.astype(np.float32)).unique().dtype is flow.float32
    rows, inv = flow.unique(T(np.array([[1, 2], [0, 5], [1, 2]])), dim=0, return_inverse=True)
    assert rows.tolist() == [[0, 5], [1, 2]] and inv.tolist() == [1, 0, 1]
    x = T(rand(4), requires_grad=True)
    assert flow.unique(x).requires_grad is False
    v, c = flow.unique_consecutive(T(np.array([1, 1, 2, 2, 3, 1, 1])), return_counts=True)
    assert v.tolist() == [1, 2, 3, 1] and c.tolist() == [2, 2, 1, 2]
    v, inv = T(np.array([[1, 1, 2], [1, 1, 2]])).unique_consecutive(return_inverse=True, dim=1)
    assert v.tolist() == [[1, 2], [1, 2]] and inv.tolist() == [0, 0, 1]


# ---------------------------------------------------------------------------------------------
# searchsorted bucketize
def test_searchsorted():
    seq = np.array([1, 3, 5, 7])
    vals = np.array([[3, 6, 9], [0, 1, 7]])
    for right in (False, True):
        out = flow.searchsorted(T(seq), T(vals), right=right)
        np.testing.assert_array_equal(N(out), np.searchsorted(seq, vals, "right" if right else "left"))
        assert out.dtype is flow.int64
    assert flow.searchsorted(T(seq), T(vals), side="right").tolist() == [[2, 3, 4], [0, 1, 4]]
    assert flow.searchsorted(T(seq), T(vals), out_int32=True).dtype is flow.int32
    assert flow.searchsorted(T(seq.astype(float)), 3.0).shape == ()
    assert flow.searchsorted(T(seq), T(np.array([2.5]))).tolist() == [1]  # promoted to a common dtype
    seq2 = np.sort(rand((2, 3, 6), seed=7), -1)
    vals2 = rand((2, 3, 4), seed=8)
    ref = np.stack([np.searchsorted(s, v) for s, v in zip(seq2.reshape(6, 6), vals2.reshape(6, 4))]).reshape(2, 3, 4)
    np.testing.assert_array_equal(N(flow.searchsorted(T(seq2), T(vals2))), ref)
    unsorted = np.array([5.0, 1.0, 3.0])
    sorter = T(np.argsort(unsorted))
    assert flow.searchsorted(T(unsorted), T(np.array([2.0, 6.0])), sorter=sorter).tolist() == [1, 3]
    assert flow.bucketize(T(np.array([3, 6, 9])), T(seq)).tolist() == [1, 3, 4]
    assert flow.bucketize(T(np.array([3, 6, 9])), T(seq), right=True).tolist() == [2, 3, 4]


def test_searchsorted_errors():
    with pytest.raises(OpError, match="searchsorted: 'sorted_sequence' of shape \\(2, 3\\) needs 'input'"):
        flow.searchsorted(T(rand((2, 3))), T(rand((3, 1))))
    with pytest.raises(OpError, match="searchsorted: 'sorted_sequence' must have at least one dim"):
        flow.searchsorted(T(np.array(1.0)), T(rand(3)))
    with pytest.raises(OpError, match="'side' must be 'left' or 'right'"):
        flow.searchsorted(T(rand(3)), T(rand(3)), side="middle")
    with pytest.raises(OpError, match="sorter"):
        flow.searchsorted(T(rand(3)), T(rand(3)), sorter=T(np.array([0, 1])))
    with pytest.raises(OpError, match="bucketize: 'boundaries' must be 1-d"):
        flow.bucketize(T(rand(3)), T(rand((2, 2))))


# ---------------------------------------------------------------------------------------------
# against PyTorch
GRAD_CASES = [
    ("sort", lambda m, x: m.sort(x, 1).values),
    ("sort_desc", lambda m, x: m.sort(x, 0, descending=True).values),
    ("topk", lambda m, x: m.topk(x, 2, 1).values),
    ("topk_small", lambda m, x: m.topk(x, 3, 0, largest=False).values),
    ("kthvalue", lambda m, x: m.kthvalue(x, 2, 1).values),
    ("kthvalue_keep", lambda m, x: m.kthvalue(x, 3, 0, keepdim=True).values),
    ("median", lambda m, x: m.median(x)),
    ("median_dim", lambda m, x: m.median(x, 1).values),
    ("nanmedian_dim", lambda m, x: m.nanmedian(x, 0).values),
    ("mode", lambda m, x: m.mode(x, 1).values),
]


@pytest.mark.parametrize("name,fn", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_values_and_grads_against_torch(torch, name, fn):
    a = rand((4, 5), seed=9)  # distinct values: the selected positions are unique
    x, tx = T(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out, tout = fn(flow, x), fn(torch, tx)
    np.testing.assert_array_equal(N(out), tout.detach().numpy())
    w = np.random.default_rng(0).standard_normal(tuple(tout.shape))
    (out * flow.tensor(w)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(N(x.grad), tx.grad.numpy())


INDEX_CASES = [
    ("sort", lambda m, x: m.sort(x, dim=1, stable=True)),
    ("sort_desc", lambda m, x: m.sort(x, dim=0, descending=True, stable=True)),
    ("argsort", lambda m, x: (m.argsort(x, dim=1, stable=True),)),
    ("mode", lambda m, x: m.mode(x, 1)),
    ("mode0", lambda m, x: m.mode(x, 0, keepdim=True)),
    ("unique", lambda m, x: m.unique(x, return_inverse=True, return_counts=True)),
    ("unique_dim", lambda m, x: m.unique(x, dim=0, return_inverse=True, return_counts=True)),
    ("unique_consecutive", lambda m, x: m.unique_consecutive(x, return_inverse=True, return_counts=True)),
    ("searchsorted", lambda m, x: (m.searchsorted(m.sort(x, 1).values, x),)),
    ("searchsorted_right", lambda m, x: (m.searchsorted(m.sort(x, 1).values, x, right=True),)),
    ("bucketize", lambda m, x: (m.bucketize(x, m.tensor([0, 1, 2])),)),
]


@pytest.mark.parametrize("name,fn", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_integer_results_against_torch(torch, name, fn):
    a = ints((6, 7), seed=10)  # ties everywhere
    outs, touts = fn(flow, T(a)), fn(torch, torch.tensor(a))
    for o, t in zip(outs, touts):
        np.testing.assert_array_equal(N(o), t.numpy())


def test_nan_against_torch(torch):
    a = np.array([[1.0, np.nan, 0.0, 2.0], [np.nan, 3.0, np.nan, -1.0]])
    for fn in (
        lambda m, x: m.sort(x, 1),
        lambda m, x: m.sort(x, dim=1, descending=True, stable=True),
        lambda m, x: m.topk(x, 2, 1),
        lambda m, x: m.median(x, 1),
        lambda m, x: m.nanmedian(x, 1),
    ):
        out, tout = fn(flow, T(a)), fn(torch, torch.tensor(a))
        np.testing.assert_array_equal(N(out.values), tout.values.numpy())
        np.testing.assert_array_equal(N(out.indices), tout.indices.numpy())
