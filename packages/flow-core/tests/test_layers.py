"""flow.nn layers and losses: parity with PyTorch (weights copied through state dicts; outputs, input
gradients and parameter gradients compared at float32 tolerance) and formula checks that need no torch."""

from __future__ import annotations

import numpy as np
import pytest
from _layer_parity import ATOL, RTOL, _np, _torch, check_parity, randn

import flow
import flow.nn as nn


# -- linear, flatten ---------------------------------------------------------------------------
def test_linear_formula():
    lin = nn.Linear(3, 2)
    x = randn(4, 3)
    expected = x @ _np(lin.weight).T + _np(lin.bias)
    np.testing.assert_allclose(_np(lin(flow.tensor(x))), expected, rtol=1e-5, atol=1e-6)
    assert repr(lin) == "Linear(in_features=3, out_features=2, bias=True)"
    assert nn.Linear(3, 2, bias=False).bias is None


@pytest.mark.parametrize("bias", [True, False])
def test_linear_parity(bias):
    torch = _torch()
    check_parity(nn.Linear(5, 7, bias=bias), torch.nn.Linear(5, 7, bias=bias), randn(2, 3, 5))
    check_parity(nn.Linear(5, 7, bias=bias), torch.nn.Linear(5, 7, bias=bias), randn(5))


def test_load_torch_state_dict_directly_and_dtypes():
    torch = _torch()
    t = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    f = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    f.load_state_dict(t.state_dict())  # torch tensors convert through __array__
    x = randn(3, 4)
    expected = t(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(_np(f(flow.tensor(x))), expected, rtol=RTOL, atol=ATOL)
    f.double()
    out = f(flow.tensor(x.astype(np.float64)))
    assert out.dtype == flow.float64
    np.testing.assert_allclose(_np(out), expected, rtol=RTOL, atol=ATOL)
    f.half()
    out = f(flow.tensor(x).half())
    assert out.dtype == flow.float16
    np.testing.assert_allclose(_np(out).astype(np.float32), expected, rtol=2e-2, atol=2e-2)


def test_bilinear_identity_flatten_unflatten():
    torch = _torch()
    check_parity(nn.Bilinear(3, 4, 5), torch.nn.Bilinear(3, 4, 5), randn(6, 3), randn(6, 4, seed=1))
    x = flow.randn(2, 3, 4, 5)
    assert nn.Identity(1, k=2)(x) is x
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 2)(x).shape == (24, 5)
    assert nn.Unflatten(1, (3, 1))(flow.randn(2, 3)).shape == (2, 3, 1)
    assert nn.Unflatten(-1, (2, 2))(flow.randn(2, 4)).shape == (2, 2, 2)
    assert repr(nn.Flatten()) == repr(torch.nn.Flatten())
    assert repr(nn.Unflatten(1, (2, 5))) == repr(torch.nn.Unflatten(1, (2, 5)))


# -- convolutions -----------------------------------------------------------------------------
def _naive_conv2d(x, w, b, stride, padding):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - kh) // stride + 1
    ow = (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w)
    return out + b[None, :, None, None]


