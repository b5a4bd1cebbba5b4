"""Resizing, padding, fold/unfold, pixel shuffle, 3-d conv/pooling, grid sampling, margin losses and the
small layers, against PyTorch: outputs, input and parameter gradients, state dict keys."""

from __future__ import annotations

import numpy as np
import pytest
from _layer_parity import check_parity, randn

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import OpError, OpTypeError

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RTOL, ATOL = 1e-5, 1e-5


def fparity(ffn, tfn, *arrays, grad_args=None, rtol=RTOL, atol=ATOL, **kw):
    """Call ``ffn``/``tfn`` on the same arrays (float ones require grad); compare values and gradients."""
    fin, tin = [], []
    for i, a in enumerate(arrays):
        g = isinstance(a, np.ndarray) and a.dtype.kind == "f" and (grad_args is None or i in grad_args)
        fin.append(flow.tensor(a, requires_grad=g) if isinstance(a, np.ndarray) else a)
        tin.append(torch.tensor(a, requires_grad=g) if isinstance(a, np.ndarray) else a)
    fo, to = ffn(*fin, **kw), tfn(*tin, **kw)
    assert tuple(fo.shape) == tuple(to.shape)
    np.testing.assert_allclose(fo.detach().numpy(), to.detach().numpy(), rtol=rtol, atol=atol)
    w = np.random.default_rng(1).standard_normal(tuple(to.shape)).astype(to.detach().numpy().dtype)
    (fo * flow.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    for f, t in zip(fin, tin):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol)


def same_keys(fm, tm):
    assert list(fm.state_dict()) == list(tm.state_dict())


# -- fold / unfold / pixel shuffle -------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw", [dict(kernel_size=2), dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))]
)
def test_unfold_fold(kw):
    fparity(F.unfold, TF.unfold, randn(2, 3, 6, 7), **kw)
    L = F.unfold(flow.zeros(2, 3, 6, 7), **kw).shape[-1]
    K = 6 if kw["kernel_size"] == (2, 3) else 4
    fparity(F.fold, TF.fold, randn(2, 3 * K, L), output_size=(6, 7), **kw)
    fparity(F.unfold, TF.unfold, randn(3, 6, 7), **kw)  # unbatched


def test_fold_unfold_modules_and_errors():
    check_parity(nn.Unfold(3, padding=1, stride=2), torch.nn.Unfold(3, padding=1, stride=2), randn(1, 2, 5, 5))
    check_parity(nn.Fold((4, 5), 2), torch.nn.Fold((4, 5), 2), randn(2, 8, 12))
    with pytest.raises(OpError, match="expected size of input's dimension 2 to be 12"):
        F.fold(flow.randn(2, 8, 10), (4, 5), 2)
    with pytest.raises(OpError, match="divisible by the product of kernel_size"):
        F.fold(flow.randn(2, 7, 12), (4, 5), 2)
    with pytest.raises(OpError, match="can't be greater than the padded input"):
        F.unfold(flow.randn(1, 1, 2, 2), 3)


def test_pixel_shuffle():
    fparity(lambda x: F.pixel_shuffle(x, 2), lambda x: TF.pixel_shuffle(x, 2), randn(2, 8, 3, 4))
    fparity(lambda x: F.pixel_unshuffle(x, 3), lambda x: TF.pixel_unshuffle(x, 3), randn(2, 1, 2, 6, 9))
    check_parity(nn.PixelShuffle(3), torch.nn.PixelShuffle(3), randn(1, 18, 2, 2))
    check_parity(nn.PixelUnshuffle(2), torch.nn.PixelUnshuffle(2), randn(1, 2, 4, 6))
    with pytest.raises(OpError, match="divisible by upscale_factor"):
        F.pixel_shuffle(flow.randn(1, 6, 2, 2), 2)
    with pytest.raises(OpError, match="must be divisible by downscale_factor"):
        F.pixel_unshuffle(flow.randn(1, 1, 3, 4), 2)
    with pytest.raises(OpTypeError, match="'upscale_factor' must be an int"):
        F.pixel_shuffle(flow.randn(1, 4, 2, 2), 2.0)


# -- resizing and padding layers -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.Upsample(scale_factor=2),
        lambda m: m.Upsample(size=(5, 7), mode="bilinear", align_corners=False),
        lambda m: m.Upsample(scale_factor=(1.5, 2.0), mode="nearest"),
        lambda m: m.UpsamplingNearest2d(scale_factor=3),
        lambda m: m.UpsamplingBilinear2d(size=(6, 5)),
    ],
)
def test_upsample_layers(make):
    check_parity(make(nn), make(torch.nn), randn(2, 3, 4, 4))


