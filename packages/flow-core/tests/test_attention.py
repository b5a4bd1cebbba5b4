"""nn.functional attention and linear maps: scaled_dot_product_attention (masks, causal, scale, GQA, dropout),
linear and bilinear, against NumPy and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from _nnf_helpers import DTYPES, compare, gradgrad, leaf, torch_or_skip

import flow
import flow.nn.functional as F
from flow.errors import OpError, OpTypeError

RNG = np.random.default_rng(3)


def np_sdpa(q, k, v, mask=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def test_sdpa_formula():
    q, k, v = RNG.standard_normal((2, 4, 8)), RNG.standard_normal((2, 5, 8)), RNG.standard_normal((2, 5, 3))
    out = F.scaled_dot_product_attention(flow.tensor(q), flow.tensor(k), flow.tensor(v))
    np.testing.assert_allclose(out.numpy(), np_sdpa(q, k, v), rtol=1e-10)
    causal = F.scaled_dot_product_attention(flow.tensor(q), flow.tensor(k), flow.tensor(v), is_causal=True, scale=0.5)
    np.testing.assert_allclose(causal.numpy(), np_sdpa(q, k, v, np.tril(np.ones((4, 5), bool)), 0.5), rtol=1e-10)


def test_sdpa_fully_masked_rows_are_zero_with_finite_gradients():
    q = leaf(RNG.standard_normal((1, 3, 4)))
    k = leaf(RNG.standard_normal((1, 3, 4)))
    v = leaf(RNG.standard_normal((1, 3, 2)))
    mask = np.ones((3, 3), bool)
    mask[1] = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=flow.tensor(mask))
    assert (out.detach().numpy()[0, 1] == 0).all()
    out.sum().backward()
    assert all(np.isfinite(t.grad.numpy()).all() for t in (q, k, v))


def test_sdpa_higher_order_and_errors():
    q, k, v = (leaf(RNG.standard_normal((2, 3, 4))) for _ in range(3))
    assert gradgrad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [q, k, v])
    with pytest.raises(OpError, match="embedding size"):
        F.scaled_dot_product_attention(flow.randn(2, 3, 4), flow.randn(2, 3, 5), flow.randn(2, 3, 5))
    with pytest.raises(OpError, match="is_causal"):
        F.scaled_dot_product_attention(
            flow.randn(3, 4),
            flow.randn(3, 4),
            flow.randn(3, 4),
            attn_mask=flow.ones(3, 3, dtype=flow.bool),
            is_causal=True,
        )
    with pytest.raises(OpTypeError, match="attn_mask"):
        F.scaled_dot_product_attention(
            flow.randn(3, 4), flow.randn(3, 4), flow.randn(3, 4), attn_mask=flow.ones(3, 3, dtype=flow.int64)
        )
    with pytest.raises(OpError, match="dropout_p"):
        F.scaled_dot_product_attention(flow.randn(3, 4), flow.randn(3, 4), flow.randn(3, 4), dropout_p=1.5)


def test_sdpa_dropout_is_reproducible():
    q, k, v = (flow.tensor(RNG.standard_normal((2, 4, 4))) for _ in range(3))
    flow.manual_seed(5)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    flow.manual_seed(5)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), F.scaled_dot_product_attention(q, k, v).numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_against_torch(dtype):
    torch = torch_or_skip()
    sdpa_t = torch.nn.functional.scaled_dot_product_attention
    sdpa = F.scaled_dot_product_attention
    q, k, v = RNG.standard_normal((2, 3, 4, 8)), RNG.standard_normal((2, 3, 5, 8)), RNG.standard_normal((2, 3, 5, 6))
    compare(sdpa, sdpa_t, [q, k, v], dtype)
    compare(lambda a, b, c: sdpa(a, b, c, scale=0.3), lambda a, b, c: sdpa_t(a, b, c, scale=0.3), [q, k, v], dtype)
    compare(
        lambda a, b, c: sdpa(a, b, c, is_causal=True), lambda a, b, c: sdpa_t(a, b, c, is_causal=True), [q, k, v], dtype
    )
    m = RNG.random((4, 5)) > 0.4
    m[1] = False
    compare(
        lambda a, b, c: sdpa(a, b, c, attn_mask=flow.tensor(m)),
        lambda a, b, c: sdpa_t(a, b, c, attn_mask=torch.tensor(m)),
        [q, k, v],
        dtype,
    )
    fm = np.where(m, RNG.standard_normal((4, 5)), -np.inf).astype(dtype)
    compare(
        lambda a, b, c: sdpa(a, b, c, attn_mask=flow.tensor(fm)),
        lambda a, b, c: sdpa_t(a, b, c, attn_mask=torch.tensor(fm)),
        [q, k, v],
        dtype,
    )
    compare(
        lambda a, b, c, d: sdpa(a, b, c, attn_mask=d),
        lambda a, b, c, d: sdpa_t(a, b, c, attn_mask=d),
        [q, k, v, RNG.standard_normal((3, 4, 5))],
        dtype,
    )
    k1, v1 = RNG.standard_normal((2, 1, 5, 8)), RNG.standard_normal((2, 1, 5, 6))
    compare(
        lambda a, b, c: sdpa(a, b, c, enable_gqa=True),
        lambda a, b, c: sdpa_t(a, b, c, enable_gqa=True),
        [q, k1, v1],
        dtype,
    )
    compare(sdpa, sdpa_t, [q[0, 0], k[0, 0], v[0, 0]], dtype)


# -- linear / bilinear --------------------------------------------------------------------------------------------
def test_linear_formula_and_errors():
    x, w, b = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((6, 5)), RNG.standard_normal(6)
    np.testing.assert_allclose(
        F.linear(flow.tensor(x), flow.tensor(w), flow.tensor(b)).numpy(), x @ w.T + b, rtol=1e-12
    )
    np.testing.assert_allclose(F.linear(flow.tensor(x), flow.tensor(w)).numpy(), x @ w.T, rtol=1e-12)
    with pytest.raises(OpError, match="in_features"):
        F.linear(flow.tensor(x), flow.tensor(w.T))
    with pytest.raises(OpTypeError, match="dtype"):
        F.linear(flow.tensor(x), flow.tensor(w.astype(np.float32)))
    with pytest.raises(OpError, match="bias"):
        F.linear(flow.tensor(x), flow.tensor(w), flow.tensor(np.ones(5)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_bilinear_against_torch(dtype):
    torch = torch_or_skip()
    tf = torch.nn.functional
    x, w, b = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((6, 5)), RNG.standard_normal(6)
    compare(F.linear, tf.linear, [x, w, b], dtype)
    compare(F.linear, tf.linear, [x, w], dtype)
    compare(F.linear, tf.linear, [x, w[0]], dtype)
    compare(
        F.bilinear,
        tf.bilinear,
        [x, RNG.standard_normal((3, 4, 7)), RNG.standard_normal((2, 5, 7)), RNG.standard_normal(2)],
        dtype,
    )
    compare(F.bilinear, tf.bilinear, [x[0], RNG.standard_normal((4, 7)), RNG.standard_normal((2, 5, 7))], dtype)
