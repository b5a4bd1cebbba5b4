"""Winograd F(2x2, 3x3) conv2d (flow.backends.cpu.winograd): values against the GEMM kernel and torch,
the accuracy rule, fallbacks, the eager switch, backward and graph-mode autotuning."""

from __future__ import annotations

import time

import numpy as np
import pytest

import flow
from flow.backends.cpu import conv, native, threads
from flow.backends.cpu import winograd as WG
from flow.errors import OpError

pytestmark = pytest.mark.skipif(
    not (native.HAVE_NATIVE and threads.BLAS_PATH is not None and hasattr(native._C, "conv2d_winograd_forward")),
    reason="needs flow._C with the Winograd kernel and a bound BLAS",
)

# the documented bound (module docstring, docs/cpu.md) on max|y - y_ref| / max|y_ref|
BOUND = {np.float32: 1e-4, np.float64: 1e-10}

CASES = [  # N, C, O, H, W, padding (top, bottom, left, right)
    (1, 1, 1, 3, 3, (0, 0, 0, 0)),
    (2, 3, 5, 7, 9, (1, 1, 1, 1)),
    (1, 8, 4, 9, 6, (2, 2, 2, 2)),
    (3, 16, 7, 5, 8, (0, 1, 2, 0)),
    (1, 64, 32, 11, 13, (1, 1, 1, 1)),
    (2, 4, 4, 8, 8, (-1, 0, 1, -1)),
]


@pytest.fixture(autouse=True)
def _gemm_after():
    yield
    WG.set_conv_algorithm("gemm")


def _rel(a, ref) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - ref)) / np.max(np.abs(ref)))


def _data(N, C, O, H, W, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, C, H, W)).astype(dtype), rng.standard_normal((O, C, 3, 3)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_forward_matches_gemm_and_float64_reference(case, dtype):
    N, C, O, H, W, pad = case
    x, w = _data(N, C, O, H, W, dtype)
    b = np.linspace(-1, 1, O).astype(dtype)
    got = WG._winograd_or_none(x, w, b, (1, 1), pad, (1, 1), 1)
    assert got is not None and got.dtype == dtype
    gemm = conv.conv2d_forward(x, w, b, (1, 1), pad, (1, 1), 1)
    ref = conv.conv2d_forward(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), (1, 1), pad, (1, 1), 1)
    assert got.shape == gemm.shape
    assert _rel(got, ref) < BOUND[dtype]
    assert _rel(gemm, ref) < BOUND[dtype]


@pytest.mark.parametrize("pad", [0, 1, 2])
def test_forward_matches_torch(pad):
    torch = pytest.importorskip("torch")
    x, w = _data(2, 6, 5, 9, 7, np.float32, seed=pad)
    WG.set_conv_algorithm("winograd")
    y = flow.nn.functional.conv2d(flow.tensor(x), flow.tensor(w), padding=pad)
    t = torch.nn.functional.conv2d(
        torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)), padding=pad
    )
    assert tuple(y.shape) == tuple(t.shape)
    assert _rel(y.numpy(), t.numpy()) < BOUND[np.float32]


def test_probe_error_is_within_the_bound_on_resnet_shapes():
    for C, H in [(64, 16), (128, 8), (256, 8)]:
        assert WG.probe_error(np.float32, C, C, H, H, (1, 1, 1, 1)) < 1e-5
        assert WG.probe_error(np.float64, C, C, H, H, (1, 1, 1, 1)) < 1e-13


def test_accuracy_rule_refuses_a_shape_over_the_tolerance(monkeypatch):
    x, w = _data(1, 3, 2, 6, 6, np.float32)
    monkeypatch.setitem(WG.TOLERANCE, np.dtype(np.float32), 0.0)  # nothing passes a zero tolerance
    monkeypatch.setattr(WG, "_accurate", {})
    assert WG._winograd_or_none(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1) is None
    # the public kernel still answers, by the GEMM
    np.testing.assert_array_equal(
        WG.conv2d_forward(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1),
        conv.conv2d_forward(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    )


@pytest.mark.parametrize(
    "wshape,stride,dilation,groups,dtype",
    [
        ((4, 4, 5, 5), (1, 1), (1, 1), 1, np.float32),  # 5x5 kernel
        ((4, 4, 3, 3), (2, 2), (1, 1), 1, np.float32),  # stride 2
        ((4, 4, 3, 3), (1, 1), (2, 2), 1, np.float32),  # dilation 2
        ((4, 2, 3, 3), (1, 1), (1, 1), 2, np.float32),  # grouped
        ((4, 4, 3, 3), (1, 1), (1, 1), 1, np.int64),  # integer dtype
    ],
)
def test_inapplicable_shapes_fall_back_to_gemm(wshape, stride, dilation, groups, dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 9, 9)).astype(dtype)
    w = rng.standard_normal(wshape).astype(dtype)
    assert WG._winograd_or_none(x, w, None, stride, (1, 1, 1, 1), dilation, groups) is None
    got = WG.conv2d_forward(x, w, None, stride, (1, 1, 1, 1), dilation, groups)
    np.testing.assert_array_equal(got, conv.conv2d_forward(x, w, None, stride, (1, 1, 1, 1), dilation, groups))