@pytest.mark.parametrize(
    "name,args,shape",
    [
        ("ReflectionPad1d", (2,), (2, 3, 5)),
        ("ReflectionPad2d", ((1, 2, 0, 3),), (2, 3, 5, 6)),
        ("ReplicationPad1d", ((3, 1),), (3, 5)),
        ("ReplicationPad2d", (2,), (1, 2, 3, 4)),
        ("ConstantPad1d", ((2, 1), 1.5), (2, 3, 4)),
        ("ConstantPad2d", (1, -0.5), (2, 3, 4)),
        ("ZeroPad1d", ((0, 2),), (2, 3, 4)),
        ("ZeroPad2d", ((1, 0, 2, 1),), (1, 2, 3, 4)),
        ("ReflectionPad3d", (1,), (1, 2, 3, 3, 3)),
        ("ConstantPad3d", (1, 2.0), (1, 2, 2, 2, 2)),
    ],
)
def test_padding_layers(name, args, shape):
    fm, tm = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    check_parity(fm, tm, randn(*shape))
    assert repr(fm) == repr(tm)


def test_padding_errors():
    with pytest.raises(ValueError, match="tuple of 4 ints"):
        nn.ReflectionPad2d((1, 2))
    with pytest.raises(ValueError, match="expected a 2-d or 3-d input"):
        nn.ZeroPad1d(1)(flow.randn(4))
    with pytest.raises(OpError, match="must be less than the size"):
        nn.ReflectionPad1d(3)(flow.randn(1, 3))


# -- small layers ----------------------------------------------------------------------------------
def test_small_layers():
    check_parity(nn.LogSigmoid(), torch.nn.LogSigmoid(), randn(3, 4) * 10)
    check_parity(nn.Softmax2d(), torch.nn.Softmax2d(), randn(2, 3, 4, 5))
    check_parity(nn.Softmax2d(), torch.nn.Softmax2d(), randn(3, 4, 5))
    check_parity(nn.CosineSimilarity(dim=0), torch.nn.CosineSimilarity(dim=0), randn(4, 3), randn(4, 3, seed=1))
    check_parity(nn.PairwiseDistance(p=1.5), torch.nn.PairwiseDistance(p=1.5), randn(4, 3), randn(4, 3, seed=1))
    check_parity(
        nn.LocalResponseNorm(3, 0.1, 0.6, 2.0), torch.nn.LocalResponseNorm(3, 0.1, 0.6, 2.0), randn(2, 5, 3, 3)
    )
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D"):
        nn.Softmax2d()(flow.randn(3, 4))


# -- 3-d convolution and pooling -------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2),
        dict(padding="same", bias=False),
        dict(padding=1, padding_mode="reflect"),
    ],
)
def test_conv3d(kw):
    fm, tm = nn.Conv3d(4, 6, (3, 2, 3), **kw), torch.nn.Conv3d(4, 6, (3, 2, 3), **kw)
    same_keys(fm, tm)
    check_parity(fm, tm, randn(2, 4, 5, 6, 7), rtol=1e-4, atol=1e-4)


def test_conv3d_functional_unbatched_and_errors():
    fparity(F.conv3d, TF.conv3d, randn(2, 4, 4, 5), randn(3, 2, 2, 2, 2), randn(3), rtol=1e-4, atol=1e-4)
    with pytest.raises(OpError, match="expected 'input' with 4 channels"):
        F.conv3d(flow.randn(1, 3, 4, 4, 4), flow.randn(2, 4, 1, 1, 1))
    with pytest.raises(OpError, match="'weight' to be 5-d"):
        F.conv3d(flow.randn(1, 3, 4, 4, 4), flow.randn(2, 3, 1, 1))
    with pytest.raises(OpError, match="can't be greater than the padded input"):
        F.conv3d(flow.randn(1, 1, 2, 4, 4), flow.randn(1, 1, 3, 1, 1))


def test_conv3d_double_backward():
    # conv3d is built from the conv2d ops, whose gradients are differentiable again
    x, w = randn(1, 2, 4, 4, 4).astype(np.float64), randn(3, 2, 2, 2, 2, seed=1).astype(np.float64)
    fx, fw = flow.tensor(x, requires_grad=True), flow.tensor(w, requires_grad=True)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    fo, to = F.conv3d(fx, fw, stride=2, padding=1), TF.conv3d(tx, tw, stride=2, padding=1)
    (fg,) = flow.autograd.grad((fo * fo).sum(), fx, create_graph=True)
    (tg,) = torch.autograd.grad((to * to).sum(), tx, create_graph=True)
    (fg * fg).sum().backward()
    (tg * tg).sum().backward()
    np.testing.assert_allclose(fw.grad.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 1, 0), dilation=(1, 2, 1), ceil_mode=True),
    ],
)
def test_max_pool3d(kw):
    check_parity(nn.MaxPool3d(**kw), torch.nn.MaxPool3d(**kw), randn(2, 3, 5, 6, 7))
    x = randn(2, 3, 5, 6, 7)
    fo, fi = F.max_pool3d(flow.tensor(x), return_indices=True, **kw)
    to, ti = TF.max_pool3d(torch.tensor(x), return_indices=True, **kw)
    np.testing.assert_array_equal(fi.numpy(), ti.numpy())
    np.testing.assert_array_equal(fo.numpy(), to.numpy())


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("divisor_override", [None, 5])
def test_avg_pool3d(count_include_pad, divisor_override):
    kw = dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=1, ceil_mode=True)
    kw.update(count_include_pad=count_include_pad, divisor_override=divisor_override)
    check_parity(nn.AvgPool3d(**kw), torch.nn.AvgPool3d(**kw), randn(2, 3, 5, 6, 7))
    check_parity(nn.AvgPool3d(2), torch.nn.AvgPool3d(2), randn(3, 4, 4, 4))  # unbatched
    with pytest.raises(OpError, match="at most half of the kernel size"):
        F.avg_pool3d(flow.randn(1, 1, 4, 4, 4), 2, padding=2)


