"""Reductions, extremes, statistics and scans (flow.ops.reduction, reduction_minmax, reduction_stats).

Values are compared with NumPy reference formulas; where PyTorch is importable, values and
gradients are also compared with it. Every op of these modules passes ``flow.testing.opcheck``.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

import flow
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.testing import gradcheck, opcheck

OPS = [
    "sum",
    "mean",
    "prod",
    "all",
    "any",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "max_dim",
    "min_dim",
    "select_along_dim",
    "select_along_dim_backward",
    "var",
    "std",
    "logsumexp",
    "norm",
    "cumsum",
    "cumprod",
]


def rand(shape, seed=0, low=-2.0, high=2.0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(dtype)


def T(a, requires_grad=False, dtype=None):
    t = flow.tensor(np.asarray(a), dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t


def N(t):
    return np.asarray(t.detach().numpy())


def close(actual, expected, rtol=1e-7, atol=1e-9):
    np.testing.assert_allclose(
        N(actual) if isinstance(actual, flow.Tensor) else actual, expected, rtol=rtol, atol=atol, equal_nan=True
    )


def grad_of(fn, a, seed=1):
    """d sum(fn(x) * w) / dx for a random projection w, as a NumPy array."""
    x = T(a, requires_grad=True)
    out = fn(x)
    w = flow.tensor(np.random.default_rng(seed).standard_normal(tuple(out.shape)))
    (out * w).sum().backward()
    return N(x.grad), N(w)


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


# ---------------------------------------------------------------------------------------------
# opcheck: meta vs kernel, reference kernel, gradient vs finite differences
@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    report = opcheck(name)
    assert report["samples"] > 0


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.prod(1),
        lambda x: x.amax(1),
        lambda x: flow.max(x, 0).values,
        lambda x: x.var(1),
        lambda x: x.std(0),
        lambda x: x.logsumexp(1),
        lambda x: x.norm(),
        lambda x: x.norm(3, dim=1),
        lambda x: x.cumsum(1),
        lambda x: x.cumprod(1),
        lambda x: x.mean((0, 1)),
    ],
)
def test_second_order(fn):
    check_second_order(fn, rand((3, 4), seed=3, low=0.5, high=1.5))


def check_second_order(fn, a, eps=1e-6):
    """Hessian-vector product by double backward vs central differences of the first gradient.

    (flow.testing.gradgradcheck cannot be used: its finite-difference pass calls the first-gradient
    function under no_grad on inputs that do not require grad.)
    """
    rng = np.random.default_rng(4)
    w = flow.tensor(rng.standard_normal(tuple(fn(T(a)).shape)))
    u = rng.standard_normal(a.shape)

    def first(av, create):
        x = T(av, requires_grad=True)
        (g,) = flow.autograd.grad((fn(x) * w).sum(), x, create_graph=create)
        return x, g

    x, g = first(a, True)
    if g.requires_grad:
        (hu,) = flow.autograd.grad((g * flow.tensor(u)).sum(), x, allow_unused=True)
        hu = np.zeros_like(a) if hu is None else N(hu)
    else:  # the gradient does not depend on x
        hu = np.zeros_like(a)
    num = np.zeros_like(a)
    for j in range(a.size):
        d = np.zeros(a.size)
        d[j] = eps
        d = d.reshape(a.shape)
        num.flat[j] = (float((N(first(a + d, False)[1]) * u).sum()) - float((N(first(a - d, False)[1]) * u).sum())) / (
            2 * eps
        )
    np.testing.assert_allclose(hu, num, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# sum mean prod
DIMS = [None, 0, 1, -1, (0, 2), (2, 0, 1)]


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin", "all", "any"])
def test_reductions_match_numpy(name, dim, keepdim):
    a = rand((2, 3, 4), seed=5)
    ref = {
        "sum": np.sum,
        "mean": np.mean,
        "prod": np.prod,
        "amax": np.max,
        "amin": np.min,
        "all": np.all,
        "any": np.any,
    }[name]
    axis = dim if not isinstance(dim, int) else (dim,)
    out = getattr(flow, name)(T(a), dim, keepdim) if dim is not None else getattr(flow, name)(T(a), keepdim=keepdim)
    close(out, ref(a, axis=axis, keepdims=keepdim))
    method = getattr(T(a), name)(dim, keepdim) if dim is not None else getattr(T(a), name)(keepdim=keepdim)
    close(method, ref(a, axis=axis, keepdims=keepdim))


def test_int_and_bool_dtypes():
    i = T(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))
    assert flow.sum(i).dtype is flow.int64 and flow.sum(i).item() == 21
    assert flow.prod(i, 1).dtype is flow.int64 and flow.prod(i, 1).tolist() == [6, 120]
    b = T(np.array([True, False, True]))
    assert flow.sum(b).dtype is flow.int64 and flow.sum(b).item() == 2
    assert flow.prod(b).item() == 0
    assert flow.sum(i, dtype=flow.float64).dtype is flow.float64
    assert flow.mean(i, dtype=flow.float32).item() == pytest.approx(3.5)
    assert flow.amax(i).dtype is flow.int32 and flow.amax(i).item() == 6
    assert flow.max(i, 1).values.dtype is flow.int32
    h = T(np.ones(3000, dtype=np.float16))
    assert flow.sum(h).dtype is flow.float16 and flow.sum(h).item() == 3000  # float32 accumulation


@pytest.mark.parametrize("name", ["mean", "var", "std", "nanmean"])
def test_int_input_needs_float(name):
    with pytest.raises(OpTypeError, match=name + r".*(floating|float)"):
        getattr(flow, name)(T(np.array([1, 2, 3])))


def test_zero_dim_and_empty():
    s = T(np.array(2.5))
    for name in ("sum", "mean", "prod", "amax", "amin"):
        assert getattr(flow, name)(s, 0).shape == ()
        assert getattr(flow, name)(s, -1).item() == 2.5
    assert flow.max(s, 0).indices.item() == 0
    e = T(np.zeros((3, 0)))
    assert flow.sum(e, 1).tolist() == [0.0] * 3
    assert flow.prod(e, 1).tolist() == [1.0] * 3
    assert np.isnan(N(flow.mean(e, 1))).all()
    assert flow.all(e).item() is True and flow.any(e).item() is False
    assert flow.sum(T(np.ones((2, 3))), ()).item() == 6  # dim=() reduces every dim, as PyTorch


def test_empty_extremes_raise():
    e = T(np.zeros((3, 0)))
    with pytest.raises(OpError, match="max.*empty"):
        flow.max(e)
    with pytest.raises(OpIndexError, match="max.*dim 1 of size 0"):
        flow.max(e, 1)
    with pytest.raises(OpError, match="amin"):
        flow.amin(e)
    with pytest.raises(OpIndexError, match="argmax"):
        flow.argmax(e, 1)
    assert flow.amax(e, 0).shape == (0,)  # reducing a non-empty dim is fine


@pytest.mark.parametrize(
    "name", ["sum", "mean", "prod", "amax", "all", "argmax", "logsumexp", "var", "norm", "cumsum", "cumprod"]
)
def test_dim_out_of_range(name):
    x = T(rand((2, 3)))
    with pytest.raises(OpIndexError, match=rf"{name}: 'dim'=5 is out of range for a 2-d tensor"):
        getattr(flow, name)(x, dim=5)


def test_bad_arguments():
    with pytest.raises(OpTypeError, match="sum: 'input' must be a Tensor, got list"):
        flow.sum([1, 2])
    with pytest.raises(OpTypeError, match="sum: 'dim' must be an int or a tuple of ints"):
        flow.sum(T(rand(3)), dim="a")
    with pytest.raises(OpTypeError, match="max: 'dim' must be an int"):
        flow.max(T(rand(3)), dim=(0,))
    with pytest.raises(OpTypeError, match="cumsum: 'dim' must be an int"):
        flow.cumsum(T(rand(3)), None)
    with pytest.raises(OpError, match="dim.*twice"):
        flow.sum(T(rand((2, 3))), (1, -1))
    with pytest.raises(OpError, match="norm: 'p'='nuc'"):
        flow.norm(T(rand((2, 3))), "nuc")
    with pytest.raises(OpTypeError, match="norm.*floating"):
        flow.norm(T(np.array([1, 2])))
    with pytest.raises(OpError, match="only one of 'unbiased' and 'correction'"):
        flow.var(T(rand(3)), unbiased=True, correction=0)


def test_prod_grad_with_zeros():
    a = np.array([[0.5, 0.0, -1.5, 2.0], [1.2, -0.7, 0.9, 1.1], [0.0, 0.0, 1.3, -2.0]])
    g, w = grad_of(lambda x: flow.prod(x, 1), a)
    ref = np.zeros_like(a)
    for r in range(3):
        for c in range(4):
            ref[r, c] = w[r] * np.prod(np.delete(a[r], c))
    close(g, ref)
    g, _ = grad_of(lambda x: flow.prod(x), a)  # more than one zero in the whole tensor: all zero
    close(g, np.zeros_like(a))


def test_nansum_nanmean():
    a = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, 2.0]])
    close(flow.nansum(T(a)), np.nansum(a))
    close(flow.nansum(T(a), 1), np.nansum(a, 1))
    close(flow.nanmean(T(a), 1), np.nanmean(a, 1))
    g, w = grad_of(lambda x: flow.nansum(x, 1), a)
    close(g, np.where(np.isnan(a), 0.0, w[:, None]))
    assert flow.nansum(T(np.array([1, 2]))).item() == 3


def test_count_nonzero():
    a = np.array([[1, 0, 2], [0, 0, 3]])
    assert flow.count_nonzero(T(a)).item() == 3
    assert flow.count_nonzero(T(a), 0).tolist() == [1, 0, 2]
    assert T(a).count_nonzero((0, 1)).dtype is flow.int64


def test_all_any():
    a = np.array([[1.0, 0.0], [2.0, 3.0]])
    assert flow.all(T(a)).item() is False and flow.any(T(a)).item() is True
    assert flow.all(T(a), 1).tolist() == [False, True]
    assert flow.any(T(a), 0, keepdim=True).shape == (1, 2)
    u = flow.all(T(np.array([1, 2], dtype=np.uint8)))
    assert u.dtype is flow.uint8 and u.item() == 1
    assert flow.all(T(np.array([np.nan]))).item() is True


# ---------------------------------------------------------------------------------------------
# max min amax amin argmax argmin aminmax
def test_max_min_forms():
    a = np.array([[1.0, 5.0, 2.0], [7.0, -1.0, 7.0]])
    assert flow.max(T(a)).item() == 7.0 and flow.min(T(a)).item() == -1.0
    r = flow.max(T(a), 1)
    assert r.values.tolist() == [5.0, 7.0] and r.indices.tolist() == [1, 0]  # first index on ties
    v, i = T(a).min(dim=0, keepdim=True)
    assert v.tolist() == [[1.0, -1.0, 2.0]] and i.tolist() == [[0, 1, 0]]
    assert r[0] is r.values and len(r) == 2
    assert "return_types.max(" in repr(r) and "values=" in repr(r) and "indices=" in repr(r)
    again = pickle.loads(pickle.dumps(r))
    assert again.values.tolist() == r.values.tolist()
    assert flow.max(T(a), T(np.full((2, 3), 3.0))).tolist() == [[3.0, 5.0, 3.0], [7.0, 3.0, 7.0]]
    mm = flow.aminmax(T(a), dim=1)
    assert mm.min.tolist() == [1.0, -1.0] and mm.max.tolist() == [5.0, 7.0]
    assert T(a).aminmax().max.item() == 7.0


def test_max_nan_propagates():
    a = np.array([1.0, np.nan, 0.0])
    assert np.isnan(flow.max(T(a)).item()) and np.isnan(flow.amin(T(a)).item())
    r = flow.max(T(a), 0)
    assert np.isnan(r.values.item()) and r.indices.item() == 1
    assert flow.argmin(T(a)).item() == 1


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(dim, keepdim):
    a = rand((3, 4, 5), seed=7)
    for name, ref in (("argmax", np.argmax), ("argmin", np.argmin)):
        out = getattr(flow, name)(T(a), dim, keepdim)
        assert out.dtype is flow.int64
        expect = ref(a, axis=dim, keepdims=keepdim)
        np.testing.assert_array_equal(N(out), expect)


def test_max_grads():
    a = np.array([[1.0, 5.0, 2.0, 5.0], [7.0, -1.0, 3.0, 0.0]])
    g, w = grad_of(lambda x: flow.max(x), a)  # full max: ties share evenly
    close(g, np.where(a == 7.0, float(w), 0.0))
    g, w = grad_of(lambda x: flow.max(x, 1).values, a)  # with dim: to the returned index
    ref = np.zeros_like(a)
    ref[0, 1], ref[1, 0] = w[0], w[1]
    close(g, ref)
    g, w = grad_of(lambda x: flow.amax(x, 1), a)
    ref = np.zeros_like(a)
    ref[0, 1] = ref[0, 3] = w[0] / 2
    ref[1, 0] = w[1]
    close(g, ref)
    g, w = grad_of(lambda x: flow.min(x, 0, keepdim=True).values, a)
    ref = np.zeros_like(a)
    for c, r in enumerate(np.argmin(a, 0)):
        ref[r, c] = w[0, c]
    close(g, ref)


# ---------------------------------------------------------------------------------------------
# var std logsumexp norm
@pytest.mark.parametrize("dim", [None, 0, (0, 2), -1])
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_std(dim, correction):
    a = rand((3, 4, 5), seed=8)
    axis = dim if not isinstance(dim, int) else (dim,)
    close(flow.var(T(a), dim, correction=correction), np.var(a, axis=axis, ddof=correction))
    close(T(a).std(dim, correction=correction, keepdim=True), np.std(a, axis=axis, ddof=correction, keepdims=True))


def test_var_forms():
    a = rand((3, 4), seed=9)
    close(flow.var(T(a)), np.var(a, ddof=1))
    close(flow.var(T(a), unbiased=False), np.var(a))
    close(flow.var(T(a), False), np.var(a))  # legacy var(input, unbiased)
    close(flow.std(T(a), 1, False, True), np.std(a, 1, keepdims=True))
    v, m = flow.var_mean(T(a), 1)
    close(v, np.var(a, 1, ddof=1))
    close(m, np.mean(a, 1))
    s, m = flow.std_mean(T(a), correction=0)
    close(s, np.std(a))
    close(m, np.mean(a))
    with np.errstate(all="ignore"):
        assert np.isnan(flow.var(T(np.array([3.0]))).item())
        assert flow.var(T(np.array([1.0, 2.0])), correction=3).item() == math.inf


def test_var_std_grads():
    a = rand((3, 4), seed=10)
    g, w = grad_of(lambda x: flow.var(x, 1), a)
    close(g, w[:, None] * 2 * (a - a.mean(1, keepdims=True)) / 3)
    g, w = grad_of(lambda x: flow.std(x, 1, correction=0), a)
    sd = a.std(1, keepdims=True)
    close(g, w[:, None] * (a - a.mean(1, keepdims=True)) / (4 * sd))
    g, _ = grad_of(lambda x: flow.std(x), np.ones((2, 2)))  # zero std: zero gradient (as PyTorch)
    close(g, np.zeros((2, 2)))


def test_logsumexp():
    a = rand((3, 4), seed=11, low=-5, high=5)
    close(flow.logsumexp(T(a), 1), np.log(np.exp(a).sum(1)))
    close(flow.logsumexp(T(a), (0, 1), keepdim=True), np.log(np.exp(a).sum(keepdims=True)))
    big = np.array([[1000.0, 1000.0], [-1000.0, -1001.0], [-np.inf, -np.inf], [np.inf, 1.0]])
    out = N(flow.logsumexp(T(big), 1))
    close(out[:2], [1000.0 + math.log(2), -1000.0 + math.log1p(math.exp(-1))])
    assert out[2] == -np.inf and out[3] == np.inf
    i = flow.logsumexp(T(np.array([1, 2])), 0)
    assert i.dtype is flow.get_default_dtype()
    close(i, math.log(math.e + math.e**2), rtol=1e-6)
    g, w = grad_of(lambda x: flow.logsumexp(x, 1), a)
    sm = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    close(g, w[:, None] * sm)
    assert flow.logsumexp(T(np.zeros((2, 0))), 1).tolist() == [-math.inf, -math.inf]


@pytest.mark.parametrize("p", [2, 1, 3, 0.5, math.inf, -math.inf, 0, "fro"])
@pytest.mark.parametrize("dim", [None, 1, (0, 1)])
def test_norm(p, dim):
    a = rand((3, 4), seed=12)
    axis = dim if not isinstance(dim, int) else (dim,)
    q = 2 if p == "fro" else p
    x = np.abs(a)
    if q == math.inf:
        ref = x.max(axis=axis)
    elif q == -math.inf:
        ref = x.min(axis=axis)
    elif q == 0:
        ref = (x != 0).sum(axis=axis).astype(float)
    else:
        ref = (x**q).sum(axis=axis) ** (1 / q)
    close(flow.norm(T(a), p, dim), ref)
    close(T(a).norm(p, dim, keepdim=True), np.reshape(ref, np.sum(a, axis=axis, keepdims=True).shape))


def test_norm_grads():
    a = rand((3, 4), seed=13)
    g, w = grad_of(lambda x: flow.norm(x, dim=1), a)
    close(g, w[:, None] * a / np.linalg.norm(a, axis=1, keepdims=True))
    g, w = grad_of(lambda x: flow.norm(x, 1), a)
    close(g, float(w) * np.sign(a))
    tie = np.array([1.0, -3.0, 3.0, 2.0])
    g, w = grad_of(lambda x: flow.norm(x, math.inf), tie)
    close(g, float(w) * np.array([0.0, -0.5, 0.5, 0.0]))
    g, _ = grad_of(lambda x: flow.norm(x), np.zeros(3))  # zero norm: zero gradient, not NaN
    close(g, np.zeros(3))
    g, w = grad_of(lambda x: flow.norm(x, 0.5), np.array([0.0, 1.0]))
    close(g, [0.0, float(w)])


# ---------------------------------------------------------------------------------------------
# cumsum cumprod
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_cumprod(dim):
    a = rand((3, 4, 2), seed=14)
    close(flow.cumsum(T(a), dim), np.cumsum(a, dim))
    close(T(a).cumprod(dim), np.cumprod(a, dim))
    i = T(np.array([[1, 2], [3, 4]], dtype=np.int32))
    assert flow.cumsum(i, dim % 2).dtype is flow.int64 and flow.cumprod(i, 0).tolist() == [[1, 2], [3, 8]]
    assert flow.cumsum(T(np.array([True, True])), 0).tolist() == [1, 2]
    assert flow.cumsum(i, 1, dtype=flow.float64).dtype is flow.float64
    assert flow.cumsum(T(np.array(3.0)), 0).item() == 3.0


def test_cumsum_cumprod_grads():
    a = rand((3, 5), seed=15)
    g, w = grad_of(lambda x: flow.cumsum(x, 1), a)
    close(g, np.flip(np.cumsum(np.flip(w, 1), 1), 1))
    a = np.array([[0.5, 0.0, 1.5, -2.0, 0.7], [1.2, -0.7, 0.9, 1.1, 0.0], [0.0, 1.3, 0.0, 0.8, 1.4]])
    g, w = grad_of(lambda x: flow.cumprod(x, 1), a)
    ref = np.zeros_like(a)
    for r in range(3):
        for i in range(5):
            for j in range(i, 5):
                ref[r, i] += w[r, j] * np.prod(np.delete(a[r, : j + 1], i))
    close(g, ref)


# ---------------------------------------------------------------------------------------------
# against PyTorch (values and gradients)
TORCH_CASES = [
    ("sum", lambda m, x: m.sum(x, 1)),
    ("mean", lambda m, x: m.mean(x, (0, 1), keepdim=True)),
    ("prod", lambda m, x: m.prod(x, 1)),
    ("prod0", lambda m, x: m.prod(x * (x > -1.2), 0)),  # zeros in the product
    ("amax", lambda m, x: m.amax(x, 1)),
    ("amin", lambda m, x: m.amin(x, (0, 1))),
    ("max", lambda m, x: m.max(x)),
    ("max_dim", lambda m, x: m.max(x, 1).values),
    ("min_dim", lambda m, x: m.min(x, 0, keepdim=True).values),
    ("var", lambda m, x: m.var(x, 1)),
    ("var_c0", lambda m, x: m.var(x, (0, 1), correction=0)),
    ("var_unbiased", lambda m, x: m.var(x, 0, unbiased=False, keepdim=True)),
    ("std", lambda m, x: m.std(x, 1)),
    ("logsumexp", lambda m, x: m.logsumexp(x, 1)),
    ("norm", lambda m, x: m.norm(x)),
    ("norm_p3", lambda m, x: m.norm(x, 3, 1)),
    ("norm_p1", lambda m, x: m.norm(x, 1, 0)),
    ("norm_inf", lambda m, x: m.norm(x, float("inf"), 1)),
    ("norm_fro", lambda m, x: m.norm(x, "fro", (0, 1))),
    ("cumsum", lambda m, x: m.cumsum(x, 1)),
    ("cumprod", lambda m, x: m.cumprod(x, 1)),
    ("cumprod0", lambda m, x: m.cumprod(x * (x > -1.2), 1)),  # zeros in the scan
    ("nansum", lambda m, x: m.nansum(x, 0)),
]


@pytest.mark.parametrize("name,fn", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_against_torch(torch, name, fn):
    a = rand((4, 5), seed=16)
    a[0, 1] = -1.5  # below the zeroing threshold: puts a zero in the zero cases
    a[2, 3] = -1.9
    x = T(a, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    out, tout = fn(flow, x), fn(torch, tx)
    close(out, tout.detach().numpy(), rtol=1e-10)
    w = np.random.default_rng(0).standard_normal(tuple(tout.shape))
    (out * flow.tensor(w)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    close(x.grad, tx.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_integer_results_against_torch(torch):
    a = np.random.default_rng(17).integers(-3, 4, size=(4, 6))
    for fn in (
        lambda m, x: m.argmax(x, 1),
        lambda m, x: m.argmin(x),
        lambda m, x: m.max(x, 0).indices,
        lambda m, x: m.sum(x, 1),
        lambda m, x: m.prod(x, 0),
        lambda m, x: m.cumsum(x, 1),
        lambda m, x: m.count_nonzero(x, 0),
        lambda m, x: m.all(x, 1),
        lambda m, x: m.any(x, 0),
    ):
        out, tout = fn(flow, T(a)), fn(torch, torch.tensor(a))
        np.testing.assert_array_equal(N(out), tout.numpy())
        assert str(out.dtype).split(".")[-1] == str(tout.dtype).split(".")[-1]


def test_gradcheck_composites():
    x = T(rand((3, 4), seed=18), requires_grad=True)
    assert gradcheck(lambda t: flow.aminmax(t, dim=1).max, [x])
    assert gradcheck(lambda t: flow.nanmean(t, 0), [x])
    assert gradcheck(lambda t: flow.std_mean(t, 1)[0], [x])