def test_set_conv_algorithm_validates_and_reports():
    assert WG.get_conv_algorithm() == "gemm" and conv.eager_forward is None
    with pytest.raises(OpError, match="algorithm must be one of"):
        WG.set_conv_algorithm("fft")
    WG.set_conv_algorithm("auto")
    assert WG.get_conv_algorithm() == "auto" and conv.eager_forward is not None
    WG.set_conv_algorithm("gemm")
    assert conv.eager_forward is None and conv.eager_backward_input is None


def test_eager_default_is_gemm_and_winograd_switch_changes_the_kernel(monkeypatch):
    x, w = _data(1, 4, 4, 8, 8, np.float32)
    calls = []
    real = native._C.conv2d_winograd_forward
    monkeypatch.setattr(native._C, "conv2d_winograd_forward", lambda *a: calls.append(1) or real(*a), raising=False)
    flow.nn.functional.conv2d(flow.tensor(x), flow.tensor(w), padding=1)
    assert calls == []
    WG.set_conv_algorithm("winograd")
    y = flow.nn.functional.conv2d(flow.tensor(x), flow.tensor(w), padding=1)
    assert calls == [1, 1]  # the accuracy probe, then the call
    ref = conv.conv2d_forward(x.astype(np.float64), w.astype(np.float64), None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert _rel(y.numpy(), ref) < BOUND[np.float32]


def test_auto_times_once_per_shape_and_matches():
    x, w = _data(2, 8, 8, 10, 10, np.float64)
    WG.set_conv_algorithm("auto")
    ref = conv.conv2d_forward(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    for _ in range(2):
        y = flow.nn.functional.conv2d(flow.tensor(x), flow.tensor(w), padding=1).numpy()
        assert _rel(y, ref) < BOUND[np.float64]
    assert ("fwd", np.dtype(np.float64), x.shape, w.shape, (1, 1, 1, 1)) in WG._faster


@pytest.mark.parametrize("pad", [0, 1, 2])
def test_backward_through_winograd_matches_torch(pad, monkeypatch):
    torch = pytest.importorskip("torch")
    x, w = _data(2, 5, 6, 7, 9, np.float64, seed=3)
    shapes = []
    real = native._C.conv2d_winograd_forward
    monkeypatch.setattr(
        native._C, "conv2d_winograd_forward", lambda *a: shapes.append(a[2].shape) or real(*a), raising=False
    )
    WG.set_conv_algorithm("winograd")
    fx, fw = flow.tensor(x, requires_grad=True), flow.tensor(w, requires_grad=True)
    fy = flow.nn.functional.conv2d(fx, fw, padding=pad)
    gy = np.random.default_rng(4).standard_normal(tuple(fy.shape))
    fy.backward(flow.tensor(gy))
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, tw, padding=pad)
    ty.backward(torch.from_numpy(gy))
    np.testing.assert_allclose(fy.detach().numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fw.grad.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-10)
    assert x.shape in shapes and tuple(fy.shape) in shapes  # the forward and the input gradient ran Winograd


def test_backward_input_kernel_matches_gemm_float32():
    rng = np.random.default_rng(5)
    g = rng.standard_normal((2, 6, 7, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    for pad in [(0, 0, 0, 0), (1, 1, 1, 1), (2, 1, 0, 2)]:
        size = (7 + 2 - pad[0] - pad[1], 9 + 2 - pad[2] - pad[3])
        got = WG.conv2d_backward_input(g, w, size, (1, 1), pad, (1, 1), 1)
        ref = conv.conv2d_backward_input(g.astype(np.float64), w.astype(np.float64), size, (1, 1), pad, (1, 1), 1)
        assert got.shape == ref.shape and _rel(got, ref) < BOUND[np.float32]


def test_compiled_step_has_winograd_candidate_and_chooses_it_when_faster(monkeypatch):
    x, w = _data(2, 8, 8, 12, 12, np.float32, seed=6)
    real = conv.conv2d_forward

    def slow_gemm(*a, **k):  # the GEMM made slower than Winograd, so the timing is not a coin toss
        time.sleep(0.02)
        return real(*a, **k)

    monkeypatch.setattr(conv, "conv2d_forward", slow_gemm)
    fw = flow.tensor(w)

    @flow.compile
    def f(inp):
        return flow.nn.functional.conv2d(inp, fw, padding=1)

    ref = real(x.astype(np.float64), w.astype(np.float64), None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    for _ in range(5):
        assert _rel(f(flow.tensor(x)).numpy(), ref) < BOUND[np.float32]
    choices = [c for c in f.autotuned.values() if c["op"] == "conv2d"]
    assert len(choices) == 1
    assert set(choices[0]["times"]) == {"default", "winograd"} and choices[0]["chosen"] == "winograd"


def test_compiled_step_keeps_gemm_when_winograd_is_slower(monkeypatch):
    x, w = _data(1, 4, 4, 8, 8, np.float32, seed=7)
    real = WG.conv2d_forward

    def slow_winograd(*a, **k):
        time.sleep(0.02)
        return real(*a, **k)

    monkeypatch.setattr(WG, "conv2d_forward", slow_winograd)
    fw = flow.tensor(w)
    f = flow.compile(lambda inp: flow.nn.functional.conv2d(inp, fw, padding=1))
    for _ in range(5):
        f(flow.tensor(x))
    (choice,) = [c for c in f.autotuned.values() if c["op"] == "conv2d"]
    assert choice["chosen"] == "default"


def test_native_kernel_rejects_bad_shapes():
    x = np.zeros((1, 3, 5, 5), np.float32)
    out = np.zeros((1, 2, 5, 5), np.float32)
    with pytest.raises(ValueError, match="must be \\(O, C, 3, 3\\)"):
        native._C.conv2d_winograd_forward(x, np.zeros((2, 3, 5, 5), np.float32), out, 1, 1)
    with pytest.raises(ValueError, match="input channels"):
        native._C.conv2d_winograd_forward(x, np.zeros((2, 4, 3, 3), np.float32), out, 1, 1)
    with pytest.raises(TypeError):
        native._C.conv2d_winograd_forward(x, np.zeros((2, 3, 3, 3), np.float64), out, 1, 1)


def test_results_do_not_depend_on_the_thread_count():
    x, w = _data(4, 32, 16, 28, 28, np.float32, seed=8)  # 784 tiles: 4 blocks of 256
    saved = native.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            native.set_num_threads(n)
            outs.append(WG._winograd_or_none(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1))
    finally:
        native.set_num_threads(saved)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_out_forms_write_into_the_given_array_on_both_paths():
    """The kernels' out= (graph memory planning): Winograd and the GEMM fallback write into ``out``."""
    from flow.ops import nn_conv_winograd as K

    x, w = _data(2, 8, 6, 9, 7, np.float32)
    b = np.linspace(-1, 1, 6).astype(np.float32)
    for stride in [(1, 1), (2, 2)]:  # Winograd, then a layer it does not apply to (the GEMM)
        ref = K._conv2d_winograd(x, w, b, stride, (1, 1, 1, 1))
        out = np.full(ref.shape, np.nan, np.float32)
        got = K._conv2d_winograd(x, w, b, stride, (1, 1, 1, 1), out=out)
        assert got is out
        np.testing.assert_array_equal(out, ref)
        g = np.random.default_rng(2).standard_normal(ref.shape).astype(np.float32)
        dref = K._bwi_winograd(g, w, (9, 7), stride, (1, 1, 1, 1))
        dout = np.full(dref.shape, np.nan, np.float32)
        assert K._bwi_winograd(g, w, (9, 7), stride, (1, 1, 1, 1), out=dout) is dout
        np.testing.assert_array_equal(dout, dref)
    with pytest.raises(OpError, match="shape"):
        K._conv2d_winograd(x, w, b, (1, 1), (1, 1, 1, 1), out=np.empty((2, 6, 9, 6), np.float32))
    with pytest.raises(OpError, match="overlaps"):
        y = np.empty((2, 8, 9, 7), np.float32)
        K._conv2d_winograd(y, np.zeros((8, 8, 3, 3), np.float32), None, (1, 1), (1, 1, 1, 1), out=y)
