"""Making tensors: flow.tensor, the factories, *_like, random sampling, seeds and generators."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import OpError, OpTypeError

# -- flow.tensor -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, dtype",
    [
        ([1, 2], flow.int64),
        ([1.0, 2], flow.float32),
        ([True, False], flow.bool),
        (3, flow.int64),
        (2.5, flow.float32),
        ([[1, 2], [3, 4]], flow.int64),
        ([], flow.float32),
        (np.float64(1.0), flow.float64),
        (np.array([1, 2], dtype=np.int16), flow.int16),
        ([np.int32(1), 2], flow.int64),
    ],
)
def test_tensor_infers_dtypes_like_pytorch(data, dtype):
    assert flow.tensor(data).dtype is dtype


def test_tensor_copies_its_data():
    a = np.ones(3, dtype=np.float32)
    t = flow.tensor(a)
    a[0] = 5
    assert t.tolist() == [1.0, 1.0, 1.0]
    u = flow.tensor(t)
    u.add_(1)
    assert t.tolist() == [1.0, 1.0, 1.0]
    assert flow.tensor([flow.tensor(1.0), flow.tensor(2.0)]).tolist() == [1.0, 2.0]


def test_tensor_options():
    t = flow.tensor([1, 2], dtype=flow.float64, requires_grad=True)
    assert t.dtype is flow.float64 and t.requires_grad and t.is_leaf
    assert flow.tensor([1.5], dtype="int32").tolist() == [1]


def test_tensor_errors():
    with pytest.raises(OpError, match="inconsistent|could not build"):
        flow.tensor([[1, 2], [3]])
    assert flow.tensor([1j]).dtype is flow.complex64  # complex data makes a complex tensor (tests/test_complex.py)
    with pytest.raises(OpTypeError, match="complex data cannot be stored as the real dtype"):
        flow.tensor([1j], dtype=flow.float32)
    with pytest.raises(OpTypeError, match="element of type str"):
        flow.tensor(["a"])


def test_as_tensor_avoids_copies():
    t = flow.ones(2)
    assert flow.as_tensor(t) is t
    assert flow.as_tensor(t, dtype=flow.float64).dtype is flow.float64
    a = np.zeros(2)
    assert np.shares_memory(flow.as_tensor(a).numpy(), a)


# -- factories -------------------------------------------------------------------------------------


@pytest.mark.parametrize("factory, value", [(flow.zeros, 0.0), (flow.ones, 1.0)])
def test_zeros_ones(factory, value):
    for args in [(2, 3), ((2, 3),), ([2, 3],), (flow.Size([2, 3]),)]:
        t = factory(*args)
        assert t.shape == (2, 3) and t.dtype is flow.float32 and t.tolist() == [[value] * 3] * 2
    assert factory(2, dtype=flow.int8).dtype is flow.int8
    assert factory(()).shape == () and factory(0).shape == (0,)
    assert factory(2, requires_grad=True).requires_grad


def test_bad_sizes():
    with pytest.raises(OpError, match=r"negative dimension -1 in size \(2, -1\)"):
        flow.zeros(2, -1)
    with pytest.raises(OpTypeError, match="sequence of ints"):
        flow.ones(2.5)


def test_full_infers_its_dtype_from_the_value():
    assert flow.full((2,), 3).dtype is flow.int64 and flow.full((2,), 3.0).dtype is flow.float32
    assert flow.full((2,), True).dtype is flow.bool and flow.full(3, 1.0).shape == (3,)
    assert flow.full((2, 2), 7, dtype=flow.float64).tolist() == [[7.0, 7.0]] * 2
    assert flow.full((1,), flow.tensor(4.0)).tolist() == [4.0]


def test_empty():
    assert flow.empty(2, 3).shape == (2, 3) and flow.empty(2, dtype=flow.int32).dtype is flow.int32


@pytest.mark.parametrize(
    "args, kw, want",
    [
        ((5,), {}, [0, 1, 2, 3, 4]),
        ((2, 5), {}, [2, 3, 4]),
        ((5, 0, -2), {}, [5, 3, 1]),
        ((0, 1, 0.25), {}, [0.0, 0.25, 0.5, 0.75]),
        ((0.5, 3), {}, [0.5, 1.5, 2.5]),
        ((0, 4), {"dtype": flow.float64}, [0.0, 1.0, 2.0, 3.0]),
    ],
)
def test_arange(args, kw, want):
    t = flow.arange(*args, **kw)
    assert t.tolist() == want
    ints = all(isinstance(a, int) for a in args) and "dtype" not in kw
    assert t.dtype is (flow.int64 if ints else kw.get("dtype", flow.float32))


def test_arange_length_matches_torch_for_float_steps():
    assert flow.arange(0, 1, 0.1).shape == (10,) and flow.arange(1, 2.5, 0.5).shape == (3,)
    with pytest.raises(OpError, match="step must be nonzero"):
        flow.arange(0, 1, 0)
    with pytest.raises(OpError, match="inconsistent"):
        flow.arange(0, 5, -1)


def test_linspace_and_eye():
    assert flow.linspace(0, 1, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert flow.linspace(0, 1, 1).tolist() == [0.0] and flow.linspace(0, 1, 0).shape == (0,)
    assert flow.linspace(0, 10, 5, dtype=flow.int64).tolist() == [0, 2, 5, 7, 10]
    assert flow.eye(2, 3).tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert flow.eye(3).tolist() == np.eye(3).tolist() and flow.eye(2, dtype=flow.int32).dtype is flow.int32
    with pytest.raises(OpError, match="steps must be non-negative"):
        flow.linspace(0, 1, -1)
    with pytest.raises(OpError, match="non-negative"):
        flow.eye(-1)


def test_like_factories_follow_their_input():
    x = flow.ones(2, 3, dtype=flow.float64)
    for f in (flow.zeros_like, flow.ones_like, flow.empty_like, flow.rand_like, flow.randn_like):
        y = f(x)
        assert y.shape == (2, 3) and y.dtype is flow.float64 and y.device is x.device and not y.requires_grad
    assert flow.zeros_like(x, dtype=flow.int32).dtype is flow.int32
    assert flow.ones_like(x).tolist() == [[1.0] * 3] * 2 and flow.zeros_like(x).tolist() == [[0.0] * 3] * 2
    assert flow.full_like(x, 7).tolist() == [[7.0] * 3] * 2
    assert flow.ones_like(x, requires_grad=True).requires_grad
    r = flow.randint_like(x, 5)
    assert r.dtype is flow.float64 and r.shape == (2, 3) and ((r >= 0) & (r < 5)).all().item()


# -- random sampling ------------------------------------------------------------------------------


def test_rand_randn_ranges_and_dtypes():
    flow.manual_seed(0)
    u = flow.rand(1000)
    assert u.dtype is flow.float32 and 0 <= u.min().item() and u.max().item() < 1
    n = flow.randn(10000, dtype=flow.float64)
    assert abs(n.mean().item()) < 0.05 and abs(n.std().item() - 1) < 0.05
    assert flow.rand(2, 3).shape == (2, 3) and flow.randn((2, 3)).shape == (2, 3)
    with pytest.raises(OpTypeError, match="floating point"):
        flow.rand(2, dtype=flow.int64)


def test_randint_and_randperm():
    flow.manual_seed(1)
    r = flow.randint(3, 7, (1000,))
    assert r.dtype is flow.int64 and r.min().item() >= 3 and r.max().item() <= 6
    assert set(flow.randint(2, (500,)).tolist()) == {0, 1}
    assert flow.randint(0, 10, (2, 3), dtype=flow.int32).dtype is flow.int32
    p = flow.randperm(10)
    assert sorted(p.tolist()) == list(range(10)) and p.dtype is flow.int64
    with pytest.raises(OpError, match="low < high"):
        flow.randint(5, 5, (2,))
    with pytest.raises(OpError, match="non-negative"):
        flow.randperm(-1)


def test_manual_seed_makes_sampling_reproducible():
    def draw():
        return (
            flow.rand(3).tolist(),
            flow.randn(2, 2).tolist(),
            flow.randint(0, 100, (4,)).tolist(),
            flow.randperm(6).tolist(),
        )

    flow.manual_seed(1234)
    a = draw()
    flow.manual_seed(1234)
    b = draw()
    flow.manual_seed(4321)
    c = draw()
    assert a == b and a != c
    assert flow.initial_seed() == 4321


def test_rng_state_round_trip():
    flow.manual_seed(7)
    flow.rand(5)
    state = flow.get_rng_state()
    assert isinstance(state, flow.Tensor) and state.dtype is flow.uint8
    a = flow.randn(4).tolist()
    flow.set_rng_state(state)
    assert flow.randn(4).tolist() == a


def test_generators_are_independent_and_restorable():
    g = flow.Generator().manual_seed(3)
    h = flow.Generator().manual_seed(3)
    assert flow.rand(3, generator=g).tolist() == flow.rand(3, generator=h).tolist()
    state = g.get_state()
    a = flow.randn(5, generator=g).tolist()
    flow.manual_seed(0)
    flow.randn(100)  # the default generator does not disturb g
    g.set_state(state)
    assert flow.randn(5, generator=g).tolist() == a
    assert g.initial_seed() == 3
    k = flow.Generator()
    k.set_state(state)
    assert flow.randn(5, generator=k).tolist() == a
    with pytest.raises(ValueError, match="not a state produced by get_state"):
        g.set_state(flow.zeros(4, dtype=flow.uint8))
    with pytest.raises(TypeError, match="flow.Generator"):
        flow.rand(2, generator=np.random.default_rng())


def test_normal_bernoulli_multinomial():
    flow.manual_seed(0)
    n = flow.normal(2.0, 0.5, (4000,))
    assert abs(n.mean().item() - 2.0) < 0.05
    m = flow.normal(flow.zeros(3), flow.ones(3))
    assert m.shape == (3,)
    b = flow.bernoulli(flow.full((1000,), 0.3))
    assert b.dtype is flow.float32 and set(b.tolist()) <= {0.0, 1.0} and 0.2 < b.mean().item() < 0.4
    s = flow.multinomial(flow.tensor([0.0, 1.0, 0.0]), 2, replacement=True)
    assert s.tolist() == [1, 1]
    with pytest.raises(OpError, match="without replacement"):
        flow.multinomial(flow.tensor([0.0, 1.0]), 2)
    with pytest.raises(OpError, match=r"\[0, 1\]"):
        flow.bernoulli(flow.tensor([1.5]))
