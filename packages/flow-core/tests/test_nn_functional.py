"""nn.functional dropout and embeddings (embedding / embedding_bag with their backward ops), the exported
names, and the speed of the embedding gradients."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _nnf_helpers import DTYPES, compare, gradgrad, leaf, torch_or_skip

import flow
import flow.nn.functional as F
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.testing import opcheck

RNG = np.random.default_rng(4)


@pytest.mark.parametrize(
    "op", ["embedding", "embedding_backward", "embedding_bag", "embedding_bag_backward", "embedding_bag_ids"]
)
def test_opcheck(op):
    assert opcheck(op)["samples"] > 0


def test_torch_names_are_exported():
    names = [
        "softmax",
        "log_softmax",
        "leaky_relu",
        "elu",
        "selu",
        "celu",
        "hardtanh",
        "relu6",
        "hardswish",
        "hardsigmoid",
        "mish",
        "silu",
        "softsign",
        "tanhshrink",
        "glu",
        "logsigmoid",
        "prelu",
        "threshold",
        "normalize",
        "linear",
        "bilinear",
        "dropout",
        "dropout1d",
        "dropout2d",
        "alpha_dropout",
        "layer_norm",
        "batch_norm",
        "group_norm",
        "instance_norm",
        "rms_norm",
        "local_response_norm",
        "embedding",
        "embedding_bag",
        "cross_entropy",
        "nll_loss",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
        "ctc_loss",
        "cosine_similarity",
        "pairwise_distance",
        "margin_ranking_loss",
        "scaled_dot_product_attention",
    ]
    missing = [n for n in names if not callable(getattr(F, n, None)) or n not in F.__all__]
    assert not missing


# -- dropout ------------------------------------------------------------------------------------------------------
def test_dropout_scaling_training_and_seed():
    x = flow.ones(20000)
    flow.manual_seed(0)
    a = F.dropout(x, 0.3)
    flow.manual_seed(0)
    b = F.dropout(x, 0.3)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    vals = a.numpy()
    np.testing.assert_allclose(np.unique(vals), [0.0, 1 / 0.7], rtol=1e-6)
    assert abs((vals == 0).mean() - 0.3) < 0.02
    assert F.dropout(x, 0.3, training=False) is x
    assert F.dropout(x, 0.0) is x
    assert (F.dropout(x, 1.0).numpy() == 0).all()
    t = leaf(np.ones((3, 4)))
    flow.manual_seed(1)
    y = F.dropout(t, 0.5)
    y.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), y.detach().numpy())  # the gradient is the scaled mask


def test_dropout_errors_and_inplace():
    for p in (-0.1, 1.5):
        with pytest.raises(OpError, match="between 0 and 1"):
            F.dropout(flow.ones(3), p)
    with pytest.raises(OpError, match="dropout1d"):
        F.dropout1d(flow.ones(2, 3, 4, 5), 0.5)  # dropout2d warns on other ranks (test_compat_lenient)
    with pytest.raises(OpTypeError, match="dropout"):
        F.dropout(flow.tensor([1, 2]), 0.5)
    x = flow.ones(100)
    flow.manual_seed(2)
    assert F.dropout(x, 0.5, inplace=True) is x
    assert set(np.unique(x.numpy())) <= {0.0, 2.0}


def test_feature_and_alpha_dropout():
    flow.manual_seed(3)
    y = F.dropout2d(flow.ones(4, 16, 3, 3), 0.5).numpy()
    per_channel = y.reshape(4, 16, 9)
    assert (per_channel == per_channel[..., :1]).all()  # whole channels kept or dropped
    assert set(np.unique(y)) <= {0.0, 2.0}
    y1 = F.dropout1d(flow.ones(5, 7), 0.5).numpy()  # unbatched (C, L)
    assert (y1 == y1[:, :1]).all()
    x = flow.tensor(RNG.standard_normal(200000).astype(np.float32))
    z = F.alpha_dropout(x, 0.2, training=True).numpy()
    assert abs(z.mean()) < 0.02 and abs(z.var() - 1) < 0.03  # keeps zero mean, unit variance
    assert F.alpha_dropout(x, 0.2) is x  # training=False by default, as PyTorch
    f = F.feature_alpha_dropout(flow.ones(2, 8, 4), 0.5, training=True).numpy()
    assert (f == f[..., :1]).all()


# -- embedding -------------------------------------------------------------------------------------------------------
def test_embedding_formula_padding_and_errors():
    w = RNG.standard_normal((10, 4))
    idx = np.array([[1, 2, 2], [9, 0, 1]])
    wf = leaf(w)
    out = F.embedding(flow.tensor(idx), wf, padding_idx=2)
    np.testing.assert_array_equal(out.detach().numpy(), w[idx])
    g = RNG.standard_normal((2, 3, 4))
    out.backward(flow.tensor(g))
    want = np.zeros_like(w)
    np.add.at(want, idx.reshape(-1), g.reshape(-1, 4))
    want[2] = 0
    np.testing.assert_allclose(wf.grad.numpy(), want, rtol=1e-12)
    with pytest.raises(OpIndexError, match="embedding"):
        F.embedding(flow.tensor([1, 10]), wf)
    with pytest.raises(OpTypeError, match="input"):
        F.embedding(flow.tensor([1.0]), wf)
    with pytest.raises(OpError, match="padding_idx"):
        F.embedding(flow.tensor([1]), wf, padding_idx=10)


def test_embedding_second_derivative():
    w = leaf(RNG.standard_normal((7, 3)))
    idx = flow.tensor(np.array([[1, 2, 2], [6, 1, 0]]))
    assert gradgrad(lambda w: F.embedding(idx, w) ** 2, [w])


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_against_torch(dtype):
    torch = torch_or_skip()
    tf = torch.nn.functional
    w = RNG.standard_normal((10, 4))
    idx = RNG.integers(0, 10, (3, 5))
    compare(lambda w, i: F.embedding(i, w), lambda w, i: tf.embedding(i, w), [w], dtype, consts=[idx])
    for pad in (int(idx[0, 0]), -3):
        compare(
            lambda w, i, pad=pad: F.embedding(i, w, padding_idx=pad),
            lambda w, i, pad=pad: tf.embedding(i, w, padding_idx=pad),
            [w],
            dtype,
            consts=[idx],
        )
    compare(
        lambda w, i: F.embedding(i, w, scale_grad_by_freq=True),
        lambda w, i: tf.embedding(i, w, scale_grad_by_freq=True),
        [w],
        dtype,
        consts=[idx],
    )
    wf, wt = flow.tensor(w.astype(dtype)), torch.tensor(w.astype(dtype))
    a = F.embedding(flow.tensor(idx), wf, max_norm=1.0)
    b = tf.embedding(torch.tensor(idx), wt, max_norm=1.0)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5)
    np.testing.assert_allclose(wf.numpy(), wt.numpy(), rtol=1e-5)  # rows renormalised in place


# -- embedding_bag ---------------------------------------------------------------------------------------------------
def test_embedding_bag_formula():
    w = RNG.standard_normal((8, 3))
    idx = np.array([1, 4, 4, 0, 3, 2, 6, 1])
    offs = np.array([0, 3, 3, 5])  # bag 1 is empty
    bags = [idx[0:3], idx[3:3], idx[3:5], idx[5:]]
    s = F.embedding_bag(flow.tensor(idx), flow.tensor(w), flow.tensor(offs), mode="sum").numpy()
    m = F.embedding_bag(flow.tensor(idx), flow.tensor(w), flow.tensor(offs), mode="mean").numpy()
    mx = F.embedding_bag(flow.tensor(idx), flow.tensor(w), flow.tensor(offs), mode="max").numpy()
    for b, rows in enumerate(bags):
        np.testing.assert_allclose(s[b], w[rows].sum(0) if rows.size else 0, rtol=1e-12)
        np.testing.assert_allclose(m[b], w[rows].mean(0) if rows.size else 0, rtol=1e-12)
        np.testing.assert_allclose(mx[b], w[rows].max(0) if rows.size else 0, rtol=1e-12)
    psw = RNG.uniform(0.5, 1.5, 8)
    ws = F.embedding_bag(
        flow.tensor(idx),
        flow.tensor(w),
        flow.tensor(offs),
        mode="sum",
        per_sample_weights=flow.tensor(psw),
        padding_idx=4,
    ).numpy()
    keep = idx != 4
    np.testing.assert_allclose(ws[0], (w[idx[:3]] * (psw[:3] * keep[:3])[:, None]).sum(0), rtol=1e-12)
    # include_last_offset: CSR offsets (the last bag ends at the last offset)
    last = F.embedding_bag(
        flow.tensor(idx), flow.tensor(w), flow.tensor(np.array([0, 3, 5, 7])), mode="sum", include_last_offset=True
    ).numpy()
    np.testing.assert_allclose(last[2], w[idx[5:7]].sum(0), rtol=1e-12)
    with pytest.raises(OpError, match="per_sample_weights"):
        F.embedding_bag(flow.tensor(idx), flow.tensor(w), flow.tensor(offs), per_sample_weights=flow.tensor(psw))
    with pytest.raises(OpError, match="offsets"):
        F.embedding_bag(flow.tensor(idx), flow.tensor(w), flow.tensor(np.array([1, 3])))
    with pytest.raises(OpError, match="offsets"):
        F.embedding_bag(flow.tensor(idx), flow.tensor(w))
    with pytest.raises(OpIndexError, match="embedding_bag"):
        F.embedding_bag(flow.tensor(idx + 2), flow.tensor(w), flow.tensor(offs))


def test_embedding_bag_second_derivatives():
    w = leaf(RNG.standard_normal((7, 3)))
    i1 = flow.tensor(np.array([1, 4, 4, 0, 3, 2, 6, 1]))
    offs = flow.tensor(np.array([0, 3, 3, 5]))
    psw = leaf(RNG.uniform(0.5, 1.5, 8))
    for mode in ("sum", "mean", "max"):
        assert gradgrad(lambda w, mode=mode: F.embedding_bag(i1, w, offs, mode=mode, padding_idx=4) ** 2, [w])
    assert gradgrad(lambda w, p: F.embedding_bag(i1, w, offs, mode="sum", per_sample_weights=p) ** 2, [w, psw])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_against_torch(mode, dtype):
    torch = torch_or_skip()
    tf = torch.nn.functional
    w = RNG.standard_normal((10, 4))
    i1 = RNG.integers(0, 10, 20)
    offs = np.array([0, 4, 4, 9, 15])
    for pad in (None, int(i1[2])):
        for o, last in ((offs, False), (np.r_[offs, 20], True), (np.array([0, 0, 0]), False)):
            compare(
                lambda w, i, o, pad=pad, last=last: F.embedding_bag(
                    i, w, o, mode=mode, padding_idx=pad, include_last_offset=last
                ),
                lambda w, i, o, pad=pad, last=last: tf.embedding_bag(
                    i, w, o, mode=mode, padding_idx=pad, include_last_offset=last
                ),
                [w],
                dtype,
                consts=[i1, o],
            )
    idx2 = RNG.integers(0, 10, (3, 5))
    compare(
        lambda w, i: F.embedding_bag(i, w, mode=mode),
        lambda w, i: tf.embedding_bag(i, w, mode=mode),
        [w],
        dtype,
        consts=[idx2],
    )
    if mode == "sum":
        compare(
            lambda w, p, i, o: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p, padding_idx=int(i1[3])),
            lambda w, p, i, o: tf.embedding_bag(i, w, o, mode="sum", per_sample_weights=p, padding_idx=int(i1[3])),
            [w, RNG.uniform(0.5, 1.5, 20)],
            dtype,
            consts=[i1, offs],
        )


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_is_fast(mode):
    """2,048 bags over a 100,000 x 64 table: forward + backward well under a second (a per-element
    scatter would take seconds)."""
    w = flow.tensor(RNG.standard_normal((100_000, 64)).astype(np.float32), requires_grad=True)
    n = 2048 * 30
    idx = flow.tensor(RNG.integers(0, 100_000, n))
    offs = np.sort(RNG.integers(0, n, 2048))
    offs[0] = 0
    offs = flow.tensor(offs)
    F.embedding_bag(idx, w, offs, mode=mode).sum().backward()  # warm up
    w.grad = None
    t0 = time.perf_counter()
    F.embedding_bag(idx, w, offs, mode=mode).sum().backward()
    assert time.perf_counter() - t0 < 2.0
    assert w.grad.shape == (100_000, 64)


def test_embedding_backward_is_fast_and_exact():
    w = flow.tensor(RNG.standard_normal((100_000, 64)).astype(np.float32), requires_grad=True)
    idx = RNG.integers(0, 1000, (64, 512))  # many repeated rows
    t0 = time.perf_counter()
    F.embedding(flow.tensor(idx), w).sum().backward()
    assert time.perf_counter() - t0 < 2.0
    counts = np.bincount(idx.reshape(-1), minlength=100_000)
    np.testing.assert_allclose(w.grad.numpy(), np.repeat(counts[:, None], 64, 1), rtol=1e-6)