def test_conv2d_formula():
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
    x = randn(2, 3, 7, 6)
    np.testing.assert_allclose(
        _np(conv(flow.tensor(x))), _naive_conv2d(x, _np(conv.weight), _np(conv.bias), 2, 1), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(stride=2),
        dict(padding=1),
        dict(padding=(2, 1), stride=(2, 1)),
        dict(padding="same"),
        dict(padding="same", dilation=2),
        dict(padding="valid"),
        dict(dilation=2, padding=2),
        dict(groups=2),
        dict(bias=False),
        dict(padding=2, padding_mode="reflect"),
        dict(padding=1, padding_mode="circular"),
        dict(padding=1, padding_mode="replicate"),
        dict(padding="same", padding_mode="reflect"),
    ],
)
def test_conv2d_parity(kw):
    torch = _torch()
    kernel = kw.pop("kernel", 3)
    check_parity(nn.Conv2d(4, 6, kernel, **kw), torch.nn.Conv2d(4, 6, kernel, **kw), randn(2, 4, 9, 8))


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv2d_even_kernel_same_and_repr():
    torch = _torch()
    check_parity(
        nn.Conv2d(2, 3, (4, 2), padding="same"), torch.nn.Conv2d(2, 3, (4, 2), padding="same"), randn(1, 2, 7, 6)
    )
    for args, kw in [
        ((3, 8, 3), dict(stride=2, padding=1)),
        ((4, 8, (3, 5)), dict(groups=2, bias=False)),
        ((3, 8, 3), dict(padding="same", dilation=2)),
        ((3, 8, 3), dict(padding=1, padding_mode="circular")),
    ]:
        assert repr(nn.Conv2d(*args, **kw)) == repr(torch.nn.Conv2d(*args, **kw))


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(stride=2, padding=1),
        dict(padding="same", dilation=3),
        dict(groups=3),
        dict(padding=2, padding_mode="reflect"),
    ],
)
def test_conv1d_parity(kw):
    torch = _torch()
    check_parity(nn.Conv1d(3, 6, 3, **kw), torch.nn.Conv1d(3, 6, 3, **kw), randn(2, 3, 11))


def test_conv_errors():
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding string"):
        nn.Conv2d(3, 4, 3, padding="full")
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(stride=2),
        dict(stride=2, padding=1, output_padding=1),
        dict(groups=2),
        dict(dilation=2, padding=1),
        dict(bias=False),
    ],
)
def test_conv_transpose2d_parity(kw):
    torch = _torch()
    check_parity(nn.ConvTranspose2d(4, 6, 3, **kw), torch.nn.ConvTranspose2d(4, 6, 3, **kw), randn(2, 4, 5, 6))


def test_conv_transpose_output_size_and_1d():
    torch = _torch()
    f, t = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1), torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    check_parity(f, t, randn(1, 2, 4, 4), kwargs={"output_size": [8, 8]})
    assert f(flow.randn(1, 2, 4, 4), output_size=(1, 3, 7, 8)).shape == (1, 3, 7, 8)
    with pytest.raises(ValueError, match="output size"):
        f(flow.randn(1, 2, 4, 4), output_size=(20, 20))
    check_parity(nn.ConvTranspose1d(3, 2, 4, stride=3), torch.nn.ConvTranspose1d(3, 2, 4, stride=3), randn(2, 3, 5))
    assert repr(nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1)) == repr(
        torch.nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1)
    )


# -- pooling -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,args,kw,shape",
    [
        ("MaxPool2d", (2,), {}, (2, 3, 8, 8)),
        ("MaxPool2d", (3,), dict(stride=2, padding=1), (2, 3, 9, 7)),
        ("MaxPool2d", (3,), dict(stride=2, ceil_mode=True), (1, 2, 8, 8)),
        ("MaxPool2d", (2,), dict(dilation=2), (1, 2, 9, 9)),
        ("MaxPool1d", (3,), dict(stride=2, padding=1), (2, 3, 10)),
        ("AvgPool1d", (3,), dict(stride=2), (2, 3, 10)),
        ("AvgPool2d", (2,), {}, (2, 3, 8, 8)),
        ("AvgPool2d", (3,), dict(stride=2, padding=1), (2, 3, 9, 7)),
        ("AvgPool2d", (3,), dict(padding=1, count_include_pad=False), (1, 2, 6, 6)),
        ("AvgPool2d", (2,), dict(divisor_override=3), (1, 2, 6, 6)),
        ("AdaptiveAvgPool2d", ((3, 2),), {}, (2, 3, 7, 9)),
        ("AdaptiveAvgPool2d", (1,), {}, (2, 3, 5, 5)),
        ("AdaptiveAvgPool2d", ((None, 2),), {}, (2, 3, 5, 5)),
        ("AdaptiveAvgPool1d", (4,), {}, (2, 3, 10)),
        ("AdaptiveMaxPool2d", ((2, 3),), {}, (2, 3, 7, 8)),
        ("AdaptiveMaxPool1d", (3,), {}, (2, 3, 10)),
    ],
)
def test_pooling_parity(name, args, kw, shape):
    torch = _torch()
    fm, tm = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    check_parity(fm, tm, randn(*shape))
    assert repr(fm) == repr(tm)


