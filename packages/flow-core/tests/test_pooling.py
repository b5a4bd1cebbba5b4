"""Pooling and resizing (flow.nn.functional max/avg/adaptive pooling, max_unpool, interpolate).

Compared with PyTorch over many configurations (skipped without torch) and with NumPy references
written pixel by pixel (always run); gradients by finite differences; every pooling op passes
opcheck; bad arguments raise OpError/OpTypeError naming the function and the argument.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
import flow.nn.functional as F
from flow.errors import OpError, OpTypeError
from flow.testing import gradcheck, gradgradcheck, opcheck

RNG = np.random.default_rng(4321)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def distinct(*shape):
    """Distinct values, well separated (no max-pool ties, stable finite differences)."""
    n = int(np.prod(shape))
    return ((RNG.permutation(n) + 0.5) * (4.0 / n) - 2.0).reshape(shape)


def leaf(a):
    return flow.tensor(np.asarray(a, np.float64), requires_grad=True)


# -- NumPy references, pixel by pixel ------------------------------------------------------------------
def out_len(L, k, s, p, d, ceil):
    n = (L + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    return n - 1 if ceil and (n - 1) * s >= L + p else n


def np_max_pool2d(x, k, s, p, d=(1, 1), ceil=False):
    N, C, H, W = x.shape
    Ho, Wo = out_len(H, k[0], s[0], p[0], d[0], ceil), out_len(W, k[1], s[1], p[1], d[1], ceil)
    out, idx = np.empty((N, C, Ho, Wo)), np.empty((N, C, Ho, Wo), np.int64)
    for n in range(N):
        for c in range(C):
            for oh in range(Ho):
                for ow in range(Wo):
                    best, bi = -np.inf, -1
                    for i in range(k[0]):
                        for j in range(k[1]):
                            h, w = oh * s[0] - p[0] + i * d[0], ow * s[1] - p[1] + j * d[1]
                            if 0 <= h < H and 0 <= w < W and (bi < 0 or x[n, c, h, w] > best):
                                best, bi = x[n, c, h, w], h * W + w
                    out[n, c, oh, ow], idx[n, c, oh, ow] = best, bi
    return out, idx


def np_avg_pool2d(x, k, s, p, ceil=False, count_include_pad=True, divisor=None):
    N, C, H, W = x.shape
    Ho, Wo = out_len(H, k[0], s[0], p[0], 1, ceil), out_len(W, k[1], s[1], p[1], 1, ceil)
    out = np.zeros((N, C, Ho, Wo))
    for oh in range(Ho):
        for ow in range(Wo):
            h0, w0 = oh * s[0] - p[0], ow * s[1] - p[1]
            h1, w1 = min(h0 + k[0], H + p[0]), min(w0 + k[1], W + p[1])
            size = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
            total = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3))
            div = divisor or (size if count_include_pad else (h1 - h0) * (w1 - w0))
            out[:, :, oh, ow] = total / div
    return out


def np_adaptive_avg2d(x, out):
    N, C, H, W = x.shape
    res = np.zeros((N, C) + out)
    for i in range(out[0]):
        for j in range(out[1]):
            h0, h1 = (i * H) // out[0], math.ceil((i + 1) * H / out[0])
            w0, w1 = (j * W) // out[1], math.ceil((j + 1) * W / out[1])
            res[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return res


def np_bilinear_align_corners(x, size):
    N, C, H, W = x.shape
    out = np.zeros((N, C) + size)
    for i in range(size[0]):
        for j in range(size[1]):
            sh = i * (H - 1) / (size[0] - 1) if size[0] > 1 else 0.0
            sw = j * (W - 1) / (size[1] - 1) if size[1] > 1 else 0.0
            h0, w0 = min(int(sh), H - 1), min(int(sw), W - 1)
            h1, w1 = min(h0 + 1, H - 1), min(w0 + 1, W - 1)
            a, b = sh - h0, sw - w0
            out[:, :, i, j] = (
                (1 - a) * (1 - b) * x[:, :, h0, w0]
                + (1 - a) * b * x[:, :, h0, w1]
                + a * (1 - b) * x[:, :, h1, w0]
                + a * b * x[:, :, h1, w1]
            )
    return out


MAX_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1)),
    dict(kernel_size=3, stride=3, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=2),
]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("kw", MAX_CASES)
def test_max_pool2d_matches_numpy_reference(kw):
    x = distinct(2, 3, 9, 8)
    out, idx = F.max_pool2d(flow.tensor(x), return_indices=True, **kw)
    k = _pair(kw["kernel_size"])
    ref, ridx = np_max_pool2d(
        x,
        k,
        _pair(kw.get("stride", k)),
        _pair(kw.get("padding", 0)),
        _pair(kw.get("dilation", 1)),
        kw.get("ceil_mode", False),
    )
    np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal(idx.numpy(), ridx)
    assert idx.dtype is flow.int64


def test_max_pool2d_gradient_goes_to_the_first_maximum():
    x = np.array([[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, 0.0, 0.0], [5.0, 5.0, 1.0, 1.0], [5.0, 5.0, 1.0, 1.0]]]])
    xt = leaf(x)
    out, idx = F.max_pool2d(xt, 2, return_indices=True)
    np.testing.assert_array_equal(idx.numpy()[0, 0], [[1, 2], [8, 10]])
    out.sum().backward()
    expect = np.zeros_like(x)
    expect.reshape(-1)[[1, 2, 8, 10]] = 1.0
    np.testing.assert_array_equal(xt.grad.numpy(), expect)


def test_max_pool_nan_wins():
    x = distinct(1, 1, 4, 4)
    x[0, 0, 1, 1] = np.nan
    out = F.max_pool2d(flow.tensor(x), 2).numpy()
    assert np.isnan(out[0, 0, 0, 0]) and not np.isnan(out[0, 0, 1, 1])


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
        dict(kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1)),
    ],
)
def test_max_pool2d_gradients_finite_differences(kw):
    assert gradcheck(lambda a: F.max_pool2d(a, **kw), (leaf(distinct(1, 2, 6, 5)),))


AVG_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1)),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, divisor_override=4),
    dict(kernel_size=4, stride=3, padding=2, ceil_mode=True),
    dict(kernel_size=(3, 1), stride=(3, 1), count_include_pad=False),
]


@pytest.mark.parametrize("kw", AVG_CASES)
def test_avg_pool2d_matches_numpy_reference_and_finite_differences(kw):
    x = rand(2, 3, 9, 8)
    out = F.avg_pool2d(flow.tensor(x), **kw)
    k = _pair(kw["kernel_size"])
    ref = np_avg_pool2d(
        x,
        k,
        _pair(kw.get("stride", k)),
        _pair(kw.get("padding", 0)),
        kw.get("ceil_mode", False),
        kw.get("count_include_pad", True),
        kw.get("divisor_override"),
    )
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12)
    assert gradcheck(lambda a: F.avg_pool2d(a, **kw), (leaf(rand(1, 1, 6, 7)),))


def test_pool1d_matches_numpy_reference():
    x = distinct(2, 3, 11)
    out, idx = F.max_pool1d(flow.tensor(x), 3, 2, 1, return_indices=True)
    ref, ridx = np_max_pool2d(x[:, :, None], (1, 3), (1, 2), (0, 1))
    np.testing.assert_array_equal(out.numpy(), ref[:, :, 0])
    np.testing.assert_array_equal(idx.numpy(), ridx[:, :, 0])
    avg = F.avg_pool1d(flow.tensor(x), 4, 3, 2, ceil_mode=True, count_include_pad=False)
    np.testing.assert_allclose(
        avg.numpy(), np_avg_pool2d(x[:, :, None], (1, 4), (1, 3), (0, 2), True, False)[:, :, 0], rtol=1e-12, atol=1e-12
    )
    assert F.max_pool1d(flow.tensor(x[0]), 2).shape == (3, 5)  # unbatched


@pytest.mark.parametrize("out", [(3, 4), (4, 3), (1, 1), (5, 7), (9, 8), (12, 11)])
def test_adaptive_avg_pool2d_matches_numpy_reference(out):
    x = rand(2, 3, 9, 8)
    np.testing.assert_allclose(
        F.adaptive_avg_pool2d(flow.tensor(x), out).numpy(), np_adaptive_avg2d(x, out), rtol=1e-12, atol=1e-12
    )


def test_adaptive_pooling_gradients_and_double_backward():
    assert gradcheck(lambda a: F.adaptive_avg_pool2d(a, (3, 2)), (leaf(rand(1, 2, 5, 7)),))
    assert gradcheck(lambda a: F.adaptive_avg_pool1d(a, 4), (leaf(rand(1, 2, 7)),))
    assert gradcheck(lambda a: F.adaptive_max_pool2d(a, (3, 2)), (leaf(distinct(1, 2, 5, 7)),))
    # the gradient of a pooling is linear in the output gradient: differentiate it again
    x = leaf(distinct(1, 2, 5, 5))
    for fn in (
        lambda a: F.max_pool2d(a, 3, 2, 1),
        lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True),
        lambda a: F.adaptive_avg_pool2d(a, 3),
    ):
        y = fn(x)
        v = leaf(rand(*y.shape))
        (g,) = flow.autograd.grad((y * v).sum(), [x], create_graph=True)
        (gv,) = flow.autograd.grad((g * flow.tensor(rand(*x.shape))).sum(), [v])
        assert gv.shape == y.shape


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: F.max_pool2d(a, 3, 2, 1) * a.sum(),
        lambda a: F.avg_pool2d(a, 2) * a.sum(),
        lambda a: F.adaptive_avg_pool2d(a, (3, 2)) ** 2,
        lambda a: F.interpolate(a, scale_factor=1.5, mode="bilinear") ** 2,
    ],
)
def test_second_derivatives(fn):
    assert gradgradcheck(fn, (leaf(distinct(1, 2, 5, 5)),))


def test_adaptive_max_pool2d_matches_windows():
    x = distinct(1, 2, 7, 5)
    out, idx = F.adaptive_max_pool2d(flow.tensor(x), (3, 2), return_indices=True)
    for i in range(3):
        for j in range(2):
            h0, h1 = (i * 7) // 3, math.ceil((i + 1) * 7 / 3)
            w0, w1 = (j * 5) // 2, math.ceil((j + 1) * 5 / 2)
            win = x[:, :, h0:h1, w0:w1]
            np.testing.assert_array_equal(out.numpy()[:, :, i, j], win.max(axis=(2, 3)))
            flat = idx.numpy()[:, :, i, j]
            np.testing.assert_array_equal(x.reshape(1, 2, -1)[0, [0, 1], flat[0]], win.max(axis=(2, 3))[0])


def test_max_unpool2d_inverts_max_pool2d():
    x = distinct(1, 2, 6, 6)
    out, idx = F.max_pool2d(flow.tensor(x), 2, return_indices=True)
    up = F.max_unpool2d(out, idx, 2).numpy()
    mask = up != 0
    np.testing.assert_array_equal(up[mask], x[mask])
    assert mask.sum() == 18


def test_interpolate_nearest_and_bilinear_reference():
    x = rand(1, 2, 3, 4)
    up = F.interpolate(flow.tensor(x), scale_factor=2).numpy()
    np.testing.assert_array_equal(up, x.repeat(2, axis=2).repeat(2, axis=3))
    bl = F.interpolate(flow.tensor(x), size=(5, 7), mode="bilinear", align_corners=True).numpy()
    np.testing.assert_allclose(bl, np_bilinear_align_corners(x, (5, 7)), rtol=1e-12, atol=1e-12)
    # align_corners=False with an integer factor: the classic half-pixel weights 1/4, 3/4
    one = F.interpolate(flow.tensor(np.array([[[0.0, 4.0]]])), scale_factor=2, mode="linear").numpy()
    np.testing.assert_allclose(one, [[[0.0, 1.0, 3.0, 4.0]]])
    assert gradcheck(lambda a: F.interpolate(a, size=(4, 7), mode="bilinear"), (leaf(rand(1, 1, 3, 5)),))
    assert gradcheck(lambda a: F.interpolate(a, scale_factor=1.5), (leaf(rand(1, 1, 3, 4)),))


def test_functional_exports():
    for name in (
        "max_pool1d",
        "max_pool2d",
        "avg_pool1d",
        "avg_pool2d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_max_pool2d",
        "interpolate",
    ):
        assert callable(getattr(F, name))


@pytest.mark.parametrize(
    "op",
    [
        "max_pool2d",
        "max_pool2d_backward",
        "max_pool2d_gather",
        "max_unpool2d",
        "avg_pool2d",
        "avg_pool2d_backward",
        "adaptive_max_pool2d",
    ],
)
def test_opcheck(op):
    assert opcheck(op)["grad_checked"] > 0


# -- against PyTorch ------------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


def compare(flow_fn, torch_fn, x, dtype=np.float64, seed=0, exact=False):
    torch = _torch()
    x = np.asarray(x, dtype)
    fx, tx = flow.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    a, b = flow_fn(fx), torch_fn(tx)
    if isinstance(b, tuple):
        np.testing.assert_array_equal(a[1].numpy(), b[1].numpy())
        a, b = a[0], b[0]
    assert tuple(a.shape) == tuple(b.shape) and a.dtype.np == np.dtype(dtype)
    t = (
        dict(rtol=0, atol=0)
        if exact
        else dict(rtol=1e-5, atol=1e-6)
        if dtype == np.float32
        else dict(rtol=1e-10, atol=1e-12)
    )
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **t)
    go = np.random.default_rng(seed).standard_normal(tuple(b.shape)).astype(dtype)
    a.backward(flow.tensor(go))
    b.backward(torch.tensor(go))
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), **(t if not exact else dict(rtol=1e-12, atol=1e-12)))


@pytest.mark.parametrize("kw", MAX_CASES + [dict(kernel_size=2, stride=1, padding=1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_pool2d_vs_torch(kw, dtype):
    torch = _torch()
    compare(
        lambda x: F.max_pool2d(x, return_indices=True, **kw),
        lambda x: torch.nn.functional.max_pool2d(x, return_indices=True, **kw),
        distinct(2, 3, 9, 8),
        dtype,
        exact=True,
    )


def test_max_pool2d_ties_vs_torch():
    torch = _torch()
    x = RNG.integers(0, 3, (2, 2, 8, 8)).astype(np.float64)  # many ties
    for kw in (dict(kernel_size=2), dict(kernel_size=3, stride=1, padding=1), dict(kernel_size=3, stride=2)):
        compare(
            lambda t, kw=kw: F.max_pool2d(t, return_indices=True, **kw),
            lambda t, kw=kw: torch.nn.functional.max_pool2d(t, return_indices=True, **kw),
            x,
            exact=True,
        )


@pytest.mark.parametrize("special", [np.nan, -np.inf])
def test_max_pool2d_nan_and_minus_inf_vs_torch(special):
    torch = _torch()
    x = distinct(1, 2, 7, 7)
    x[0, 0, :3, :3] = special  # whole windows (with padding) of NaN / -inf
    x[0, 1, 2, 4] = x[0, 1, 5, 1] = special
    for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, ceil_mode=True)):
        tx = torch.tensor(x)
        a, ai = F.max_pool2d(flow.tensor(x), return_indices=True, **kw)
        b, bi = torch.nn.functional.max_pool2d(tx, return_indices=True, **kw)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(ai.numpy(), bi.numpy())


@pytest.mark.parametrize("kw", AVG_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_avg_pool2d_vs_torch(kw, dtype):
    torch = _torch()
    compare(lambda x: F.avg_pool2d(x, **kw), lambda x: torch.nn.functional.avg_pool2d(x, **kw), rand(2, 3, 9, 8), dtype)


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=2),
        dict(kernel_size=4, stride=3, padding=2, ceil_mode=True),
        dict(kernel_size=3, dilation=2, padding=1),
    ],
)
def test_pool1d_vs_torch(kw):
    torch = _torch()
    x = distinct(2, 3, 13)
    compare(
        lambda t: F.max_pool1d(t, return_indices=True, **kw),
        lambda t: torch.nn.functional.max_pool1d(t, return_indices=True, **kw),
        x,
        exact=True,
    )
    kw = {k: v for k, v in kw.items() if k != "dilation"}
    compare(lambda t: F.avg_pool1d(t, **kw), lambda t: torch.nn.functional.avg_pool1d(t, **kw), x)
    compare(
        lambda t: F.avg_pool1d(t, count_include_pad=False, **kw),
        lambda t: torch.nn.functional.avg_pool1d(t, count_include_pad=False, **kw),
        x,
    )


@pytest.mark.parametrize("out", [(3, 4), (4, 3), 1, (5, 7), (9, 8), (2, None), (12, 11), (3, 3)])
def test_adaptive_pool2d_vs_torch(out):
    torch = _torch()
    x = distinct(2, 3, 9, 8)
    compare(lambda t: F.adaptive_avg_pool2d(t, out), lambda t: torch.nn.functional.adaptive_avg_pool2d(t, out), x)
    compare(
        lambda t: F.adaptive_avg_pool2d(t, out),
        lambda t: torch.nn.functional.adaptive_avg_pool2d(t, out),
        x,
        np.float32,
    )
    compare(
        lambda t: F.adaptive_max_pool2d(t, out, return_indices=True),
        lambda t: torch.nn.functional.adaptive_max_pool2d(t, out, return_indices=True),
        x,
        exact=True,
    )


@pytest.mark.parametrize("out", [1, 3, 4, 7, 10])
def test_adaptive_pool1d_vs_torch(out):
    torch = _torch()
    x = distinct(2, 3, 7)
    compare(lambda t: F.adaptive_avg_pool1d(t, out), lambda t: torch.nn.functional.adaptive_avg_pool1d(t, out), x)
    compare(
        lambda t: F.adaptive_max_pool1d(t, out, return_indices=True),
        lambda t: torch.nn.functional.adaptive_max_pool1d(t, out, return_indices=True),
        x,
        exact=True,
    )


def test_max_unpool_vs_torch():
    torch = _torch()
    x = distinct(1, 2, 7, 7)
    _, idx = torch.nn.functional.max_pool2d(torch.tensor(x), 2, return_indices=True)
    y = rand(*idx.shape)
    a = F.max_unpool2d(flow.tensor(y), flow.tensor(idx.numpy()), 2, output_size=(7, 7))
    b = torch.nn.functional.max_unpool2d(torch.tensor(y), idx, 2, output_size=(7, 7))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    _, idx1 = torch.nn.functional.max_pool1d(torch.tensor(x[0]), 3, 2, return_indices=True)
    y1 = rand(*idx1.shape)
    np.testing.assert_array_equal(
        F.max_unpool1d(flow.tensor(y1), flow.tensor(idx1.numpy()), 3, 2).numpy(),
        torch.nn.functional.max_unpool1d(torch.tensor(y1), idx1, 3, 2).numpy(),
    )


INTERP_4D = [
    dict(scale_factor=2),
    dict(size=(5, 13)),
    dict(scale_factor=(0.5, 1.7)),
    dict(size=(4, 4)),
    dict(scale_factor=3, mode="nearest-exact"),
    dict(size=(5, 13), mode="nearest-exact"),
    dict(scale_factor=2, mode="bilinear"),
    dict(scale_factor=1.7, mode="bilinear"),
    dict(size=(4, 17), mode="bilinear", align_corners=True),
    dict(size=(4, 17), mode="bilinear", align_corners=False),
    dict(scale_factor=0.6, mode="bilinear"),
    dict(size=(1, 1), mode="bilinear", align_corners=True),
    dict(scale_factor=1.3, mode="bilinear", recompute_scale_factor=True),
    dict(scale_factor=1.3, mode="nearest", recompute_scale_factor=True),
    dict(size=(3, 5), mode="area"),
    dict(scale_factor=0.5, mode="area"),
]


@pytest.mark.parametrize("kw", INTERP_4D)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_interpolate_4d_vs_torch(kw, dtype):
    torch = _torch()
    compare(
        lambda t: F.interpolate(t, **kw), lambda t: torch.nn.functional.interpolate(t, **kw), rand(2, 3, 9, 8), dtype
    )


@pytest.mark.parametrize(
    "kw",
    [
        dict(scale_factor=2, mode="linear"),
        dict(size=7, mode="linear", align_corners=True),
        dict(size=7),
        dict(scale_factor=0.4, mode="linear"),
        dict(size=5, mode="area"),
        dict(scale_factor=2.5, mode="nearest-exact"),
    ],
)
def test_interpolate_3d_vs_torch(kw):
    torch = _torch()
    compare(lambda t: F.interpolate(t, **kw), lambda t: torch.nn.functional.interpolate(t, **kw), rand(2, 3, 11))


@pytest.mark.parametrize(
    "kw",
    [
        dict(scale_factor=1.5, mode="trilinear"),
        dict(size=(4, 3, 7)),
        dict(size=(2, 6, 3), mode="trilinear", align_corners=True),
    ],
)
def test_interpolate_5d_vs_torch(kw):
    torch = _torch()
    compare(lambda t: F.interpolate(t, **kw), lambda t: torch.nn.functional.interpolate(t, **kw), rand(1, 2, 3, 4, 5))


# -- errors ---------------------------------------------------------------------------------------------------
def _t(*shape):
    return flow.tensor(rand(*shape))


@pytest.mark.parametrize(
    "call,err,words",
    [
        (lambda: F.max_pool2d(_t(4, 4), 2), OpError, ["max_pool2d", "input", "3-d or 4-d"]),
        (lambda: F.max_pool2d(_t(1, 1, 4, 4), 0), OpError, ["max_pool2d", "kernel_size", "positive"]),
        (lambda: F.max_pool2d(_t(1, 1, 4, 4), 2, padding=-1), OpError, ["max_pool2d", "padding", "non-negative"]),
        (lambda: F.max_pool2d(_t(1, 1, 4, 4), 2, padding=2), OpError, ["max_pool2d", "padding", "half"]),
        (lambda: F.max_pool2d(_t(1, 1, 2, 2), 3), OpError, ["max_pool2d", "output size", "too small"]),
        (lambda: F.max_pool2d(_t(1, 1, 4, 4), 2, stride=(1, 1, 1)), OpTypeError, ["max_pool2d", "stride"]),
        (lambda: F.max_pool1d(_t(1, 1, 4, 4), 2), OpError, ["max_pool1d", "2-d or 3-d"]),
        (lambda: F.max_pool1d(_t(1, 1, 2), 3), OpError, ["max_pool1d", "too small"]),
        (lambda: F.avg_pool2d(_t(1, 1, 4, 4), 2, divisor_override=0), OpError, ["avg_pool2d", "divisor_override"]),
        # as PyTorch on the CPU: int64 averages (truncating), other integer dtypes do not
        (
            lambda: F.avg_pool2d(flow.tensor(np.ones((1, 1, 4, 4), np.int32)), 2),
            OpTypeError,
            ["avg_pool2d", "floating-point or int64", "int32"],
        ),
        (lambda: F.avg_pool1d(_t(1, 1, 4), 2, padding=-1), OpError, ["avg_pool1d", "padding"]),
        (lambda: F.adaptive_avg_pool2d(_t(1, 1, 4, 4), 0), OpError, ["adaptive_avg_pool2d", "output_size", ">= 1"]),
        (lambda: F.adaptive_avg_pool2d(_t(1, 1, 4, 4), (1, 2, 3)), OpError, ["adaptive_avg_pool2d", "output_size"]),
        (lambda: F.adaptive_avg_pool1d(_t(1, 4, 4, 4), 2), OpError, ["adaptive_avg_pool1d", "2-d or 3-d"]),
        (lambda: F.adaptive_max_pool2d(_t(4), 2), OpError, ["adaptive_max_pool2d", "3-d or 4-d"]),
        (lambda: F.interpolate(_t(1, 1, 4, 4)), OpError, ["interpolate", "size", "scale_factor"]),
        (lambda: F.interpolate(_t(1, 1, 4, 4), size=2, scale_factor=2), OpError, ["interpolate", "exactly one"]),
        (lambda: F.interpolate(_t(1, 1, 4, 4), scale_factor=0.1), OpError, ["interpolate", "output size"]),
        (lambda: F.interpolate(_t(1, 1, 4, 4), scale_factor=-1.0), OpError, ["interpolate", "scale_factor"]),
        (lambda: F.interpolate(_t(1, 1, 4, 4), size=(2, 2, 2)), OpError, ["interpolate", "size"]),
        (lambda: F.interpolate(_t(1, 1, 4, 4), size=2, mode="linear"), OpError, ["interpolate", "linear", "3-d"]),
        (lambda: F.interpolate(_t(1, 1, 4, 4), size=2, mode="cubic"), OpError, ["interpolate", "mode"]),
        (lambda: F.interpolate(_t(1, 1, 4, 4), size=2, align_corners=True), OpError, ["interpolate", "align_corners"]),
        (lambda: F.interpolate(_t(4, 4), size=2), OpError, ["interpolate", "3-d or 4-d or 5-d"]),
        (
            lambda: F.max_unpool2d(_t(1, 1, 2, 2), flow.tensor(np.full((1, 1, 2, 2), 99)), 2),
            OpError,
            ["max_unpool2d", "indices"],
        ),
    ],
)
def test_bad_arguments(call, err, words):
    with pytest.raises(err) as info:
        call()
    msg = str(info.value)
    for word in words:
        assert word in msg, f"{word!r} not in {msg!r}"


def test_op_level_errors_name_the_op():
    g = _t(1, 1, 2, 2)
    with pytest.raises(OpTypeError, match="max_pool2d_backward.*int64"):
        flow.ops.call("max_pool2d_backward", g, g, input_size=(4, 4))
    with pytest.raises(OpError, match="avg_pool2d_backward.*pools to"):
        flow.ops.call(
            "avg_pool2d_backward",
            g,
            input_size=(9, 9),
            kernel_size=(2, 2),
            stride=(2, 2),
            padding=(0, 0),
            ceil_mode=False,
            count_include_pad=True,
            divisor_override=None,
        )
