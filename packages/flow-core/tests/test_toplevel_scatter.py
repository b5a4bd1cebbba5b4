"""scatter_reduce, slice/select/diagonal_scatter, cummax/cummin, as_strided and quantile/nanquantile against
torch, value for value and gradient for gradient (float32 and float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
from flow.errors import OpError, OpIndexError, OpTypeError

torch = pytest.importorskip("torch")

from _toplevel_parity import check  # noqa: E402

R = np.random.default_rng(11)


def _u(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, size=shape)


# -- scatter_reduce ---------------------------------------------------------------------------------
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_values_and_gradients(reduce, include_self):
    x, src = _u(4, 5), _u(6, 5)
    idx = R.integers(0, 4, size=(6, 5))
    idx[:, 4] = 1  # every src row of column 4 goes to one element; rows 0, 2, 3 of that column get nothing
    check(
        lambda a, i, s: flow.scatter_reduce(a, 0, i, s, reduce, include_self=include_self),
        lambda a, i, s: torch.scatter_reduce(a, 0, i, s, reduce, include_self=include_self),
        x,
        idx,
        src,
        rtol=1e-4,
    )
    idx1 = R.integers(0, 5, size=(4, 3))
    check(
        lambda a, i, s: a.scatter_reduce(1, i, s, reduce, include_self=include_self),
        lambda a, i, s: a.scatter_reduce(1, i, s, reduce, include_self=include_self),
        x,
        idx1,
        _u(4, 3),
        rtol=1e-4,
    )


def test_scatter_reduce_prod_gradient_with_zeros_and_ties_of_amax():
    x = np.array([[1.0, 0.0, 2.0], [3.0, 1.5, 0.0]])
    src = np.array([[0.0, 2.0, 0.0], [0.0, 0.0, 1.0], [2.0, 1.0, 3.0]])
    idx = np.array([[0, 1, 0], [0, 1, 1], [1, 0, 1]])
    for include_self in (True, False):
        check(
            lambda a, i, s, inc=include_self: flow.scatter_reduce(a, 0, i, s, "prod", include_self=inc),
            lambda a, i, s, inc=include_self: torch.scatter_reduce(a, 0, i, s, "prod", include_self=inc),
            x,
            idx,
            src,
        )
    ties = np.array([[2.0, 1.0, 2.0], [2.0, 2.0, 0.5], [2.0, 2.0, 2.0]])
    check(
        lambda a, i, s: flow.scatter_reduce(a, 0, i, s, "amax"),
        lambda a, i, s: torch.scatter_reduce(a, 0, i, s, "amax"),
        np.full((2, 3), 2.0),
        idx,
        ties,
    )


def test_scatter_reduce_integers_and_in_place():
    x, src = R.integers(-5, 9, size=(3, 4)), R.integers(-5, 9, size=(5, 4))
    idx = R.integers(0, 3, size=(5, 4))
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            check(
                lambda a, i, s, r=reduce, inc=include_self: flow.scatter_reduce(a, 0, i, s, r, include_self=inc),
                lambda a, i, s, r=reduce, inc=include_self: torch.scatter_reduce(a, 0, i, s, r, include_self=inc),
                x,
                idx,
                src,
                grad=False,
            )
    x0, s0 = _u(3, 4), _u(5, 4)
    for reduce, include_self in (("amin", True), ("mean", False)):
        f, t = flow.tensor(x0), torch.tensor(x0)
        assert f.scatter_reduce_(0, flow.tensor(idx), flow.tensor(s0), reduce, include_self=include_self) is f
        t.scatter_reduce_(0, torch.tensor(idx), torch.tensor(s0), reduce, include_self=include_self)
        np.testing.assert_allclose(f.numpy(), t.numpy(), rtol=1e-12)


def test_scatter_reduce_errors():
    x, idx, src = flow.zeros(3, 4), flow.zeros(2, 4, dtype=flow.int64), flow.ones(2, 4)
    with pytest.raises(OpError, match="must be one of"):
        flow.scatter_reduce(x, 0, idx, src, "max")
    with pytest.raises(OpIndexError, match="index 3 is out of range for dim 0 with size 3"):
        flow.scatter_reduce(x, 0, idx + 3, src, "sum")
    with pytest.raises(OpTypeError, match="'src' must have the dtype"):
        flow.scatter_reduce(x, 0, idx, src.double(), "sum")
    with pytest.raises(OpTypeError, match="integer tensor"):
        flow.scatter_reduce(x, 0, src, src, "sum")
    with pytest.raises(OpIndexError, match="out of range"):
        flow.scatter_reduce(x, 2, idx, src, "sum")


# -- slice/select/diagonal scatter ------------------------------------------------------------------
def test_slice_scatter():
    x = _u(5, 6)
    check(lambda a, s: flow.slice_scatter(a, s), lambda a, s: torch.slice_scatter(a, s), x, _u(5, 6))
    check(
        lambda a, s: flow.slice_scatter(a, s, 1, 1, 6, 2),
        lambda a, s: torch.slice_scatter(a, s, 1, 1, 6, 2),
        x,
        _u(5, 3),
    )
    check(
        lambda a, s: a.slice_scatter(s, 0, -3),
        lambda a, s: a.slice_scatter(s, 0, -3),
        x,
        _u(3, 6),
    )
    with pytest.raises(OpError, match=r"shape of the embedded region \(2, 6\)"):
        flow.slice_scatter(flow.tensor(x), flow.ones(3, 6, dtype=flow.float64), 0, 0, 2)
    with pytest.raises(OpError, match="'step' must be a positive int"):
        flow.slice_scatter(flow.tensor(x), flow.tensor(x), 0, step=0)


def test_select_and_diagonal_scatter():
    x = _u(3, 4, 5)
    for dim, index in ((0, 1), (1, -1), (2, 4)):
        shape = [3, 4, 5]
        shape.pop(dim)
        check(
            lambda a, s, d=dim, i=index: flow.select_scatter(a, s, d, i),
            lambda a, s, d=dim, i=index: torch.select_scatter(a, s, d, i),
            x,
            _u(*shape),
        )
    for offset, d1, d2 in ((0, 0, 1), (1, 1, 2), (-2, 2, 0), (0, -1, -2)):
        shape = torch.zeros(3, 4, 5).diagonal(offset, d1, d2).shape
        check(
            lambda a, s, o=offset, p=d1, q=d2: flow.diagonal_scatter(a, s, o, p, q),
            lambda a, s, o=offset, p=d1, q=d2: torch.diagonal_scatter(a, s, o, p, q),
            x,
            _u(*shape),
        )
    inf = np.full((2, 2), math.inf)
    check(lambda a, s: a.diagonal_scatter(s), lambda a, s: a.diagonal_scatter(s), inf, np.ones(2), grad=False)
    check(lambda a, s: a.select_scatter(s, 0, 0), lambda a, s: a.select_scatter(s, 0, 0), inf, np.ones(2), grad=False)
    with pytest.raises(OpIndexError, match="index 3 is out of range for dim 0 with size 3"):
        flow.select_scatter(flow.tensor(x), flow.zeros(4, 5, dtype=flow.float64), 0, 3)
    with pytest.raises(OpError, match=r"diagonal's shape \(5, 3\)"):
        flow.diagonal_scatter(flow.tensor(x), flow.zeros(3, dtype=flow.float64))
    with pytest.raises(OpError, match="dim1 and dim2 must differ"):
        flow.diagonal_scatter(flow.tensor(x), flow.zeros(3, dtype=flow.float64), 0, 1, 1)


# -- cummax, cummin --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_values_indices_and_gradients(name):
    x = _u(3, 6, 4)
    for dim in (0, 1, -1):
        check(lambda a, d=dim: getattr(flow, name)(a, d), lambda a, d=dim: getattr(torch, name)(a, d), x)
    ties = R.integers(0, 3, size=(4, 7)).astype(np.float64)
    check(lambda a: getattr(flow, name)(a, 1), lambda a: getattr(torch, name)(a, 1), ties)
    nan = np.array([[1.0, np.nan, 3.0, -1.0], [2.0, 1.0, np.nan, np.nan]])
    check(lambda a: getattr(a, name)(1), lambda a: getattr(a, name)(1), nan, grad=False)
    ints = R.integers(-3, 3, size=(3, 5))
    check(lambda a: getattr(flow, name)(a, 0), lambda a: getattr(torch, name)(a, 0), ints, grad=False)
    check(lambda a: getattr(flow, name)(a, 0), lambda a: getattr(torch, name)(a, 0), np.array(1.5))
    out = getattr(flow, name)(flow.tensor(x), 1)
    assert out.values is out[0] and out.indices.dtype is flow.int64
    with pytest.raises(OpIndexError, match="out of range"):
        getattr(flow, name)(flow.tensor(x), 3)


# -- as_strided ------------------------------------------------------------------------------------
def test_as_strided_values_gradients_and_overlap():
    x = _u(3, 4)
    for size, stride, off in (((2, 2), (1, 2), 0), ((3, 3), (1, 1), 2), ((4, 3), (1, 4), 0), ((2, 3, 2), (4, 1, 2), 1)):
        check(
            lambda a, s=size, t=stride, o=off: flow.as_strided(a, s, t, o),
            lambda a, s=size, t=stride, o=off: torch.as_strided(a, s, t, o),
            x,
        )
    check(lambda a: a.as_strided((2, 2), (2, 1)), lambda a: a.as_strided((2, 2), (2, 1)), x)


def test_as_strided_is_a_view_of_the_storage():
    base = flow.arange(12.0)
    v = base.as_strided((3, 2), (4, 1), 1)
    assert v._base is base
    v[0, 0] = 100.0
    assert base[1].item() == 100.0
    # a view's default offset is its own storage offset, and strides count in the storage
    tb = torch.arange(12.0)
    f_sub, t_sub = base[2:], tb[2:]
    tb[1] = 100.0
    np.testing.assert_array_equal(f_sub.as_strided((2, 2), (3, 1)).numpy(), t_sub.as_strided((2, 2), (3, 1)).numpy())


def test_as_strided_errors():
    x = flow.zeros(3, 4)
    with pytest.raises(OpIndexError, match="reach element 15 of a storage of 12 elements"):
        flow.as_strided(x, (4, 4), (4, 1))
    with pytest.raises(OpError, match="same length"):
        flow.as_strided(x, (2, 2), (1,))
    with pytest.raises(OpError, match="non-negative"):
        flow.as_strided(x, (2,), (-1,))
    with pytest.raises(OpTypeError, match="'size' must be a tuple of ints"):
        flow.as_strided(x, 3, (1,))


# -- quantile, nanquantile -------------------------------------------------------------------------
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_and_nanquantile(interpolation):
    x = _u(3, 5, 4)
    q = np.array([0.0, 0.25, 0.5, 0.9, 1.0])
    for fn in ("quantile", "nanquantile"):
        for dim, keepdim in ((None, False), (None, True), (1, False), (-1, True), (0, False)):
            check(
                lambda a, b, d=dim, k=keepdim, f=fn: getattr(flow, f)(a, b, d, k, interpolation=interpolation),
                lambda a, b, d=dim, k=keepdim, f=fn: getattr(torch, f)(a, b, d, k, interpolation=interpolation),
                x,
                q,
            )
        check(
            lambda a, f=fn: getattr(a, f)(0.3, 1, interpolation=interpolation),
            lambda a, f=fn: getattr(a, f)(0.3, 1, interpolation=interpolation),
            x,
        )
    nan = x.copy()
    nan[0, 1, :] = np.nan
    nan[1, 2, 1] = np.nan
    for fn in ("quantile", "nanquantile"):
        check(
            lambda a, f=fn: getattr(flow, f)(a, 0.4, -1, interpolation=interpolation),
            lambda a, f=fn: getattr(torch, f)(a, 0.4, -1, interpolation=interpolation),
            nan,
            grad=False,
        )


def test_quantile_errors():
    x = flow.ones(3, 4)
    with pytest.raises(OpError, match=r"'q' values must lie in \[0, 1\]"):
        flow.quantile(x, 1.5)
    with pytest.raises(OpError, match="1-d tensor"):
        flow.quantile(x, flow.ones(2, 2))
    with pytest.raises(OpError, match="'interpolation' must be one of"):
        flow.quantile(x, 0.5, interpolation="cubic")
    with pytest.raises(OpTypeError, match="floating-point"):
        flow.nanquantile(flow.tensor([1, 2]), 0.5)
    with pytest.raises(OpError, match="non-empty"):
        flow.quantile(flow.ones(0), 0.5)
    with pytest.raises(OpIndexError, match="out of range"):
        flow.quantile(x, 0.5, dim=2)