def test_maxpool_return_indices():
    torch = _torch()
    x = randn(1, 2, 6, 6)
    fo, fi = nn.MaxPool2d(2, return_indices=True)(flow.tensor(x))
    to, ti = torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(_np(fi), ti.numpy())
    np.testing.assert_allclose(_np(fo), to.numpy())


# -- normalisation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cls,shape", [("BatchNorm1d", (8, 4)), ("BatchNorm1d", (8, 4, 5)), ("BatchNorm2d", (4, 4, 3, 5))]
)
@pytest.mark.parametrize(
    "kw",
    [dict(), dict(momentum=None), dict(affine=False), dict(track_running_stats=False), dict(momentum=0.3, eps=1e-3)],
)
def test_batchnorm_parity_train_and_eval(cls, shape, kw):
    torch = _torch()
    fm, tm = getattr(nn, cls)(4, **kw), getattr(torch.nn, cls)(4, **kw)
    for step in range(3):
        check_parity(fm, tm, randn(*shape, seed=step) * (step + 1) + step, copy=step == 0)
        for (fk, fv), (tk, tv) in zip(fm.state_dict().items(), tm.state_dict().items()):
            assert fk == tk
            np.testing.assert_allclose(_np(fv), tv.numpy(), rtol=1e-5, atol=1e-6, err_msg=fk)
        fm.zero_grad()
        tm.zero_grad()
    fm.eval()
    tm.eval()
    check_parity(fm, tm, randn(*shape, seed=7), copy=False)
    assert repr(fm) == repr(tm)


def test_batchnorm_formula_and_running_stats():
    bn = nn.BatchNorm1d(3, momentum=0.5)
    x = randn(10, 3) * 2 + 1
    y = _np(bn(flow.tensor(x)))
    expected = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(bn.running_mean), 0.5 * x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(_np(bn.running_var), 0.5 + 0.5 * x.var(0, ddof=1), rtol=1e-5)
    assert bn.num_batches_tracked.item() == 1 and bn.num_batches_tracked.dtype == flow.int64
    bn.eval()
    y = _np(bn(flow.tensor(x)))
    np.testing.assert_allclose(
        y, (x - _np(bn.running_mean)) / np.sqrt(_np(bn.running_var) + 1e-5), rtol=1e-5, atol=1e-6
    )
    assert bn.num_batches_tracked.item() == 1
    # momentum=None: the running stats are the plain average of all batches seen
    cum = nn.BatchNorm1d(3, momentum=None)
    xs = [randn(6, 3, seed=s) + s for s in range(4)]
    for b in xs:
        cum(flow.tensor(b))
    np.testing.assert_allclose(_np(cum.running_mean), np.mean([b.mean(0) for b in xs], 0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(flow.randn(2, 3))


def test_batchnorm_state_dict_without_num_batches_tracked():
    bn = nn.BatchNorm2d(2)
    sd = {k: v for k, v in bn.state_dict().items() if k != "num_batches_tracked"}
    bn.load_state_dict(sd)  # old checkpoints (and plain dicts) may lack it, as torch accepts
    assert bn.num_batches_tracked.item() == 0
    bn.reset_running_stats()


@pytest.mark.parametrize(
    "kw",
    [
        dict(normalized_shape=6),
        dict(normalized_shape=(5, 6), eps=1e-3),
        dict(normalized_shape=6, elementwise_affine=False),
        dict(normalized_shape=6, bias=False),
    ],
)
def test_layernorm_parity(kw):
    torch = _torch()
    fm, tm = nn.LayerNorm(**kw), torch.nn.LayerNorm(**kw)
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.randn(p.shape))
    check_parity(fm, tm, randn(3, 5, 6) * 3 + 1)
    assert repr(fm) == repr(tm)


def test_layernorm_formula():
    x = randn(4, 8)
    y = _np(nn.LayerNorm(8)(flow.tensor(x)))
    np.testing.assert_allclose(
        y, (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    "kw",
    [
        dict(num_groups=2, num_channels=6),
        dict(num_groups=3, num_channels=6, affine=False),
        dict(num_groups=6, num_channels=6, eps=1e-3),
    ],
)
def test_groupnorm_parity(kw):
    torch = _torch()
    fm, tm = nn.GroupNorm(**kw), torch.nn.GroupNorm(**kw)
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.randn(p.shape))
    check_parity(fm, tm, randn(2, 6, 4, 3) * 2 - 1)
    assert repr(fm) == repr(tm)
    with pytest.raises(ValueError):
        nn.GroupNorm(4, 6)


@pytest.mark.parametrize(
    "kw",
    [
        dict(normalized_shape=8),
        dict(normalized_shape=(3, 8), eps=1e-4),
        dict(normalized_shape=8, elementwise_affine=False),
    ],
)
def test_rmsnorm_parity(kw):
    torch = _torch()
    fm, tm = nn.RMSNorm(**kw), torch.nn.RMSNorm(**kw)
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.randn(p.shape))
    check_parity(fm, tm, randn(2, 3, 8))
    assert repr(fm) == repr(tm)


