"""Tensor methods PyTorch model code uses: new_*, in-place random fills, in-place view ops, masked_scatter,
sum_to_size, storage_offset, ndimension, H, apply_/map_ (compared with torch where it is deterministic)."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import AutogradError, OpError, OpIndexError, OpTypeError

NEW_METHODS = (
    "new_zeros new_ones new_full new_empty new_tensor normal_ uniform_ random_ bernoulli_ exponential_ cauchy_ "
    "log_normal_ geometric_ squeeze_ unsqueeze_ t_ masked_scatter_ masked_scatter sum_to_size storage_offset "
    "ndimension H apply_ map_"
).split()


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_methods_exist_and_match_torch_names(torch):
    assert [m for m in NEW_METHODS if not hasattr(flow.Tensor, m)] == []
    assert [m for m in NEW_METHODS if not hasattr(torch.Tensor, m)] == []


# -- new_* ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["new_zeros", "new_ones", "new_empty"])
@pytest.mark.parametrize("size", [(2, 3), ((2, 3),), ([4],), ((),), (0, 2)])
def test_new_factories_match_torch(torch, name, size):
    f = flow.ones(2, dtype=flow.float64)
    t = torch.ones(2, dtype=torch.float64)
    a, b = getattr(f, name)(*size), getattr(t, name)(*size)
    assert tuple(a.shape) == tuple(b.shape)
    assert a.dtype is flow.float64 and a.device == f.device and not a.requires_grad
    if name != "new_empty":
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_new_factories_size_forms_dtype_override_and_requires_grad():
    f = flow.zeros(3, dtype=flow.int32)
    assert tuple(f.new_zeros(flow.Size([2, 5])).shape) == (2, 5)
    assert f.new_ones(2).dtype is flow.int32
    g = f.new_ones((2, 2), dtype=flow.float32, requires_grad=True)
    assert g.dtype is flow.float32 and g.requires_grad and g.is_leaf
    e = f.new_empty(3, dtype=flow.float16)
    assert e.dtype is flow.float16 and tuple(e.shape) == (3,)
    with pytest.raises(OpTypeError, match="floating-point"):
        f.new_zeros(2, requires_grad=True)
    for name in ("new_zeros", "new_ones", "new_empty"):
        with pytest.raises(TypeError, match="size"):
            getattr(f, name)()
    with pytest.raises(OpError, match="negative dimension"):
        f.new_zeros(2, -1)


def test_new_full_uses_self_dtype_not_fill_value(torch):
    a = flow.zeros(2).new_full((2, 3), 7)
    b = torch.zeros(2).new_full((2, 3), 7)
    assert a.dtype is flow.float32 and b.dtype is torch.float32
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    c = flow.zeros(1, dtype=flow.int64).new_full([3], 2.9)
    np.testing.assert_array_equal(c.numpy(), torch.zeros(1, dtype=torch.int64).new_full([3], 2.9).numpy())
    assert flow.zeros(1).new_full((2,), 1, dtype=flow.float64).dtype is flow.float64
    with pytest.raises(TypeError, match="tuple or list"):
        flow.zeros(1).new_full(3, 1.0)


def test_new_tensor_copies_with_self_dtype(torch):
    f = flow.zeros(1, dtype=flow.int32)
    a = f.new_tensor([1.7, -2.2])
    b = torch.zeros(1, dtype=torch.int32).new_tensor([1.7, -2.2])
    assert a.dtype is flow.int32
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert flow.ones(2).new_tensor([1, 2]).dtype is flow.float32
    assert flow.ones(2).new_tensor(3).shape == ()
    src = flow.arange(3.0, requires_grad=True) * 2
    with pytest.warns(UserWarning, match="detach"):
        c = flow.zeros(1, dtype=flow.float64).new_tensor(src)
    assert c.dtype is flow.float64 and c.is_leaf and not c.requires_grad
    c.add_(1)  # a copy: the source is untouched
    np.testing.assert_array_equal(src.detach().numpy(), [0.0, 2.0, 4.0])
    r = flow.ones(2).new_tensor([1.0, 2.0], requires_grad=True)
    assert r.requires_grad and r.is_leaf


# -- in-place random fills ---------------------------------------------------------------------------------
N = 200_000

FILLS = [
    ("normal_", (0.5, 2.0)),
    ("uniform_", (-1.0, 3.0)),
    ("random_", (2, 9)),
    ("bernoulli_", (0.3,)),
    ("exponential_", (2.0,)),
    ("cauchy_", (1.0, 0.5)),
    ("log_normal_", (0.2, 0.4)),
    ("geometric_", (0.25,)),
]


@pytest.mark.parametrize("name,args", FILLS)
def test_fill_is_reproducible_and_honours_generator(name, args):
    flow.manual_seed(123)
    a = getattr(flow.empty(50, dtype=flow.float64), name)(*args).numpy().copy()
    flow.manual_seed(123)
    b = getattr(flow.empty(50, dtype=flow.float64), name)(*args).numpy().copy()
    np.testing.assert_array_equal(a, b)
    g1, g2 = flow.Generator().manual_seed(7), flow.Generator().manual_seed(7)
    c = getattr(flow.empty(50, dtype=flow.float64), name)(*args, generator=g1).numpy()
    d = getattr(flow.empty(50, dtype=flow.float64), name)(*args, generator=g2).numpy()
    np.testing.assert_array_equal(c, d)
    assert not np.array_equal(a, c)  # a different stream
    with pytest.raises(TypeError, match="flow.Generator"):
        getattr(flow.empty(3), name)(*args, generator=np.random.default_rng(0))


def test_normal_and_uniform_draw_what_nn_init_draws():
    for method, init in (("normal_", flow.nn.init.normal_), ("uniform_", flow.nn.init.uniform_)):
        flow.manual_seed(5)
        a = getattr(flow.empty(4, 6), method)(0.1, 0.7).numpy().copy()
        flow.manual_seed(5)
        b = init(flow.empty(4, 6), 0.1, 0.7).numpy()
        np.testing.assert_array_equal(a, b)


def _draw(name, *args, dtype=flow.float64, n=N):
    flow.manual_seed(2024)
    return getattr(flow.empty(n, dtype=dtype), name)(*args).numpy().astype(np.float64)


def test_normal_statistics():
    x = _draw("normal_", 0.5, 2.0)
    assert abs(x.mean() - 0.5) < 0.03 and abs(x.std() - 2.0) < 0.02
    assert np.all(_draw("normal_", 3.0, 0.0, n=10) == 3.0)


def test_uniform_statistics_and_half_open_range():
    x = _draw("uniform_", -1.0, 3.0)
    assert x.min() >= -1.0 and x.max() < 3.0
    assert abs(x.mean() - 1.0) < 0.02 and abs(x.var() - 16 / 12) < 0.02
    for dt in (flow.float16, flow.bfloat16, flow.float32):
        y = _draw("uniform_", 0.0, 1.0, dtype=dt, n=50_000)
        assert y.min() >= 0.0 and y.max() < 1.0
    assert np.all(_draw("uniform_", 2.0, 2.0, n=5) == 2.0)


def test_random_ranges():
    x = _draw("random_", 2, 9)
    assert set(np.unique(x)) == set(range(2, 9))
    assert abs(x.mean() - 5.0) < 0.03
    assert set(np.unique(_draw("random_", 4, n=2000))) == {0, 1, 2, 3}
    flow.manual_seed(0)
    i8 = flow.empty(5000, dtype=flow.int8).random_().numpy()
    assert i8.min() >= 0 and i8.max() == 127
    u8 = flow.empty(5000, dtype=flow.uint8).random_(250, None).numpy()
    assert set(np.unique(u8)) == set(range(250, 256))
    b = flow.empty(1000, dtype=flow.bool).random_().numpy()
    assert b.dtype == np.bool_ and b.any() and not b.all()
    h = flow.empty(20000, dtype=flow.float16).random_().numpy().astype(np.float64)
    assert h.min() >= 0 and h.max() <= 2048 and np.all(h == np.round(h)) and h.max() > 2000
    kw = flow.empty(2000, dtype=flow.int64).random_(**{"from": -3, "to": 0}).numpy()
    assert set(np.unique(kw)) == {-3, -2, -1}
    assert set(np.unique(flow.empty(2000, dtype=flow.int64).random_(to=2).numpy())) == {0, 1}
    with pytest.warns(UserWarning, match="cannot represent every integer"):
        flow.empty(3).random_(0, 2**25)


def test_bernoulli_statistics_any_dtype_and_tensor_p():
    x = _draw("bernoulli_", 0.3)
    assert set(np.unique(x)) == {0.0, 1.0} and abs(x.mean() - 0.3) < 0.005
    assert _draw("bernoulli_", 0.0, n=100).sum() == 0 and _draw("bernoulli_", 1.0, n=100).sum() == 100
    b = flow.empty(1000, dtype=flow.bool).bernoulli_(0.5)
    assert b.dtype is flow.bool
    assert flow.empty(10, dtype=flow.int64).bernoulli_().dtype is flow.int64
    flow.manual_seed(1)
    p = flow.tensor([0.0, 1.0, 0.25])
    m = flow.empty(N // 4, 3).bernoulli_(p).numpy()
    assert m[:, 0].sum() == 0 and m[:, 1].all() and abs(m[:, 2].mean() - 0.25) < 0.01


def test_exponential_cauchy_lognormal_geometric_statistics():
    e = _draw("exponential_", 2.0)
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.005 and abs(e.var() - 0.25) < 0.01
    c = _draw("cauchy_", 1.0, 0.5)  # heavy tails: check the median and the quartiles (median +- sigma)
    q1, med, q3 = np.percentile(c, [25, 50, 75])
    assert abs(med - 1.0) < 0.01 and abs(q1 - 0.5) < 0.015 and abs(q3 - 1.5) < 0.015
    ln = _draw("log_normal_", 0.2, 0.4)
    assert ln.min() > 0 and abs(np.log(ln).mean() - 0.2) < 0.005 and abs(np.log(ln).std() - 0.4) < 0.005
    g = _draw("geometric_", 0.25)
    assert g.min() == 1 and np.all(g == np.round(g))
    assert abs(g.mean() - 4.0) < 0.05 and abs(g.var() - 12.0) < 0.5
    gi = flow.empty(100, dtype=flow.int64).geometric_(0.5)
    assert gi.dtype is flow.int64 and gi.numpy().min() >= 1


BAD_FILLS = [
    (flow.float32, "normal_", (0.0, -1.0), OpError, "std >= 0.0"),
    (flow.float32, "normal_", (0.0, float("nan")), OpError, "std >= 0.0"),
    (flow.int64, "normal_", (), OpTypeError, "floating-point"),
    (flow.float32, "normal_", ("0",), OpTypeError, "mean must be a real number"),
    (flow.float32, "uniform_", (1.0, 0.0), OpError, "from=1.0 > to=0.0"),
    (flow.float32, "uniform_", (0.0, float("inf")), OpError, "out of bounds"),
    (flow.float16, "uniform_", (-1e5, 1e5), OpError, "out of bounds for flow.float16|out of bounds for float16"),
    (flow.int64, "uniform_", (), OpTypeError, "floating-point"),
    (flow.float32, "random_", (3, 3), OpError, "from=3 >= to=3"),
    (flow.uint8, "random_", (0, 300), OpError, "to - 1 = 299 is out of bounds"),
    (flow.uint8, "random_", (-1, 3), OpError, "from=-1 is out of bounds"),
    (flow.bool, "random_", (0, 3), OpError, "out of bounds"),
    (flow.float32, "random_", (2.5, 4), OpTypeError, "from must be an int"),
    (flow.float32, "random_", (1, 2, 3), TypeError, "random_"),
    (flow.float32, "bernoulli_", (1.5,), OpError, r"p to be in \[0, 1\], got p=1.5"),
    (flow.float32, "bernoulli_", (float("nan"),), OpError, r"\[0, 1\]"),
    (flow.float32, "exponential_", (0.0,), OpError, "lambda > 0.0"),
    (flow.int64, "exponential_", (), OpTypeError, "floating-point"),
    (flow.float32, "cauchy_", (0.0, 0.0), OpError, "sigma > 0.0"),
    (flow.int32, "cauchy_", (), OpTypeError, "floating-point"),
    (flow.float32, "log_normal_", (1.0, 0.0), OpError, "std > 0.0"),
    (flow.int64, "log_normal_", (), OpTypeError, "floating-point"),
    (flow.float32, "geometric_", (1.0,), OpError, r"p to be in \(0, 1\)"),
    (flow.float32, "geometric_", (0.0,), OpError, r"\(0, 1\)"),
    (flow.bool, "geometric_", (0.5,), OpTypeError, "bool"),
]


@pytest.mark.parametrize("dtype,name,args,exc,match", BAD_FILLS)
def test_fill_refuses_bad_parameters(dtype, name, args, exc, match):
    t = flow.zeros(4, dtype=dtype)
    with pytest.raises(exc, match=match):
        getattr(t, name)(*args)
    np.testing.assert_array_equal(t.numpy(), np.zeros(4))
    assert t._version[0] == 0


def test_bernoulli_tensor_p_checks():
    with pytest.raises(OpError, match="all elements of p"):
        flow.empty(3).bernoulli_(flow.tensor([0.5, 2.0, 0.1]))
    with pytest.raises(OpError, match="cannot be broadcast"):
        flow.empty(3).bernoulli_(flow.full((2, 3), 0.5))


@pytest.mark.parametrize("name,args", FILLS)
def test_fill_on_leaf_that_requires_grad(name, args):
    a = flow.zeros(5, requires_grad=True)
    with pytest.raises(AutogradError, match="leaf tensor that requires grad"):
        getattr(a, name)(*args)
    assert a._version[0] == 0
    with flow.no_grad():
        getattr(a, name)(*args)
    assert a._version[0] == 1 and a.is_leaf and a.requires_grad and a.grad_fn is None
    assert not np.array_equal(a.detach().numpy(), np.zeros(5)) or name == "bernoulli_"


@pytest.mark.parametrize("name,args", FILLS)
def test_fill_on_computed_tensor_gives_zero_gradient(torch, name, args):
    a = flow.ones(4, requires_grad=True)
    y = a * 3
    v = y._version[0]
    getattr(y, name)(*args)
    assert y._version[0] == v + 1 and y.requires_grad and y.grad_fn is not None
    (y * 2).sum().backward()
    ta = torch.ones(4, requires_grad=True)
    ty = ta * 3
    getattr(ty, name)(*args)
    (ty * 2).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())


def test_fill_invalidates_saved_values_and_refusal_keeps_rng_state():
    a = flow.ones(3, requires_grad=True)
    w = flow.ones(3)
    loss = (a * w).sum()  # the gradient of ``a`` needs ``w``
    w.normal_()
    with pytest.raises(AutogradError, match="modified by an inplace operation|version"):
        loss.backward()
    flow.manual_seed(9)
    with pytest.raises(OpError):
        flow.empty(3).normal_(0.0, -1.0)
    got = flow.empty(3).normal_().numpy().copy()
    flow.manual_seed(9)
    np.testing.assert_array_equal(got, flow.empty(3).normal_().numpy())


def test_fill_through_parameter_data_and_views_of_grad_tensors():
    p = flow.nn.Parameter(flow.zeros(64, 64))
    p.data.normal_(mean=0.0, std=0.02)  # how model code initialises weights
    w = p.detach().numpy()
    assert abs(w.std() - 0.02) < 0.002 and p.is_leaf and p.requires_grad
    before = w.copy()
    with pytest.raises(AutogradError, match="view of a leaf tensor"):
        p[0].uniform_()
    y = p * 2
    y[1].normal_()  # the base's history is rebased: the overwritten row passes no gradient
    y.sum().backward()
    assert p.grad[1].abs().max().item() == 0 and p.grad[0].min().item() == 2
    p.grad = None
    p[0].detach().zero_()  # a detached view is not part of autograd
    np.testing.assert_array_equal(p.detach().numpy()[1:], before[1:])
    with flow.no_grad():
        p[2].fill_(1.0)
        p[3].bernoulli_(1.0)
    assert p.detach().numpy()[2:4].min() == 1.0


def test_fill_writes_through_views():
    base = flow.zeros(4, 4)
    view = base[1]
    view.uniform_(5.0, 6.0)
    b = base.numpy()
    assert np.all((b[1] >= 5.0) & (b[1] < 6.0)) and np.all(b[[0, 2, 3]] == 0)
    assert base._version[0] == 1


# -- squeeze_ / unsqueeze_ / t_ ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,shape,args",
    [
        ("squeeze_", (1, 3, 1, 2), ()),
        ("squeeze_", (1, 3, 1, 2), (2,)),
        ("squeeze_", (2, 1, 3, 1), ((1, 3),)),
        ("squeeze_", (2, 3), (0,)),
        ("unsqueeze_", (2, 3), (1,)),
        ("unsqueeze_", (2, 3), (-1,)),
        ("t_", (2, 3), ()),
        ("t_", (3,), ()),
        ("t_", (), ()),
    ],
)
def test_inplace_views_match_torch(torch, name, shape, args):
    n = int(np.prod(shape))
    f = flow.arange(float(n)).reshape(shape) * 1
    t = torch.arange(float(n)).reshape(shape) * 1
    fv, tv = f._version[0], t._version
    assert getattr(f, name)(*args) is f
    getattr(t, name)(*args)
    assert tuple(f.shape) == tuple(t.shape)
    np.testing.assert_array_equal(f.numpy(), t.numpy())
    assert f._version[0] - fv == t._version - tv


def test_inplace_views_autograd_matches_torch(torch):
    a = flow.arange(6.0).reshape(1, 2, 3).requires_grad_()
    ta = torch.arange(6.0).reshape(1, 2, 3).requires_grad_()
    ws = np.arange(6.0).reshape(3, 2)
    y, ty = a * 2, ta * 2
    y.squeeze_(0)
    y.t_()
    y.unsqueeze_(0)
    ty.squeeze_(0)
    ty.t_()
    ty.unsqueeze_(0)
    assert tuple(y.shape) == tuple(ty.shape) == (1, 3, 2)
    (y * flow.tensor(ws)).sum().backward()
    (ty * torch.tensor(ws)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())


def test_inplace_views_share_storage_and_refuse_grad_leaf():
    x = flow.zeros(1, 4)
    x.squeeze_()
    x[2] = 7.0  # the same storage as before: a view taken earlier sees the write
    m = flow.zeros(2, 3)
    row = m[0]
    m.t_()
    m[1, 0] = 5.0
    assert row.numpy()[1] == 5.0 and x.numpy()[2] == 7.0
    leaf = flow.ones(1, 3, requires_grad=True)
    for name, args in (("squeeze_", ()), ("unsqueeze_", (0,)), ("t_", ())):
        with pytest.raises(AutogradError, match=name):
            getattr(leaf, name)(*args)
    with flow.no_grad():
        leaf.squeeze_()
    assert tuple(leaf.shape) == (3,) and leaf.is_leaf and leaf.requires_grad
    with pytest.raises(OpError, match="<= 2 dims"):
        flow.ones(2, 3, 4).t_()
    with pytest.raises(OpIndexError):
        flow.ones(3).unsqueeze_(2)


# -- masked_scatter ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_masked_scatter_inplace_matches_torch(torch, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 4))
    mask = rng.random((3, 4)) < 0.5
    src = rng.standard_normal((2, 7))
    f = flow.tensor(x).masked_scatter_(flow.tensor(mask), flow.tensor(src))
    t = torch.tensor(x).masked_scatter_(torch.tensor(mask), torch.tensor(src))
    np.testing.assert_array_equal(f.numpy(), t.numpy())
    row = rng.random(4) < 0.5  # broadcast over the rows
    f = flow.tensor(x).masked_scatter_(flow.tensor(row), flow.tensor(src))
    t = torch.tensor(x).masked_scatter_(torch.tensor(row), torch.tensor(src))
    np.testing.assert_array_equal(f.numpy(), t.numpy())


def test_masked_scatter_out_of_place_broadcasts_both(torch):
    x = np.arange(3.0)
    mask = np.array([[True, False, True], [False, True, True]])
    src = np.arange(10.0, 20.0)
    f = flow.tensor(x).masked_scatter(flow.tensor(mask), flow.tensor(src))
    t = torch.tensor(x).masked_scatter(torch.tensor(mask), torch.tensor(src))
    np.testing.assert_array_equal(f.numpy(), t.numpy())


def test_masked_scatter_gradients_match_torch(torch):
    mask = np.array([[True, False, True], [False, True, False]])
    w = np.arange(1.0, 7.0).reshape(2, 3)
    x, s = flow.ones(2, 3, requires_grad=True), flow.arange(5.0, requires_grad=True)
    y = x * 1
    v = y._version[0]
    y.masked_scatter_(flow.tensor(mask), s)
    assert y._version[0] == v + 1
    (y * flow.tensor(w)).sum().backward()
    tx, ts = torch.ones(2, 3, requires_grad=True), torch.arange(5.0, requires_grad=True)
    ty = tx * 1
    ty.masked_scatter_(torch.tensor(mask), ts)
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(s.grad.numpy(), ts.grad.numpy())


def test_masked_scatter_errors():
    x, mask = flow.zeros(2, 3), flow.tensor([[True, False, True], [False, True, True]])
    with pytest.raises(OpError, match="fewer than the 4 True values"):
        x.masked_scatter_(mask, flow.arange(2.0))
    with pytest.raises(OpTypeError, match="boolean masks"):
        x.masked_scatter_(mask.to(flow.uint8), flow.arange(6.0))
    with pytest.raises(OpTypeError, match="same dtype"):
        x.masked_scatter_(mask, flow.arange(6))
    with pytest.raises(OpTypeError, match="source must be a Tensor"):
        x.masked_scatter_(mask, 1.0)
    with pytest.raises(OpError, match="cannot be broadcast"):
        flow.zeros(3).masked_scatter_(mask, flow.arange(6.0))
    with pytest.raises(AutogradError):
        flow.zeros(3, requires_grad=True).masked_scatter_(flow.ones(3, dtype=flow.bool), flow.arange(3.0))
    np.testing.assert_array_equal(x.numpy(), np.zeros((2, 3)))
    empty = flow.zeros(2).masked_scatter_(flow.zeros(2, dtype=flow.bool), flow.zeros(0))
    np.testing.assert_array_equal(empty.numpy(), [0.0, 0.0])


# -- sum_to_size, storage_offset, ndimension, H --------------------------------------------------------------
@pytest.mark.parametrize("size", [(3, 1), ((1, 3, 1),), (4,), (1,), (2, 1, 4), ((),)])
def test_sum_to_size_matches_torch(torch, size):
    x = np.arange(24.0).reshape(2, 3, 4)
    f, t = flow.tensor(x).sum_to_size(*size), torch.tensor(x).sum_to_size(*size)
    assert tuple(f.shape) == tuple(t.shape)
    np.testing.assert_array_equal(f.numpy(), t.numpy())


def test_sum_to_size_identity_errors_and_grad():
    x = flow.ones(2, 3, requires_grad=True)
    assert x.sum_to_size(2, 3) is x
    for bad in ((5,), (1, 2, 3), (2, 2)):
        with pytest.raises(OpError, match="not expandable"):
            x.sum_to_size(*bad)
    with pytest.raises(TypeError, match="size"):
        x.sum_to_size()
    (x.sum_to_size(1, 3) * flow.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 2.0, 3.0]] * 2)


def test_storage_offset_matches_torch(torch):
    f = flow.arange(24.0).reshape(2, 3, 4)
    t = torch.arange(24.0).reshape(2, 3, 4)
    views = [
        lambda x: x,
        lambda x: x[1],
        lambda x: x[1, 2],
        lambda x: x[:, 1:],
        lambda x: x[1][1:],
        lambda x: x.transpose(0, 2)[1],
        lambda x: x.reshape(6, 4)[2:],
        lambda x: x.flatten()[5:],
        lambda x: x.narrow(2, 1, 2),
        lambda x: x.clone()[1],
        lambda x: x.select(2, 3),
        lambda x: x.diagonal(1, 1, 2),
        lambda x: x[1].detach(),
    ]
    got = [v(f).storage_offset() for v in views]
    want = [v(t).storage_offset() for v in views]
    assert got == want and max(got) > 0


def test_ndimension_and_H(torch):
    assert flow.ones(2, 3, 4).ndimension() == 3 and flow.tensor(1.0).ndimension() == 0
    x = np.arange(6.0).reshape(2, 3)
    f = flow.tensor(x)
    np.testing.assert_array_equal(f.H.numpy(), torch.tensor(x).H.numpy())
    f.H[0, 1] = 100.0  # a view, as in torch
    assert f.numpy()[1, 0] == 100.0
    s = flow.tensor(2.0)
    assert s.H is s
    for shape in ((3,), (2, 3, 4)):
        with pytest.raises(OpError, match="2-d"):
            _ = flow.ones(*shape).H


# -- apply_ / map_ -------------------------------------------------------------------------------------------
def test_apply_and_map_match_torch(torch):
    fn = lambda v: v * 2.7 - 1  # noqa: E731
    for fdt, tdt in ((flow.float32, torch.float32), (flow.int64, torch.int64), (flow.float64, torch.float64)):
        f = flow.arange(6).reshape(2, 3).to(fdt)
        t = torch.arange(6).reshape(2, 3).to(tdt)
        np.testing.assert_array_equal(f.apply_(fn).numpy(), t.apply_(fn).numpy())
    g = lambda a, b: a * 10 + b  # noqa: E731
    f, t = flow.ones(2, 3), torch.ones(2, 3)
    np.testing.assert_array_equal(f.map_(flow.arange(3.0), g).numpy(), t.map_(torch.arange(3.0), g).numpy())
    b = flow.ones(3, dtype=flow.bool).apply_(lambda v: 0)
    assert b.dtype is flow.bool and not b.numpy().any()
    bf = flow.tensor([1.5, 2.0], dtype=flow.bfloat16).apply_(lambda v: v * 2)
    np.testing.assert_array_equal(bf.float().numpy(), [3.0, 4.0])


def test_apply_and_map_write_through_views_and_bump_version():
    base = flow.zeros(2, 3)
    col = base[:, 1]
    col.apply_(lambda v: v + 5)
    np.testing.assert_array_equal(base.numpy(), [[0, 5, 0], [0, 5, 0]])
    assert base._version[0] == 1
    seen = []
    x = flow.arange(3.0)
    x.map_(x, lambda a, b: seen.append((a, b)) or a + b)
    assert seen == [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)] and isinstance(seen[0][0], float)
    np.testing.assert_array_equal(x.numpy(), [0.0, 2.0, 4.0])


def test_apply_and_map_errors():
    with pytest.raises(AutogradError, match="requires grad"):
        flow.ones(3, requires_grad=True).apply_(lambda v: v)
    with pytest.raises(AutogradError, match="requires grad"):
        (flow.ones(3, requires_grad=True) * 2).map_(flow.ones(3), lambda a, b: a)
    with pytest.raises(AutogradError, match="requires grad"):
        flow.ones(3).map_(flow.ones(3, requires_grad=True), lambda a, b: a)
    x = flow.ones(3)
    for bad in ("x", None, 1j):
        with pytest.raises(OpTypeError, match="real number"):
            x.apply_(lambda v, bad=bad: bad)
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.0, 1.0])
    assert x._version[0] == 0
    with pytest.raises(OpError, match="does not fit"):
        flow.ones(2, dtype=flow.int8).apply_(lambda v: 300)
    with pytest.raises(OpTypeError, match="dtype"):
        flow.ones(3).map_(flow.arange(3), lambda a, b: a)
    with pytest.raises(OpError, match="cannot be broadcast"):
        flow.ones(3).map_(flow.ones(2, 3), lambda a, b: a)
    with pytest.raises(OpTypeError, match="must be a Tensor"):
        flow.ones(3).map_([1.0, 2.0, 3.0], lambda a, b: a)