# -- grid_sample / affine_grid ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(mode, padding_mode, align_corners):
    x = randn(2, 3, 5, 6)
    grid = np.random.default_rng(3).uniform(-1.4, 1.4, (2, 4, 3, 2)).astype(np.float32)
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    # nearest sampling has no gradient with respect to the grid
    fparity(F.grid_sample, TF.grid_sample, x, grid, grad_args=(0, 1) if mode == "bilinear" else (0,), **kw)


def test_grid_sample_errors():
    x = flow.randn(1, 2, 3, 3)
    with pytest.raises(OpError, match="'mode' must be one of"):
        F.grid_sample(x, flow.zeros(1, 2, 2, 2), mode="bicubic")
    with pytest.raises(OpError, match="'padding_mode' must be one of"):
        F.grid_sample(x, flow.zeros(1, 2, 2, 2), padding_mode="wrap")
    with pytest.raises(OpError, match=r"expected 'grid' of shape \(N=1"):
        F.grid_sample(x, flow.zeros(2, 2, 2, 2))
    with pytest.raises(OpTypeError, match="one dtype"):
        F.grid_sample(x, flow.zeros(1, 2, 2, 2, dtype=flow.float64))


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid(align_corners):
    theta = randn(2, 2, 3)
    fparity(F.affine_grid, TF.affine_grid, theta, size=(2, 3, 4, 5), align_corners=align_corners)
    fparity(F.affine_grid, TF.affine_grid, theta, size=(2, 1, 1, 3), align_corners=align_corners)
    # the spatial-transformer round trip: identity theta samples the input back
    ident = flow.tensor([[[1.0, 0, 0], [0, 1.0, 0]]])
    x = flow.randn(1, 2, 4, 5)
    g = F.affine_grid(ident, (1, 2, 4, 5), align_corners=align_corners)
    np.testing.assert_allclose(F.grid_sample(x, g, align_corners=align_corners).numpy(), x.numpy(), atol=1e-6)
    with pytest.raises(OpError, match=r"shape \(N, 2, 3\)"):
        F.affine_grid(flow.randn(2, 3, 3), (2, 3, 4, 5))


# -- margin losses ---------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multi_margin_loss(p, reduction):
    x, y = randn(5, 4), np.array([0, 3, 2, 1, 3])
    w = np.random.default_rng(2).uniform(0.5, 2.0, 4).astype(np.float32)
    check_parity(
        nn.MultiMarginLoss(p=p, margin=0.7, weight=flow.tensor(w), reduction=reduction),
        torch.nn.MultiMarginLoss(p=p, margin=0.7, weight=torch.tensor(w), reduction=reduction),
        x,
        y,
    )
    fparity(lambda a: F.multi_margin_loss(a, flow.tensor(2)), lambda a: TF.multi_margin_loss(a, torch.tensor(2)), x[0])


def test_multilabel_margin_loss():
    x = randn(4, 5)
    y = np.array([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 1, 2, 3, 4], [4, 4, -1, 0, 0]])
    for reduction in ("mean", "sum", "none"):
        check_parity(
            nn.MultiLabelMarginLoss(reduction=reduction), torch.nn.MultiLabelMarginLoss(reduction=reduction), x, y
        )
    fparity(
        lambda a: F.multilabel_margin_loss(a, flow.tensor([2, 0, -1, 1, 1])),
        lambda a: TF.multilabel_margin_loss(a, torch.tensor([2, 0, -1, 1, 1])),
        x[0],
    )


def test_margin_loss_errors():
    x = flow.randn(3, 4)
    with pytest.raises(OpError, match=r"class indices in \[0, 4\)"):
        F.multi_margin_loss(x, flow.tensor([0, 4, 1]))
    with pytest.raises(OpError, match="only p == 1 and p == 2"):
        F.multi_margin_loss(x, flow.tensor([0, 1, 1]), p=3)
    with pytest.raises(OpTypeError, match="integer tensor of class indices"):
        F.multi_margin_loss(x, flow.tensor([0.0, 1.0, 1.0]))
    with pytest.raises(OpError, match="must have the shape of 'input'"):
        F.multilabel_margin_loss(x, flow.tensor([0, 1, 1]))
    with pytest.raises(OpError, match="or -1, got 7"):
        F.multilabel_margin_loss(x, flow.tensor([[7, -1, 0, 0]] * 3))
