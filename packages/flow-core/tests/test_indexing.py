"""Indexing: t[key], t[key] = v, index_put (flow.ops.subscript) and the gather/scatter family (flow.ops.indexing).

References: NumPy always, PyTorch (values and gradients) where importable, opcheck for every op.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import FlowError, OpError, OpIndexError, OpTypeError
from flow.testing import gradcheck, opcheck

OPS = ["gather", "scatter", "index_select", "index_add", "nonzero", "index", "index_put"]


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


def convert_key(k, lib):
    """The key with NumPy arrays turned into ``lib`` tensors (flow or torch)."""
    if isinstance(k, tuple):
        return tuple(convert_key(i, lib) for i in k)
    if isinstance(k, np.ndarray):
        return lib.tensor(k)
    return k


def check_vs_torch(torch, f_flow, f_torch, *arrays, grad=True, seed=7):
    """Same values and (float64) gradients from flow and PyTorch for inputs built from ``arrays``."""
    fa = [T(a, requires_grad=grad and np.asarray(a).dtype.kind == "f") for a in arrays]
    ta = [torch.tensor(np.asarray(a), requires_grad=grad and np.asarray(a).dtype.kind == "f") for a in arrays]
    fo, to = f_flow(*fa), f_torch(*ta)
    fo = list(fo) if isinstance(fo, (tuple, list)) else [fo]
    to = list(to) if isinstance(to, (tuple, list)) else [to]
    assert len(fo) == len(to)
    for a, b in zip(fo, to):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(N(a), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    if not grad:
        return
    r = np.random.default_rng(seed)
    ws = [r.standard_normal(tuple(b.shape)) for b in to]
    fl = sum((o * flow.tensor(w)).sum() for o, w in zip(fo, ws) if o.requires_grad)
    tl = sum((o * torch.tensor(w)).sum() for o, w in zip(to, ws) if o.requires_grad)
    fl.backward()
    tl.backward()
    for x, y in zip(fa, ta):
        if y.requires_grad:
            gy = y.grad.numpy() if y.grad is not None else np.zeros(y.shape)
            gx = N(x.grad) if x.grad is not None else np.zeros(tuple(x.shape))
            np.testing.assert_allclose(gx, gy, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    assert opcheck(name)["samples"] > 0


# ---------------------------------------------------------------------------------------------
# __getitem__
_R = np.random.default_rng(0)
KEYS = [
    1,
    -1,
    (0, 2),
    (slice(None), 1),
    (slice(1, None, 2),),
    (slice(None, None, 3), slice(-3, None)),
    (None, 1),
    (Ellipsis, None, 2),
    (1, Ellipsis),
    (Ellipsis,),
    (),
    (slice(10, 20),),
    (slice(-10, 2),),
    np.array(2),
    (np.array(-1), 1),
    ([0, 2, 2],),
    ([[0, 1], [3, 3]],),
    (slice(None), [1, -1]),
    ([0, 1], [2, 0]),
    ([0, 1], slice(None), [1, 2]),
    (0, slice(None), [1, 2]),
    ([0, 1], slice(None), 1),
    (None, [0, 1], Ellipsis, [1, 2]),
    ([0, 1], None, [1, 2]),
    (np.array([3, 0, 3]),),
    (Ellipsis, np.array([[4, 0]])),
    (np.array([True, False, True, True]),),
    (slice(None), np.array([True, False, True])),
    (_R.random((4, 3)) > 0.5,),
    (_R.random((4, 3, 5)) > 0.5,),
    (1, np.array([False, True, True]), 0),
    ([True, False, False, True],),
    ([],),
    (np.array([], dtype=np.int64), 1),
    (slice(1, 3), [0, 2], slice(None, None, 2)),
    (True,),
    (False,),
    (None, None),
    (np.array(True), 1),
]


@pytest.mark.parametrize("key", KEYS, ids=[f"key{i}" for i in range(len(KEYS))])
def test_getitem_vs_torch(torch, key):
    check_vs_torch(
        torch, lambda x: x[convert_key(key, flow)], lambda x: x[convert_key(key, torch)], rand((4, 3, 5), seed=3)
    )


def test_getitem_vs_numpy_and_views():
    a = rand((4, 3, 5))
    x = T(a)
    for key in [
        (1,),
        (slice(1, 3), 2),
        (Ellipsis, None),
        (slice(None, None, 2), slice(None), -1),
        ([0, 3, 1],),
        (slice(None), [2, 0]),
        (a > 0,),
    ]:
        fk = tuple(T(k) if isinstance(k, np.ndarray) else k for k in key)
        np.testing.assert_array_equal(N(x[fk]), a[key])
    # basic keys give views, advanced ones copies
    assert x[1]._base is x and x[:, 1:]._base is x and x[..., 0]._version is x._version
    adv = x[[0, 1]]
    adv[...] = 0.0
    assert np.all(N(x) == a)
    v = x[2, 1]
    v[...] = 5.0
    assert np.all(N(x)[2, 1] == 5.0) and x._version[0] == 1
    s = x[0, 0, 0]
    assert s.ndim == 0 and s._base is x  # a 0-d view, not a copy
    assert x[0, 0, 0].item() == a[0, 0, 0]


def test_getitem_duplicates_accumulate_gradient(torch):
    check_vs_torch(torch, lambda x: x[[0, 0, 2, 0]], lambda x: x[[0, 0, 2, 0]], rand((3, 2)))
    x = T(rand((3, 2)), requires_grad=True)
    x[[1, 1, 1], [0, 0, 1]].sum().backward()
    np.testing.assert_array_equal(N(x.grad), [[0, 0], [2, 1], [0, 0]])


def test_getitem_second_order():
    a = T(rand((4, 3), seed=2), requires_grad=True)
    assert gradcheck(lambda x: x[[0, 2, 2], 1:] ** 2, [a])

    def first(x):
        with flow.enable_grad():
            x2 = x if x.requires_grad else x.detach().requires_grad_(True)
            (g,) = flow.autograd.grad((x2[[1, 1, 3], ::2] ** 3).sum(), [x2], create_graph=True)
        return g

    assert gradcheck(first, [a])


def test_getitem_errors():
    x = T(rand((3, 4)))
    with pytest.raises(OpIndexError, match="index 3 is out of range for dim 0 with size 3"):
        x[3]
    with pytest.raises(OpIndexError, match="index -5 is out of range for dim 1 with size 4"):
        x[0, -5]
    with pytest.raises(OpIndexError, match="index 4 is out of range for dim 1 with size 4"):
        x[:, [0, 4]]
    with pytest.raises(OpIndexError, match="index -4 is out of range for dim 0 with size 3"):
        x[flow.tensor([-4])]
    with pytest.raises(OpIndexError, match="index 8 is out of range for dim 1 with size 3"):
        x[1:, 1:][[0], [8]]  # the dim and size reported are those of the tensor being indexed
    with pytest.raises(OpIndexError, match="too many indices for a tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(OpIndexError, match="single ellipsis"):
        x[..., 0, ...]
    with pytest.raises(OpIndexError, match=r"shape of the mask \[2\] at index 0 does not match .* \[3\]"):
        x[flow.tensor([True, False])]
    with pytest.raises(OpTypeError, match="integer or bool tensors"):
        x[flow.tensor([0.0])]
    with pytest.raises(OpTypeError, match="invalid index of type str"):
        x["a"]
    with pytest.raises(OpError, match="step must be greater than zero"):
        x[::-1]
    # never a raw NumPy IndexError: every index error is flow's
    for bad in (5, (0, 9), [7], (slice(None), [-9])):
        with pytest.raises(IndexError) as e:
            x[bad]
        assert isinstance(e.value, OpIndexError)


# ---------------------------------------------------------------------------------------------
# __setitem__
SET_CASES = [
    (1, 5.0),
    ((slice(None), 1), np.arange(4.0)),
    ((Ellipsis, 0), 2),
    ([0, 3], -1.0),
    (([0, 1], [1, 2]), np.array([7.0, 8.0])),
    ((slice(1, 3), [0, 2]), np.ones((2, 2))),
    ("mask", 0.0),
    ((slice(None), 0), np.ones((1, 4))),
    ((None, 1), np.ones((1, 3))),
]


@pytest.mark.parametrize("i", range(len(SET_CASES)))
def test_setitem_vs_numpy_and_torch(i):
    key, val = SET_CASES[i]
    a = rand((4, 3), seed=i)
    if key == "mask":
        key = a > 0
    ref = a.copy()
    nkey = key[1:] if isinstance(key, tuple) and key[0] is None else key
    ref[nkey] = val
    x = T(a)
    fk = T(key) if isinstance(key, np.ndarray) else key
    x[fk] = T(val) if isinstance(val, np.ndarray) else val
    np.testing.assert_array_equal(N(x), ref)
    assert x._version[0] == 1
    torch = pytest.importorskip("torch")
    t = torch.tensor(a)
    tk = torch.tensor(key) if isinstance(key, np.ndarray) else key
    t[tk] = torch.tensor(val) if isinstance(val, np.ndarray) else val
    np.testing.assert_array_equal(N(x), t.numpy())


def test_setitem_dtypes_views_and_errors():
    x = T(np.zeros((2, 3), dtype=np.int64))
    x[0] = 2.7  # cast to the tensor's dtype, as PyTorch does
    x[1, :2] = T(np.array([1.9, -3.2]))
    assert x.dtype is flow.int64 and x.tolist() == [[2, 2, 2], [1, -3, 0]]
    b = T(np.zeros(3, dtype=bool))
    b[1] = True
    assert b.tolist() == [False, True, False]
    # writes through a view reach the base; the shared version counter moves
    y = T(rand((3, 4)))
    v = y[1:]
    v[0, [0, 3]] = 9.0
    assert N(y)[1, 0] == 9.0 and N(y)[1, 3] == 9.0 and y._version[0] == 1
    y[:, 1] = y[:, 2]  # overlapping source and destination
    np.testing.assert_array_equal(N(y)[:, 1], N(y)[:, 2])
    with pytest.raises(OpError, match=r"cannot assign a value of shape \(2,\) to the indexed region of shape \(4,\)"):
        y[0] = T(np.ones(2))
    with pytest.raises(OpIndexError, match="index 7 is out of range for dim 1 with size 4"):
        y[0, 7] = 1.0
    with pytest.raises(OpIndexError, match="index 5 is out of range for dim 0 with size 3"):
        y[[5]] = 1.0
    e = T(np.ones(3)).expand(2, 3)
    with pytest.raises(OpError, match="cannot write"):
        e[0, 0] = 2.0


def test_setitem_autograd(torch):
    def run(lib, a, b, c):
        t = lib.tensor
        xa, xv, xw = t(a, requires_grad=True), t(b, requires_grad=True), t(c, requires_grad=True)
        y = xa * 2.0
        y[1:, 0] = xv  # a value requiring grad, basic key
        y[[0, 2], [1, 1]] = xw  # advanced key
        y[y.detach() > 1.5] = 0.0  # a constant into a non-leaf
        (y * y).sum().backward()
        return y, xa.grad, xv.grad, xw.grad

    a, b, c = rand((3, 2), 1), rand((2,), 2), rand((2,), 3)
    fr = run(flow, a, b, c)
    tr = run(torch, a, b, c)
    for p, q in zip(fr, tr):
        np.testing.assert_allclose(N(p), q.detach().numpy(), rtol=1e-12)
    assert fr[0].grad_fn is not None


def test_setitem_on_leaf_requiring_grad_errors():
    x = T(rand((2, 2)), requires_grad=True)
    with pytest.raises(FlowError, match="leaf tensor that requires grad"):
        x[0] = 1.0
    with flow.no_grad():
        x[0] = 1.0
    assert N(x)[0].tolist() == [1.0, 1.0]


def test_index_put(torch):
    check_vs_torch(
        torch,
        lambda x, v: flow.index_put(x, (flow.tensor([0, 2]), flow.tensor([1, 1])), v),
        lambda x, v: torch.index_put(x, (torch.tensor([0, 2]), torch.tensor([1, 1])), v),
        rand((3, 4), 1),
        rand(2, 2),
    )
    check_vs_torch(
        torch,
        lambda x, v: x.index_put((flow.tensor([0, 0, 2]),), v, accumulate=True),
        lambda x, v: x.index_put((torch.tensor([0, 0, 2]),), v, accumulate=True),
        rand((3, 4), 1),
        rand((3, 4), 2),
    )
    check_vs_torch(
        torch,
        lambda x, v: x.index_put((None, flow.tensor([3, 0])), v),
        lambda x, v: (
            x.index_put((slice(None), torch.tensor([3, 0])), v)
            if False
            else x.clone().index_put_((torch.arange(3)[:, None], torch.tensor([3, 0])), v)
        ),
        rand((3, 4), 1),
        rand(1, 2),
    )
    x = T(rand((3, 4)))
    x.index_put_((flow.tensor([1]),), flow.tensor(0.0))
    assert np.all(N(x)[1] == 0) and x._version[0] == 1


# ---------------------------------------------------------------------------------------------
# gather / scatter / index_* / masked_* / nonzero / take
def I(a):  # noqa: E743
    return np.asarray(a, dtype=np.int64)


FAMILY = [
    (
        "gather0",
        lambda x, i: flow.gather(x, 0, i),
        lambda x, i: x.gather(0, i),
        (3, 4),
        I([[0, 2, 1, 0], [2, 2, 0, 1]]),
    ),
    ("gather1", lambda x, i: x.gather(-1, i), lambda x, i: x.gather(-1, i), (3, 4), I([[3, 3], [0, 1], [2, 2]])),
    ("index_select", lambda x, i: flow.index_select(x, 1, i), lambda x, i: x.index_select(1, i), (3, 4), I([3, 0, 3])),
    ("index_select0d", lambda x, i: x.index_select(0, i), lambda x, i: x.index_select(0, i), (3, 4), I(2)),
    ("take", lambda x, i: flow.take(x, i), lambda x, i: x.take(i), (3, 4), I([[0, -1], [5, 5]])),
    (
        "take_along_dim",
        lambda x, i: flow.take_along_dim(x, i, 1),
        lambda x, i: x.take_along_dim(i, 1),
        (3, 4),
        I([[0], [3], [1]]),
    ),
    (
        "take_along_dim_b",
        lambda x, i: x.take_along_dim(i, 0),
        lambda x, i: x.take_along_dim(i, 0),
        (3, 1),
        I([[0, 1, 2, 2]]),
    ),
    (
        "take_along_none",
        lambda x, i: flow.take_along_dim(x, i),
        lambda x, i: x.take_along_dim(i),
        (3, 4),
        I([11, 0, 4]),
    ),
]


@pytest.mark.parametrize("name,ff,tf,shape,idx", FAMILY, ids=[c[0] for c in FAMILY])
def test_gather_family_vs_torch(torch, name, ff, tf, shape, idx):
    check_vs_torch(torch, ff, tf, rand(shape, seed=3), idx)


SCATTER = [
    ("scatter", lambda x, i, s: flow.scatter(x, 0, i, s), lambda x, i, s: x.scatter(0, i, s)),
    ("scatter_add", lambda x, i, s: flow.scatter_add(x, 0, i, s), lambda x, i, s: x.scatter_add(0, i, s)),
    ("scatter_value", lambda x, i, s: x.scatter(0, i, 2.5) * s.sum(), lambda x, i, s: x.scatter(0, i, 2.5) * s.sum()),
]


@pytest.mark.parametrize("name,ff,tf", SCATTER, ids=[c[0] for c in SCATTER])
def test_scatter_vs_torch(torch, name, ff, tf):
    idx = I([[0, 2, 1], [3, 0, 2]])  # distinct per column: overwrite order does not matter
    check_vs_torch(torch, ff, tf, rand((4, 3), 1), idx, rand((2, 3), 2))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_reduce_add_and_larger_src(torch):
    idx = I([[0, 2, 1], [3, 0, 2]])
    # reduce='add' (PyTorch has no gradient for it) and a src larger than the index
    check_vs_torch(
        torch,
        lambda x, i, s: x.scatter(0, i, s, reduce="add"),
        lambda x, i, s: x.scatter(0, i, s, reduce="add"),
        rand((4, 3), 1),
        idx,
        rand((2, 4), 2),
        grad=False,
    )
    x, s = T(rand((4, 3), 1), requires_grad=True), T(rand((3, 4), 2), requires_grad=True)
    assert gradcheck(lambda x, s: flow.scatter(x, 0, T(idx), s), [x, s])
    assert gradcheck(lambda x, s: flow.scatter(x, 0, T(idx), s, reduce="add"), [x, s])
    assert gradcheck(lambda x, s: flow.scatter_add(x, 0, T(I([[0, 0, 0]])), s), [x, s])


def test_scatter_multiply_and_inplace(torch):
    idx = I([[0, 0, 1]])
    x = T(rand((2, 3), 1))
    t = torch.tensor(N(x))
    np.testing.assert_allclose(
        N(x.scatter(0, T(idx), T(rand((1, 3), 2)), reduce="multiply")),
        t.scatter(0, torch.tensor(idx), torch.tensor(rand((1, 3), 2)), reduce="multiply"),
    )
    y = x.clone()
    y.scatter_(1, T(I([[2], [0]])), 0.0)
    assert N(y)[0, 2] == 0 and N(y)[1, 0] == 0 and y._version[0] == 1
    y.scatter_add_(0, T(I([[1, 1, 1]])), T(np.ones((1, 3))))
    np.testing.assert_allclose(N(y)[1], N(x)[1] + np.array([-N(x)[1, 0], 1, 1]) + np.array([1, 0, 0]))


def test_index_add_fill_copy_vs_torch(torch):
    idx = I([0, 2, 0])
    check_vs_torch(
        torch,
        lambda x, i, s: flow.index_add(x, 0, i, s, alpha=2.0),
        lambda x, i, s: x.index_add(0, i, s, alpha=2.0),
        rand((3, 4), 1),
        idx,
        rand((3, 4), 2),
    )
    check_vs_torch(
        torch,
        lambda x, i, s: x.index_add(1, i, s),
        lambda x, i, s: x.index_add(1, i, s),
        rand((2, 4), 1),
        idx,
        rand((2, 3), 2),
    )
    check_vs_torch(
        torch, lambda x, i: x.index_fill(1, i, -1.5), lambda x, i: x.index_fill(1, i, -1.5), rand((2, 4), 1), I([3, 1])
    )
    check_vs_torch(
        torch,
        lambda x, i, v: flow.index_fill(x, 0, i, v.sum()),
        lambda x, i, v: x.index_fill(0, i, v.sum()),
        rand((2, 4), 1),
        I([1]),
        rand(2, 3),
    )
    check_vs_torch(
        torch,
        lambda x, i, s: flow.index_copy(x, 0, i, s),
        lambda x, i, s: x.index_copy(0, i, s),
        rand((4, 3), 1),
        I([3, 0]),
        rand((2, 3), 2),
    )
    x = T(rand((3, 2)))
    x.index_add_(0, T(I([1, 1])), T(np.ones((2, 2))))
    x.index_fill_(1, T(I([0])), 0.0)
    x.index_copy_(0, T(I([2])), T(np.full((1, 2), 4.0)))
    assert N(x)[:, 0].tolist() == [0, 0, 4] and x._version[0] == 3


def test_masked_fill_select_vs_torch(torch):
    m = np.array([[True, False, True, False]])
    check_vs_torch(torch, lambda x, m: x.masked_fill(m, 3.0), lambda x, m: x.masked_fill(m, 3.0), rand((3, 4)), m)
    check_vs_torch(
        torch,
        lambda x, v, m: flow.masked_fill(x, m, v.sum()),
        lambda x, v, m: x.masked_fill(m, v.sum()),
        rand((3, 4)),
        rand(2, 1),
        m,
    )
    check_vs_torch(torch, lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m), rand((3, 4)), m)
    check_vs_torch(
        torch,
        lambda x, m: flow.masked_select(x, m),
        lambda x, m: torch.masked_select(x, m),
        rand((1, 4)),
        np.random.default_rng(0).random((3, 4)) > 0.5,
    )
    check_vs_torch(torch, lambda x, m: x.masked_fill(m, 1.0), lambda x, m: x.masked_fill(m, 1.0), rand(4), m)
    x = T(np.arange(4))
    assert x.masked_fill(T(np.array([True, False, True, False])), 2.7).tolist() == [2, 1, 2, 3]
    y = T(rand((2, 4)))
    y.masked_fill_(T(m), 0.0)
    assert np.all(N(y)[:, 0] == 0) and y._version[0] == 1
    with pytest.raises(OpTypeError, match="'mask' must be a bool tensor, got flow.int64"):
        y.masked_fill(T(np.ones(4, dtype=np.int64)), 0.0)
    with pytest.raises(OpError, match=r"'value' must be a number or a 0-d tensor, got a tensor of shape \(2,\)"):
        y.masked_fill(T(m), T(np.ones(2)))
    with pytest.raises(OpError, match="cannot be broadcast to the tensor's shape"):
        T(rand(4)).masked_fill_(T(np.ones((2, 4), dtype=bool)), 0.0)
    with pytest.raises(OpError, match="cannot be broadcast"):
        y.masked_select(T(np.ones(3, dtype=bool)))


def test_nonzero_vs_numpy_and_torch(torch):
    a = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    np.testing.assert_array_equal(N(flow.nonzero(T(a))), np.argwhere(a))
    for p, q in zip(T(a).nonzero(as_tuple=True), np.nonzero(a)):
        np.testing.assert_array_equal(N(p), q)
    assert flow.nonzero(T(a)).dtype is flow.int64
    np.testing.assert_array_equal(N(flow.argwhere(T(a > 0))), torch.argwhere(torch.tensor(a > 0)).numpy())
    assert tuple(flow.nonzero(flow.tensor(5.0)).shape) == (1, 0)
    assert [t.tolist() for t in flow.nonzero(flow.tensor(5.0), as_tuple=True)] == [[0]]
    assert tuple(flow.nonzero(flow.zeros(0, 3)).shape) == (0, 2)
    assert [t.tolist() for t in flow.where(T(a > 0))] == [q.tolist() for q in np.nonzero(a > 0)]


def test_fill_diagonal_(torch):
    for shape, wrap in [((3, 3), False), ((5, 3), True), ((5, 3), False), ((2, 4), False), ((3, 3, 3), False)]:
        x, t = T(rand(shape)), torch.tensor(rand(shape))
        x.fill_diagonal_(7.0, wrap=wrap)
        t.fill_diagonal_(7.0, wrap=wrap)
        np.testing.assert_array_equal(N(x), t.numpy())


def test_family_errors():
    x = T(rand((3, 4)))
    with pytest.raises(OpIndexError, match="index 3 is out of range for dim 0 with size 3"):
        x.gather(0, T(I([[3, 0, 0, 0]])))
    with pytest.raises(OpIndexError, match="index -1 is out of range for dim 1 with size 4"):
        x.gather(1, T(I([[-1]])))
    with pytest.raises(OpError, match="same number of dims"):
        x.gather(0, T(I([0])))
    with pytest.raises(OpError, match="exceeds the 'input' size 4 at dim 1"):
        x.gather(0, T(I([[0] * 5])))
    with pytest.raises(OpTypeError, match="'index' must be an integer tensor, got flow.float64"):
        x.gather(0, T(rand((1, 1))))
    with pytest.raises(OpIndexError, match="index 4 is out of range for dim 1 with size 4"):
        x.scatter(1, T(I([[4]])), 1.0)
    with pytest.raises(OpError, match="reduce must be"):
        x.scatter(1, T(I([[0]])), 1.0, reduce="mean")
    with pytest.raises(OpIndexError, match="index 5 is out of range for dim 1 with size 4"):
        x.index_select(1, T(I([0, 5])))
    with pytest.raises(OpError, match="'index' must be 0-d or 1-d"):
        x.index_select(1, T(I([[0]])))
    with pytest.raises(OpError, match=r"'source' must have shape \(3, 2\)"):
        x.index_add(1, T(I([0, 1])), T(rand((3, 3))))
    with pytest.raises(OpTypeError, match="expected 'src'"):
        flow.scatter(x, 0, T(I([[0]])))


def test_inplace_methods_autograd_chain(torch):
    """In-place indexing methods on a non-leaf, followed by more in-place ops, backprop like PyTorch."""

    def run(lib, a, s):
        xa, xs = lib.tensor(a, requires_grad=True), lib.tensor(s, requires_grad=True)
        i = lib.tensor(np.array([[0, 2, 1]]))
        y = xa * 2.0
        y.masked_fill_(lib.tensor(np.array([True, False, False])), 0.5)
        y.scatter_(0, i, xs)
        y.index_add_(1, lib.tensor(np.array([0, 0])), xs.reshape(3, 1).expand(3, 2) * 3.0)
        y.index_fill_(0, lib.tensor(np.array([2])), -1.0)
        y[0, 1] = xs[0, 2]
        y.mul_(y.detach() + 1.0)
        (y * y).sum().backward()
        return y, xa.grad, xs.grad

    a, s = rand((3, 3), 1), rand((1, 3), 2)
    for p, q in zip(run(flow, a, s), run(torch, a, s)):
        np.testing.assert_allclose(N(p), q.detach().numpy(), rtol=1e-12)


def test_getitem_gradient_survives_later_inplace_writes(torch):
    def run(lib, a):
        xa = lib.tensor(a, requires_grad=True)
        y = xa * 2.0
        z = y[[0, 2, 0]] * 3.0 + y[1:, [1]].sum()
        y.add_(1.0)  # the gradient of the indexing does not need y's values
        z.sum().backward()
        return xa.grad

    np.testing.assert_allclose(N(run(flow, rand((3, 2)))), run(torch, rand((3, 2))).numpy())