def test_rmsnorm_formula():
    x = randn(3, 5)
    y = _np(nn.RMSNorm(5, eps=1e-6)(flow.tensor(x)))
    np.testing.assert_allclose(y, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "cls,shape", [("InstanceNorm1d", (2, 3, 7)), ("InstanceNorm2d", (2, 3, 4, 5)), ("InstanceNorm2d", (3, 4, 5))]
)
def test_instancenorm_parity(cls, shape):
    torch = _torch()
    check_parity(getattr(nn, cls)(3, affine=True), getattr(torch.nn, cls)(3, affine=True), randn(*shape))


# -- embeddings --------------------------------------------------------------------------------------
def test_embedding_parity_and_padding_idx():
    torch = _torch()
    idx = np.array([[1, 2, 0, 4], [4, 3, 2, 0]])
    fm, tm = nn.Embedding(6, 3, padding_idx=0), torch.nn.Embedding(6, 3, padding_idx=0)
    check_parity(fm, tm, idx)
    assert not _np(fm.weight.grad)[0].any()
    assert repr(fm) == repr(tm)
    neg = nn.Embedding(6, 3, padding_idx=-1)
    assert neg.padding_idx == 5 and not _np(neg.weight)[5].any()
    with pytest.raises(ValueError):
        nn.Embedding(6, 3, padding_idx=6)


def test_embedding_from_pretrained():
    w = flow.tensor(randn(5, 2))
    e = nn.Embedding.from_pretrained(w)
    assert not e.weight.requires_grad
    np.testing.assert_array_equal(_np(e(flow.tensor([3, 1]))), _np(w)[[3, 1]])
    e2 = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=1)
    assert e2.weight.requires_grad and e2.padding_idx == 1
    with pytest.raises(ValueError):
        nn.Embedding.from_pretrained(flow.randn(3))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_parity(mode):
    torch = _torch()
    fm, tm = nn.EmbeddingBag(10, 4, mode=mode), torch.nn.EmbeddingBag(10, 4, mode=mode)
    check_parity(fm, tm, np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 3, 3, 6]))
    fm.zero_grad()
    tm.zero_grad()
    check_parity(fm, tm, np.array([[1, 2, 4], [4, 3, 2]]))
    assert repr(fm) == repr(tm)


