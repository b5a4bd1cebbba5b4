"""conv2d's CPU kernels with the native im2col / col2im (flow.backends.cpu.conv) vs the NumPy reference
kernels (flow.ops.nn_conv) and vs PyTorch, for the forward and both gradients; the wrappers' errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import flow
import flow.nn.functional as F
from flow.backends.cpu import conv, native
from flow.ops import nn_conv as R

needs_native = pytest.mark.skipif(not native.HAVE_NATIVE, reason=f"flow._C not built: {native.NATIVE_ERROR}")

# every stride x padding x dilation x kernel; batch, dtype and input size vary with the case (odd sizes)
CASES = [
    dict(stride=s, pad=p, dil=d, k=k, n=(1, 3)[i % 2], dtype=(np.float64, np.float32)[(i // 2) % 2])
    for i, (s, p, d, k) in enumerate(itertools.product((1, 2), (0, 1, 2), (1, 2), (1, 3, 5, 7)))
]


def _ids(c):
    return f"s{c['stride']}-p{c['pad']}-d{c['dil']}-k{c['k']}-n{c['n']}-{np.dtype(c['dtype']).name}"


def _rand(shape, seed, dtype):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if np.dtype(dtype) == np.float32 else dict(rtol=1e-11, atol=1e-11)


def _problem(c, C=3, O=4, H=15, W=13, seed=0):
    k, pad, dt = c["k"], c["pad"], c["dtype"]
    st, dil, pads = (c["stride"],) * 2, (c["dil"],) * 2, (pad,) * 4
    x, w, b = _rand((c["n"], C, H, W), seed, dt), _rand((O, C, k, k), seed + 1, dt), _rand((O,), seed + 2, dt)
    out = R.conv_out_size("conv2d", (H, W), (k, k), st, pads, dil)
    g = _rand((c["n"], O) + out, seed + 3, dt)
    return x, w, b, g, st, pads, dil


def _both(x, w, b, g, st, pads, dil, groups=1):
    """(forward, input grad, weight grad) of the native CPU kernels and of the reference."""
    H, W = x.shape[2:], w.shape[2:]
    nat = (
        conv.conv2d_forward(x, w, b, st, pads, dil, groups),
        conv.conv2d_backward_input(g, w, H, st, pads, dil, groups),
        conv.conv2d_backward_weight(g, x, W, st, pads, dil, groups),
    )
    ref = (
        R.conv2d_forward(np, x, w, b, st, pads, dil, groups),
        R.conv2d_backward_input(np, g, w, H, st, pads, dil, groups),
        R.conv2d_backward_weight(np, g, x, W, st, pads, dil, groups),
    )
    return nat, ref


@needs_native
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_native_matches_reference(case):
    x, w, b, g, st, pads, dil = _problem(case)
    nat, ref = _both(x, w, b, g, st, pads, dil)
    for name, a, r in zip(("forward", "grad_input", "grad_weight"), nat, ref):
        assert a.dtype == r.dtype == x.dtype and a.shape == r.shape, name
        np.testing.assert_allclose(a, r, err_msg=name, **_tol(x.dtype))


@needs_native
@pytest.mark.parametrize(
    "pads", [(0, -1, 1, 0), (2, 0, 0, 1), (-1, -2, -1, 0)], ids=["crop-bottom", "asymmetric", "crop-both"]
)
@pytest.mark.parametrize("stride", [(1, 1), (2, 1), (1, 3)])
def test_asymmetric_and_negative_padding(pads, stride):
    x, w, b = _rand((2, 3, 9, 8), 1, np.float64), _rand((2, 3, 3, 2), 2, np.float64), None
    out = R.conv_out_size("conv2d", (9, 8), (3, 2), stride, pads, (1, 2))
    g = _rand((2, 2) + out, 3, np.float64)
    nat, ref = _both(x, w, b, g, stride, pads, (1, 2))
    for a, r in zip(nat, ref):
        np.testing.assert_allclose(a, r, **_tol(np.float64))


@needs_native
def test_chunked_batches(monkeypatch):
    """Chunks of several images (GEMM rows gathered, output scattered) and of one, in one call."""
    x, w, b, g, st, pads, dil = _problem(dict(stride=1, pad=1, dil=1, k=3, n=5, dtype=np.float64))
    per_image = 3 * 9 * 15 * 13 * 8
    monkeypatch.setattr(R, "_COLS_BYTES", 2 * per_image)  # chunks of 2, 2 and 1 images
    monkeypatch.setattr(R, "_MIN_COLS", 1)
    assert [s.stop - s.start for s in R._chunks(5, per_image, 15 * 13)] == [2, 2, 1]
    nat, ref = _both(x, w, b, g, st, pads, dil)
    for a, r in zip(nat, ref):
        np.testing.assert_allclose(a, r, **_tol(np.float64))


@needs_native
@pytest.mark.parametrize("per_image", [True, False])
@pytest.mark.parametrize("case", CASES[::7], ids=_ids)
def test_per_image_and_chunked_paths(case, per_image, monkeypatch):
    """Forward and input gradient one image at a time (wide images) or by batched chunks (small ones)."""
    monkeypatch.setattr(conv, "_PER_IMAGE_PIXELS", 1 if per_image else 10**9)
    x, w, b, g, st, pads, dil = _problem(dict(case, n=3), H=21, W=19)
    nat, ref = _both(x, w, b, g, st, pads, dil)
    for a, r in zip(nat, ref):
        np.testing.assert_allclose(a, r, **_tol(x.dtype))


@needs_native
def test_scratch_buffers_are_not_returned():
    """Results never alias the reused column buffers: a second call leaves the first result intact."""
    x, w, b, g, st, pads, dil = _problem(dict(stride=1, pad=1, dil=1, k=3, n=3, dtype=np.float64))
    first = [a.copy() for a in _both(x, w, b, g, st, pads, dil)[0]]
    kept = _both(x, w, b, g, st, pads, dil)[0]
    _both(x * 2, w * 3, b, g * 5, st, pads, dil)
    for a, k in zip(first, kept):
        np.testing.assert_array_equal(a, k)


@needs_native
def test_empty_batch():
    x, w, g = np.zeros((0, 3, 5, 5), np.float32), _rand((2, 3, 3, 3), 0, np.float32), np.zeros((0, 2, 3, 3), np.float32)
    at = ((1, 1), (0, 0, 0, 0), (1, 1), 1)
    assert conv.conv2d_forward(x, w, None, *at).shape == (0, 2, 3, 3)
    assert conv.conv2d_backward_input(g, w, (5, 5), *at).shape == (0, 3, 5, 5)
    np.testing.assert_array_equal(conv.conv2d_backward_weight(g, x, (3, 3), *at), np.zeros_like(w))


@needs_native
def test_non_contiguous_inputs():
    x, w, b, g, st, pads, dil = _problem(dict(stride=2, pad=1, dil=1, k=3, n=3, dtype=np.float32))
    xt = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # same values, other strides
    gt = np.asfortranarray(g)
    assert not (xt.flags.c_contiguous or gt.flags.c_contiguous)
    nat, ref = _both(xt, np.asfortranarray(w), b, gt, st, pads, dil)
    for a, r in zip(nat, ref):
        np.testing.assert_allclose(a, r, **_tol(np.float32))


def test_grouped_and_integer_use_the_reference(monkeypatch):
    """groups > 1, integers and FLOW_CONV_REFERENCE=1 run the NumPy kernels (no native column call)."""

    def boom(*a, **k):
        raise AssertionError("native column kernel called")

    monkeypatch.setattr(native, "im2col", boom)
    monkeypatch.setattr(native, "col2im", boom)
    x, w, g = _rand((2, 4, 7, 7), 0, np.float64), _rand((6, 2, 3, 3), 1, np.float64), _rand((2, 6, 7, 7), 2, np.float64)
    at = ((1, 1), (1, 1, 1, 1), (1, 1))
    np.testing.assert_array_equal(conv.conv2d_forward(x, w, None, *at, 2), R.conv2d_forward(np, x, w, None, *at, 2))
    np.testing.assert_array_equal(
        conv.conv2d_backward_input(g, w, (7, 7), *at, 2), R.conv2d_backward_input(np, g, w, (7, 7), *at, 2)
    )
    xi, wi = x.astype(np.int64), _rand((3, 4, 3, 3), 1, np.float64).round().astype(np.int64)
    assert conv.conv2d_forward(xi, wi, None, *at, 1).dtype == np.int64
    monkeypatch.setenv("FLOW_CONV_REFERENCE", "1")
    w1 = _rand((3, 4, 3, 3), 1, np.float64)
    np.testing.assert_array_equal(conv.conv2d_forward(x, w1, None, *at, 1), R.conv2d_forward(np, x, w1, None, *at, 1))


def _conv_and_backward():
    x = flow.tensor(_rand((2, 3, 8, 8), 0, np.float32), requires_grad=True)
    w = flow.tensor(_rand((4, 3, 3, 3), 1, np.float32), requires_grad=True)
    F.conv2d(x, w, padding=1, stride=2).sum().backward()


@needs_native
def test_flow_conv2d_dispatches_to_native_columns_without_a_bound_blas(monkeypatch):
    from flow.backends.cpu import threads

    calls = []
    real_im2col, real_col2im = native.im2col, native.col2im
    monkeypatch.setattr(threads, "BLAS_PATH", None)  # no BLAS bound: columns natively, GEMMs in NumPy
    monkeypatch.setattr(native, "im2col", lambda *a, **k: calls.append("im2col") or real_im2col(*a, **k))
    monkeypatch.setattr(native, "col2im", lambda *a, **k: calls.append("col2im") or real_col2im(*a, **k))
    _conv_and_backward()
    assert calls.count("col2im") == 1 and calls.count("im2col") == 2  # forward + weight grad


@needs_native
def test_flow_conv2d_runs_one_native_call_per_pass_with_the_bound_blas(monkeypatch):
    from flow.backends.cpu import threads

    if threads.BLAS_PATH is None:
        pytest.skip("NumPy's OpenBLAS was not found: the convolutions use the column kernels")
    calls = []
    for name in ("conv2d_gemm_forward", "conv2d_gemm_backward_input", "conv2d_gemm_backward_weight"):
        real = getattr(native._C, name)
        monkeypatch.setattr(native._C, name, lambda *a, _n=name, _f=real: calls.append(_n) or _f(*a))
    _conv_and_backward()
    assert sorted(calls) == ["conv2d_gemm_backward_input", "conv2d_gemm_backward_weight", "conv2d_gemm_forward"]


# -- vs PyTorch ------------------------------------------------------------------------------------------
TORCH_CASES = CASES[::5] + [dict(stride=2, pad=2, dil=2, k=7, n=3, dtype=np.float32)]


@needs_native
@pytest.mark.parametrize("case", TORCH_CASES, ids=_ids)
def test_matches_torch(case):
    torch = pytest.importorskip("torch")
    x, w, b, g, st, pads, dil = _problem(case, seed=7)
    fx, fw, fb = (flow.tensor(a, requires_grad=True) for a in (x, w, b))
    fy = F.conv2d(fx, fw, fb, stride=st, padding=pads[0], dilation=dil)
    fy.backward(flow.tensor(g))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, stride=st, padding=pads[0], dilation=dil)
    ty.backward(torch.tensor(g))
    tol = dict(rtol=2e-4, atol=2e-4) if np.dtype(case["dtype"]) == np.float32 else dict(rtol=1e-10, atol=1e-10)
    for name, f, t in (("out", fy, ty), ("x.grad", fx.grad, tx.grad), ("w.grad", fw.grad, tw.grad)):
        np.testing.assert_allclose(f.detach().numpy(), t.detach().numpy(), err_msg=name, **tol)
    np.testing.assert_allclose(fb.grad.detach().numpy(), tb.grad.numpy(), **tol)


def test_grouped_matches_torch():
    torch = pytest.importorskip("torch")
    x, w, g = _rand((3, 4, 9, 7), 0, np.float32), _rand((6, 2, 3, 3), 1, np.float32), None
    fx, fw = flow.tensor(x, requires_grad=True), flow.tensor(w, requires_grad=True)
    fy = F.conv2d(fx, fw, stride=2, padding=1, groups=2)
    g = _rand(tuple(fy.shape), 2, np.float32)
    fy.backward(flow.tensor(g))
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=2, padding=1, groups=2)
    ty.backward(torch.tensor(g))
    for f, t in ((fy, ty), (fx.grad, tx.grad), (fw.grad, tw.grad)):
        np.testing.assert_allclose(f.detach().numpy(), t.detach().numpy(), rtol=2e-4, atol=2e-4)


# -- the wrappers ----------------------------------------------------------------------------------------
@needs_native
def test_im2col_layout_and_col2im_adjoint():
    x = _rand((2, 3, 6, 5), 0, np.float64)
    kw = dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0, 1, 1), dilation=(1, 2))
    cols = native.im2col(x, **kw)
    Ho, Wo = R.conv_out_size("conv2d", (6, 5), (3, 2), (2, 1), (1, 0, 1, 1), (1, 2))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 0), (1, 1)))
    want = np.stack(
        [R.window(xp, i, j, (2, 1), (1, 2), Ho, Wo) for i in range(3) for j in range(2)], axis=2
    )  # (N, C, taps, Ho, Wo)
    np.testing.assert_array_equal(cols, want.transpose(1, 2, 0, 3, 4).reshape(cols.shape))
    # <im2col(x), c> == <x, col2im(c)> for random c: col2im is im2col's adjoint
    c = _rand(cols.shape, 1, np.float64)
    dx = np.zeros_like(x)
    native.col2im(c, dx, **kw)
    np.testing.assert_allclose((cols * c).sum(), (x * dx).sum(), rtol=1e-12)
    native.col2im(c, dx, **kw)  # it accumulates
    np.testing.assert_allclose((x * dx).sum(), 2 * (cols * c).sum(), rtol=1e-12)


@needs_native
def test_wrapper_errors():
    x = _rand((1, 2, 5, 5), 0, np.float32)
    k = dict(kernel_size=(3, 3))
    with pytest.raises(TypeError, match="im2col: unsupported dtype int32 for 'x'"):
        native.im2col(x.astype(np.int32), **k)
    with pytest.raises(ValueError, match=r"im2col: expected a 4-d \(N, C, H, W\) array"):
        native.im2col(x[0], **k)
    with pytest.raises(ValueError, match=r"'out' must be a float32 array of shape \(18, 9\)"):
        native.im2col(x, out=np.empty((18, 8), np.float32), **k)
    with pytest.raises(ValueError, match="kernel extent"):
        native.im2col(x, kernel_size=(3, 3), dilation=(3, 1))
    with pytest.raises(ValueError, match="must be >= 1"):
        native.im2col(x, kernel_size=(3, 3), stride=(0, 1))
    with pytest.raises(ValueError, match="col2im: 'dx' is updated in place and must be C-contiguous"):
        native.col2im(np.zeros((18, 9), np.float32), np.zeros((1, 2, 5, 10), np.float32)[..., ::2], **k)
    with pytest.raises(ValueError, match=r"'cols' must have shape \(18, 9\)"):
        native._C.col2im(
            np.zeros((18, 8), np.float32), np.zeros((1, 2, 5, 5), np.float32), 3, 3, 1, 1, 0, 0, 1, 1, 3, 3
        )
    with pytest.raises(TypeError, match="dtype mismatch"):
        native.col2im(np.zeros((18, 9)), np.zeros((1, 2, 5, 5), np.float32), **k)
