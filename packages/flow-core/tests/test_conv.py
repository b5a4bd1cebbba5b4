"""Convolutions (flow.nn.functional.conv1d/conv2d/conv_transpose1d/conv_transpose2d and their ops).

Forward values and gradients are compared with PyTorch over many configurations (skipped without
torch) and with a NumPy reference (always run); every op passes opcheck; bad arguments raise
OpError/OpTypeError naming the function and the argument.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn.functional as F
from flow.errors import OpError, OpTypeError
from flow.ops import nn_conv
from flow.testing import gradcheck, gradgradcheck, opcheck

RNG = np.random.default_rng(1234)
# torch warns that it copies the input for padding='same' with an even kernel
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if np.dtype(dtype) == np.float32 else dict(rtol=1e-9, atol=1e-10)


# -- NumPy reference: one tensordot per output pixel ----------------------------------------------------
def np_conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    x = np.pad(x, ((0, 0), (0, 0), padding[:2], padding[2:]))
    N, C, H, W = x.shape
    O, Cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    Ho, Wo = (H - dh * (kh - 1) - 1) // sh + 1, (W - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((N, O, Ho, Wo))
    Og = O // groups
    for g in range(groups):
        for oh in range(Ho):
            for ow in range(Wo):
                patch = x[
                    :,
                    g * Cg : (g + 1) * Cg,
                    oh * sh : oh * sh + dh * (kh - 1) + 1 : dh,
                    ow * sw : ow * sw + dw * (kw - 1) + 1 : dw,
                ]
                out[:, g * Og : (g + 1) * Og, oh, ow] = np.tensordot(
                    patch, w[g * Og : (g + 1) * Og], axes=([1, 2, 3], [1, 2, 3])
                )
    if b is not None:
        out += b[None, :, None, None]
    return out


def np_conv_transpose2d(x, w, stride, padding, output_padding, dilation, groups):
    """Scatter each input pixel times the kernel into the output (the definition)."""
    N, Cin, H, W = x.shape
    _, Cog, kh, kw = w.shape
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    Ho = (H - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    Wo = (W - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    full = np.zeros((N, Cog * groups, Ho + 2 * ph + kh * dh + sh, Wo + 2 * pw + kw * dw + sw))
    Cig = Cin // groups
    for g in range(groups):
        for h in range(H):
            for v in range(W):
                for i in range(kh):
                    for j in range(kw):
                        full[:, g * Cog : (g + 1) * Cog, h * sh + i * dh, v * sw + j * dw] += (
                            x[:, g * Cig : (g + 1) * Cig, h, v] @ w[g * Cig : (g + 1) * Cig, :, i, j]
                        )
    return full[:, :, ph : ph + Ho, pw : pw + Wo]


NP_CASES = [
    ((2, 3, 6, 7), (4, 3, 3, 3), dict(stride=1, padding=1)),
    ((1, 4, 7, 6), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    ((2, 2, 5, 5), (3, 2, 1, 1), dict()),
    ((1, 3, 8, 8), (2, 3, 4, 4), dict(stride=3, padding=2)),
    ((1, 2, 6, 6), (2, 2, 2, 3), dict(padding="same", dilation=2)),
    ((1, 2, 6, 6), (2, 2, 2, 3), dict(padding="valid")),
]


def _explicit(padding, ks, dilation):
    """functional padding argument -> (top, bottom, left, right), as torch applies it."""
    d = (dilation, dilation) if isinstance(dilation, int) else dilation
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":
        t = [di * (k - 1) for di, k in zip(d, ks)]
        return (t[0] // 2, t[0] - t[0] // 2, t[1] // 2, t[1] - t[1] // 2)
    p = (padding, padding) if isinstance(padding, int) else padding
    return (p[0], p[0], p[1], p[1])


@pytest.mark.parametrize("xs,ws,kw", NP_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d_matches_numpy_reference(xs, ws, kw, bias):
    x, w = rand(*xs), rand(*ws)
    b = rand(ws[0]) if bias else None
    out = F.conv2d(flow.tensor(x), flow.tensor(w), None if b is None else flow.tensor(b), **kw)
    two = lambda v: (v, v) if isinstance(v, int) else tuple(v)
    ref = np_conv2d(
        x,
        w,
        b,
        two(kw.get("stride", 1)),
        _explicit(kw.get("padding", 0), ws[2:], kw.get("dilation", 1)),
        two(kw.get("dilation", 1)),
        kw.get("groups", 1),
    )
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("xs,ws,kw", NP_CASES[:4])
def test_conv2d_gradients_match_finite_differences(xs, ws, kw):
    x = flow.tensor(rand(*xs)[:1, :, :5, :5], requires_grad=True)
    w = flow.tensor(rand(*ws), requires_grad=True)
    b = flow.tensor(rand(ws[0]), requires_grad=True)
    assert gradcheck(lambda a, c, d: F.conv2d(a, c, d, **kw), (x, w, b))


def test_conv2d_double_backward():
    x = flow.tensor(rand(1, 2, 4, 5), requires_grad=True)
    w = flow.tensor(rand(2, 2, 3, 2), requires_grad=True)
    assert gradgradcheck(lambda a, c: F.conv2d(a, c, stride=(2, 1), padding=1), (x, w))
    assert gradgradcheck(
        lambda a, c: F.conv_transpose2d(a, c, stride=2, padding=1, output_padding=1),
        (flow.tensor(rand(1, 2, 3, 3), requires_grad=True), w),
    )


def test_conv1d_matches_numpy_reference():
    x, w, b = rand(2, 4, 11), rand(6, 2, 3), rand(6)
    out = F.conv1d(flow.tensor(x), flow.tensor(w), flow.tensor(b), stride=2, padding=1, dilation=2, groups=2)
    ref = np_conv2d(x[:, :, None], w[:, :, None], b, (1, 2), (0, 0, 1, 1), (1, 2), 2)[:, :, 0]
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=1e-10)


def test_conv_transpose2d_matches_numpy_reference_and_is_the_adjoint():
    x, w = rand(2, 4, 4, 5), rand(4, 3, 3, 2)
    kw = dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, dilation=(1, 2))
    out = F.conv_transpose2d(flow.tensor(x), flow.tensor(w), **kw)
    ref = np_conv_transpose2d(x, w, (2, 3), (1, 0), (1, 2), (1, 2), 2)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=1e-10)
    # <conv_transpose(x), y> == <x, conv(y)> with the same weight
    y = rand(*out.shape)
    lhs = float((out.numpy() * y).sum())
    rhs = float(
        (
            x
            * F.conv2d(flow.tensor(y), flow.tensor(w), stride=(2, 3), padding=(1, 0), dilation=(1, 2), groups=2).numpy()
        ).sum()
    )
    assert abs(lhs - rhs) < 1e-9 * max(1.0, abs(lhs))


def test_batch_chunking_gives_the_same_result(monkeypatch):
    x, w, g = rand(7, 3, 9, 8), rand(4, 3, 3, 3), None
    ref = np_conv2d(x, w, None, (2, 2), (1, 1, 1, 1), (1, 1), 1)
    g = rand(*ref.shape)
    outs = []
    for budget, min_cols in ((1 << 30, 1), (1, 1), (3000, 1)):
        monkeypatch.setattr(nn_conv, "_COLS_BYTES", budget)
        monkeypatch.setattr(nn_conv, "_MIN_COLS", min_cols)
        xt, wt = flow.tensor(x, requires_grad=True), flow.tensor(w, requires_grad=True)
        o = F.conv2d(xt, wt, stride=2, padding=1)
        o.backward(flow.tensor(g))
        np.testing.assert_allclose(o.detach().numpy(), ref, rtol=1e-10, atol=1e-10)
        outs.append((xt.grad.numpy(), wt.grad.numpy()))
    for gx, gw in outs[1:]:
        np.testing.assert_allclose(gx, outs[0][0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gw, outs[0][1], rtol=1e-10, atol=1e-12)


def test_unbatched_and_dtype():
    x, w = rand(3, 6, 6, dtype=np.float32), rand(2, 3, 3, 3, dtype=np.float32)
    out = F.conv2d(flow.tensor(x), flow.tensor(w), padding=1)
    assert out.shape == (2, 6, 6) and out.dtype is flow.float32
    ref = np_conv2d(x[None].astype(np.float64), w.astype(np.float64), padding=(1, 1, 1, 1))[0]
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
    assert F.conv1d(flow.tensor(rand(3, 9)), flow.tensor(rand(2, 3, 2))).shape == (2, 8)


def test_functional_exports():
    for name in ("conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d"):
        assert callable(getattr(F, name))


@pytest.mark.parametrize("op", ["conv2d", "conv2d_backward_input", "conv2d_backward_weight"])
def test_opcheck(op):
    assert opcheck(op)["grad_checked"] > 0


# -- against PyTorch ----------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


def compare(flow_fn, torch_fn, arrays, dtype=np.float64, seed=0):
    torch = _torch()
    arrays = [None if a is None else np.asarray(a, dtype) for a in arrays]
    fs = [None if a is None else flow.tensor(a, requires_grad=True) for a in arrays]
    ts = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    a, b = flow_fn(*fs), torch_fn(*ts)
    assert tuple(a.shape) == tuple(b.shape)
    assert a.dtype.np == np.dtype(dtype)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **tol(dtype))
    go = np.random.default_rng(seed).standard_normal(tuple(b.shape)).astype(dtype)
    a.backward(flow.tensor(go))
    b.backward(torch.tensor(go))
    for k, (f, t) in enumerate(zip(fs, ts)):
        if f is not None:
            np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), err_msg=f"gradient of input {k}", **tol(dtype))


CONV2D_CASES = [
    ((2, 3, 8, 8), (4, 3, 3, 3), dict()),
    ((2, 3, 8, 8), (4, 3, 3, 3), dict(padding=1)),
    ((2, 3, 9, 7), (5, 3, 3, 3), dict(stride=2, padding=1)),
    ((1, 4, 9, 9), (6, 4, 3, 2), dict(stride=(2, 3), padding=(2, 1))),
    ((2, 4, 10, 10), (4, 2, 3, 3), dict(padding=2, dilation=2, groups=2)),
    ((2, 6, 7, 7), (6, 1, 3, 3), dict(padding=1, groups=6)),  # depthwise
    ((2, 6, 7, 7), (12, 2, 3, 3), dict(stride=2, groups=3)),
    ((2, 3, 8, 6), (4, 3, 1, 1), dict()),
    ((2, 3, 8, 6), (4, 3, 1, 1), dict(stride=2)),
    ((2, 3, 5, 6), (4, 3, 1, 1), dict(padding=1)),  # padding beyond the kernel's reach
    ((2, 3, 5, 6), (4, 3, 2, 2), dict(padding=(2, 3), stride=2)),
    ((1, 3, 8, 8), (2, 3, 4, 4), dict(padding="same")),  # even kernel: extra padding after
    ((1, 3, 8, 8), (2, 3, 3, 2), dict(padding="same", dilation=(2, 3))),
    ((1, 3, 8, 8), (2, 3, 3, 3), dict(padding="valid", stride=2)),
    ((1, 2, 5, 5), (3, 2, 5, 5), dict()),  # kernel as big as the input
    ((1, 2, 3, 3), (3, 2, 5, 5), dict(padding=1)),  # only with padding
    ((3, 2, 12, 11), (4, 2, 3, 3), dict(stride=3, padding=(0, 2), dilation=(2, 1))),
]


@pytest.mark.parametrize("xs,ws,kw", CONV2D_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_vs_torch(xs, ws, kw, bias):
    torch = _torch()
    arrays = [rand(*xs), rand(*ws), rand(ws[0]) if bias else None]
    compare(lambda x, w, b: F.conv2d(x, w, b, **kw), lambda x, w, b: torch.nn.functional.conv2d(x, w, b, **kw), arrays)


@pytest.mark.parametrize("xs,ws,kw", CONV2D_CASES[1:7])
def test_conv2d_vs_torch_float32(xs, ws, kw):
    torch = _torch()
    compare(
        lambda x, w, b: F.conv2d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv2d(x, w, b, **kw),
        [rand(*xs), rand(*ws), rand(ws[0])],
        dtype=np.float32,
    )


def test_conv2d_resnet_like_layer_vs_torch():
    torch = _torch()
    kw = dict(stride=1, padding=1)
    compare(
        lambda x, w: F.conv2d(x, w, **kw),
        lambda x, w: torch.nn.functional.conv2d(x, w, **kw),
        [rand(4, 16, 16, 16), rand(16, 16, 3, 3) * 0.1],
        dtype=np.float32,
    )


CONV1D_CASES = [
    ((2, 3, 10), (4, 3, 3), dict()),
    ((2, 3, 10), (4, 3, 3), dict(stride=2, padding=1)),
    ((2, 4, 11), (6, 2, 3), dict(dilation=2, groups=2, padding=2)),
    ((1, 3, 9), (2, 3, 4), dict(padding="same")),
    ((1, 3, 9), (2, 3, 1), dict(stride=3)),
]


@pytest.mark.parametrize("xs,ws,kw", CONV1D_CASES)
def test_conv1d_vs_torch(xs, ws, kw):
    torch = _torch()
    compare(
        lambda x, w, b: F.conv1d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv1d(x, w, b, **kw),
        [rand(*xs), rand(*ws), rand(ws[0])],
    )


CONVT_CASES = [
    ((2, 3, 5, 5), (3, 4, 3, 3), dict()),
    ((2, 3, 5, 5), (3, 4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ((1, 4, 4, 6), (4, 2, 3, 2), dict(stride=(2, 3), padding=(1, 0), output_padding=(0, 2), groups=2)),
    ((1, 2, 4, 4), (2, 3, 3, 3), dict(dilation=2, padding=2)),
    ((1, 2, 4, 4), (2, 3, 3, 3), dict(dilation=3, output_padding=2)),  # output_padding >= stride
    ((2, 4, 3, 3), (4, 1, 2, 2), dict(stride=2, groups=4)),
    ((1, 2, 6, 6), (2, 2, 1, 1), dict(stride=1)),
    ((1, 2, 3, 3), (2, 2, 4, 4), dict(stride=2, padding=1)),
]


@pytest.mark.parametrize("xs,ws,kw", CONVT_CASES)
def test_conv_transpose2d_vs_torch(xs, ws, kw):
    torch = _torch()
    nb = ws[1] * kw.get("groups", 1)
    compare(
        lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, **kw),
        [rand(*xs), rand(*ws), rand(nb)],
    )


def test_conv_transpose1d_vs_torch():
    torch = _torch()
    kw = dict(stride=2, padding=1, output_padding=1, dilation=1, groups=1)
    compare(
        lambda x, w, b: F.conv_transpose1d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv_transpose1d(x, w, b, **kw),
        [rand(2, 3, 7), rand(3, 2, 3), rand(2)],
    )


def test_conv2d_second_derivative_vs_torch():
    torch = _torch()
    x, w = rand(2, 3, 6, 6), rand(4, 3, 3, 3)
    gvec = rand(2, 4, 3, 3)

    def run(lib, conv, mk):
        xt, wt = mk(x), mk(w)
        out = conv(xt, wt, stride=2, padding=1)
        gx, gw = lib.autograd.grad((out * mk(gvec, False)).sum(), [xt, wt], create_graph=True)
        ((gx * gx).sum() + (gw * gw).sum()).backward()
        return xt.grad.numpy(), wt.grad.numpy()

    a = run(flow, F.conv2d, lambda v, r=True: flow.tensor(v, requires_grad=r))
    b = run(torch, torch.nn.functional.conv2d, lambda v, r=True: torch.tensor(v, requires_grad=r))
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-9)


# -- errors -----------------------------------------------------------------------------------------------
def _t(*shape, dtype=np.float64):
    return flow.tensor(rand(*shape, dtype=dtype))


@pytest.mark.parametrize(
    "call,err,words",
    [
        (lambda: F.conv2d(_t(2, 3, 5), _t(4, 3, 3, 3)), OpError, ["conv2d", "channels"]),
        (lambda: F.conv2d(_t(3, 5), _t(4, 3, 3, 3)), OpError, ["conv2d", "input", "3-d or 4-d"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3)), OpError, ["conv2d", "weight", "4-d"]),
        (
            lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 2, 3, 3)),
            OpError,
            ["conv2d", "3 channels", "expected 'input' with 2"],
        ),
        (lambda: F.conv2d(_t(1, 4, 5, 5), _t(3, 2, 3, 3), groups=2), OpError, ["conv2d", "groups=2", "divisible"]),
        (lambda: F.conv2d(_t(1, 4, 5, 5), _t(4, 2, 3, 3), groups=0), OpError, ["conv2d", "groups"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3, 3), padding=-1), OpError, ["conv2d", "padding", "non-negative"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3, 3), stride=0), OpError, ["conv2d", "stride", "positive"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3, 3), dilation=(1, 0)), OpError, ["conv2d", "dilation"]),
        (lambda: F.conv2d(_t(1, 3, 2, 5), _t(4, 3, 3, 3)), OpError, ["conv2d", "kernel size 3", "padded input size 2"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3, 3), padding="same", stride=2), OpError, ["conv2d", "same"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3, 3), padding="full"), OpError, ["conv2d", "padding"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3, 3), _t(3)), OpError, ["conv2d", "bias", "(4,)"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3, 3, dtype=np.float32)), OpTypeError, ["conv2d", "dtype"]),
        (lambda: F.conv2d(_t(1, 3, 5, 5), _t(4, 3, 3, 3), stride=(1, 2, 3)), OpTypeError, ["conv2d", "stride"]),
        (lambda: F.conv2d(np.zeros((1, 3, 5, 5)), _t(4, 3, 3, 3)), OpTypeError, ["conv2d", "input", "Tensor"]),
        # integers convolve in their dtype, as in PyTorch on the CPU; bools do not
        (
            lambda: F.conv2d(
                flow.tensor(np.ones((1, 3, 5, 5), np.bool_)), flow.tensor(np.ones((4, 3, 3, 3), np.bool_))
            ),
            OpTypeError,
            ["conv2d", "not bool"],
        ),
        (lambda: F.conv1d(_t(1, 3, 5, 5), _t(4, 3, 3)), OpError, ["conv1d", "input", "2-d or 3-d"]),
        (lambda: F.conv1d(_t(1, 3, 2), _t(4, 3, 3)), OpError, ["conv1d", "kernel size 3"]),
        (lambda: F.conv1d(_t(1, 2, 8), _t(4, 3, 3)), OpError, ["conv1d", "channels"]),
        (lambda: F.conv_transpose2d(_t(1, 3, 5, 5), _t(2, 4, 3, 3)), OpError, ["conv_transpose2d", "channels"]),
        (
            lambda: F.conv_transpose2d(_t(1, 3, 5, 5), _t(3, 4, 3, 3), stride=2, output_padding=2),
            OpError,
            ["conv_transpose2d", "output_padding"],
        ),
        (
            lambda: F.conv_transpose2d(_t(1, 3, 1, 1), _t(3, 4, 1, 1), padding=1),
            OpError,
            ["conv_transpose2d", "output size"],
        ),
        (
            lambda: F.conv_transpose2d(_t(1, 3, 5, 5), _t(3, 4, 3, 3), padding=-1),
            OpError,
            ["conv_transpose2d", "padding"],
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
    g, w = _t(1, 4, 3, 3), _t(4, 2, 3, 3)
    with pytest.raises(OpError, match="conv2d_backward_input.*spatial size"):
        flow.ops.call(
            "conv2d_backward_input",
            g,
            w,
            input_size=(9, 9),
            stride=(1, 1),
            padding=(0, 0, 0, 0),
            dilation=(1, 1),
            groups=1,
        )
    with pytest.raises(OpError, match="conv2d_backward_weight.*batch"):
        flow.ops.call(
            "conv2d_backward_weight",
            g,
            _t(2, 2, 5, 5),
            weight_size=(3, 3),
            stride=(1, 1),
            padding=(0, 0, 0, 0),
            dilation=(1, 1),
            groups=1,
        )