def test_embedding_bag_per_sample_weights_and_last_offset():
    torch = _torch()
    fm = nn.EmbeddingBag(10, 3, mode="sum", include_last_offset=True)
    tm = torch.nn.EmbeddingBag(10, 3, mode="sum", include_last_offset=True)
    idx, off = np.array([1, 2, 4, 5, 4, 3]), np.array([0, 2, 6])
    check_parity(fm, tm, idx, off, randn(6))
    fm2, tm2 = (
        nn.EmbeddingBag(10, 3, mode="sum", padding_idx=2),
        torch.nn.EmbeddingBag(10, 3, mode="sum", padding_idx=2),
    )
    check_parity(fm2, tm2, idx, np.array([0, 2]))
    with pytest.raises(ValueError):
        nn.EmbeddingBag(3, 3, mode="median")


# -- dropout -------------------------------------------------------------------------------------------
def test_dropout_train_and_eval():
    flow.manual_seed(0)
    d = nn.Dropout(0.25)
    x = flow.ones(200, 500)
    y = _np(d(x))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    d.eval()
    assert np.array_equal(_np(d(x)), _np(x))
    assert not _np(nn.Dropout(1.0)(x)).any()
    np.testing.assert_array_equal(_np(nn.Dropout(0.0)(x)), _np(x))
    assert repr(d) == "Dropout(p=0.25, inplace=False)"
    with pytest.raises(ValueError):
        nn.Dropout(1.5)
    z = _np(nn.Dropout2d(0.5)(flow.ones(4, 50, 3, 3)))
    per_channel = z.reshape(4, 50, 9)
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2).all(-1))


def test_dropout_gradient_matches_mask():
    d = nn.Dropout(0.5)
    x = flow.ones(50, 50, requires_grad=True)
    y = d(x)
    y.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), _np(y))


# -- activations ------------------------------------------------------------------------------------------
ACTIVATIONS = [
    ("ReLU", (), {}),
    ("ReLU6", (), {}),
    ("GELU", (), {}),
    ("GELU", (), {"approximate": "tanh"}),
    ("SiLU", (), {}),
    ("Tanh", (), {}),
    ("Sigmoid", (), {}),
    ("LeakyReLU", (), {}),
    ("LeakyReLU", (0.2,), {}),
    ("Softmax", (1,), {}),
    ("Softmax", (-1,), {}),
    ("LogSoftmax", (1,), {}),
    ("Softmin", (0,), {}),
    ("Mish", (), {}),
    ("Hardswish", (), {}),
    ("Hardsigmoid", (), {}),
    ("ELU", (), {}),
    ("ELU", (0.5,), {}),
    ("CELU", (1.5,), {}),
    ("SELU", (), {}),
    ("Softplus", (), {}),
    ("Softplus", (2.0, 1.0), {}),
    ("Softsign", (), {}),
    ("Tanhshrink", (), {}),
    ("Hardtanh", (-0.5, 0.7), {}),
    ("Threshold", (0.1, -2.0), {}),
    ("GLU", (), {}),
    ("PReLU", (), {}),
    ("PReLU", (3,), {}),
]


@pytest.mark.parametrize("name,args,kw", ACTIVATIONS)
def test_activation_parity(name, args, kw):
    torch = _torch()
    fm, tm = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    x = randn(2, 3, 4) * 3
    x[np.abs(x) < 1e-3] = 0.5  # keep away from kinks where subgradients may differ
    check_parity(fm, tm, x)
    assert repr(fm) == repr(tm)


def test_softmax_implicit_dim_and_inplace():
    x = flow.tensor(randn(3, 4))
    s = _np(nn.Softmax()(x))  # 2-d: dim 1, as torch's legacy rule
    np.testing.assert_allclose(s.sum(1), 1, rtol=1e-6)
    np.testing.assert_allclose(_np(nn.Softmax()(flow.tensor(randn(2, 3, 4)))).sum(0), 1, rtol=1e-6)
    y = flow.tensor([-1.0, 2.0])
    out = nn.ReLU(inplace=True)(y)
    assert _np(y).tolist() == [0.0, 2.0] and _np(out).tolist() == [0.0, 2.0]
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)"
    with pytest.raises(ValueError):
        nn.GELU("fast")
