"""Where PyTorch accepts an input, flow does too: feature dropout on other ranks (with PyTorch's
warning and its reading of the dims), indexing with ``range``, ``size=`` keywords on factories."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flow
import flow.nn.functional as F
from flow.errors import OpError


def _constant_dims(mask: np.ndarray) -> set:
    """The dims along which every fibre of the mask holds one value (one draw per channel)."""
    return {d for d in range(mask.ndim) if mask.shape[d] > 1 and (mask == mask.take([0], axis=d)).all()}


@pytest.mark.parametrize(
    "fn, shape, warns, const",
    [
        (F.dropout2d, (3, 4), True, set()),  # read as (N, C): one draw per element
        (F.dropout2d, (8, 6, 5), True, {2}),  # read as (N, C, L), PyTorch's historical behaviour
        (F.dropout2d, (8, 6, 5, 4), False, {2, 3}),
        (F.dropout2d, (4, 6, 5, 4, 3), True, {2, 3, 4}),
        (F.dropout3d, (6, 5), True, {1}),  # unbatched: the first dim is the channel
        (F.dropout3d, (6, 5, 4, 3), False, {1, 2, 3}),
        (F.dropout3d, (4, 6, 5, 4, 3), False, {2, 3, 4}),
        (F.dropout1d, (6, 5), False, {1}),
        (F.dropout1d, (4, 6, 5), False, {2}),
    ],
)
def test_feature_dropout_reads_the_dims_as_pytorch_does(fn, shape, warns, const):
    flow.manual_seed(0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(flow.ones(*shape), 0.5, True)
    assert bool(seen) == warns
    mask = out.numpy() != 0
    assert 0 < mask.mean() < 1
    assert _constant_dims(mask) == const
    torch = pytest.importorskip("torch")
    tfn = getattr(torch.nn.functional, fn.__name__)
    with warnings.catch_warnings(record=True) as tseen:
        warnings.simplefilter("always")
        tmask = tfn(torch.ones(*shape), 0.5, True).numpy() != 0
    assert bool(tseen) == warns
    assert _constant_dims(tmask) == const


@pytest.mark.parametrize("fn, shape", [(F.dropout1d, (5,)), (F.dropout1d, (2, 3, 4, 5)), (F.dropout2d, (5,))])
def test_feature_dropout_refuses_what_pytorch_refuses(fn, shape):
    with pytest.raises(OpError, match=fn.__name__):
        fn(flow.ones(*shape), 0.5, True)


def test_dropout3d_module_and_feature_alpha_dropout():
    flow.manual_seed(0)
    out = flow.nn.Dropout3d(0.5)(flow.ones(2, 4, 3, 3, 3))
    assert _constant_dims(out.numpy() != 0) == {2, 3, 4}
    assert flow.nn.Dropout3d(0.5).eval()(flow.ones(2, 4, 3, 3, 3)).numpy().min() == 1
    y = flow.nn.FeatureAlphaDropout(0.5)(flow.ones(2, 4, 3))
    assert _constant_dims(y.numpy()) == {2}


@pytest.mark.parametrize("r", [range(3), range(1, 8, 3), range(5, 0, -2), range(0)])
def test_indexing_with_a_range_is_indexing_with_its_list(r):
    x = flow.arange(20.0).reshape(10, 2)
    np.testing.assert_array_equal(x[r].numpy(), x.numpy()[list(r)].reshape(-1, 2))
    y = x.clone()
    y[r] = 0.0
    want = x.numpy().copy()
    want[list(r)] = 0
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "rand", "randn"])
def test_factories_take_size_as_a_keyword(name):
    f = getattr(flow, name)
    assert f(size=(2, 3)).shape == (2, 3)
    assert f(size=[4]).shape == (4,)
    assert f(size=5).shape == (5,)
    assert f(size=(2, 3), dtype=flow.float64).dtype is flow.float64
    with pytest.raises(TypeError, match="both as positional arguments"):
        f(2, size=(2,))
