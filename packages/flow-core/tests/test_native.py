"""Tests of flow-core's native CPU kernels (flow._C via flow.backends.cpu.native).

These tests FAIL (they do not skip) when the extension is missing: CI must prove that the
C++ extension builds and imports. Every kernel is compared with a NumPy reference formula
computed in float64.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from _native_ref import DTYPES, SHAPES, randn, tol

from flow.backends.cpu import native

# --------------------------------------------------------------------------------------------
# NumPy references (float64)


def ref_softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def ref_log_softmax(x):
    x = x.astype(np.float64)
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def ref_gelu(x, approximate):
    x = x.astype(np.float64)
    if approximate == "none":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def ref_gelu_grad(g, x, approximate):
    g, x = g.astype(np.float64), x.astype(np.float64)
    if approximate == "none":
        cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return g * (cdf + x * pdf)
    k = math.sqrt(2.0 / math.pi)
    t = np.tanh(k * (x + 0.044715 * x**3))
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x))


def ref_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def ref_layer_norm(x, w, b, eps):
    x = x.astype(np.float64)
    mean = x.mean(-1)
    var = x.var(-1)
    rstd = 1.0 / np.sqrt(var + eps)
    y = (x - mean[..., None]) * rstd[..., None]
    if w is not None:
        y = y * w.astype(np.float64)
    if b is not None:
        y = y + b.astype(np.float64)
    return y, mean, rstd


def ref_layer_norm_backward(g, x, w, eps):
    g, x = g.astype(np.float64), x.astype(np.float64)
    n = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    wg = g * (w.astype(np.float64) if w is not None else 1.0)
    dx = rstd / n * (n * wg - wg.sum(-1, keepdims=True) - xhat * (wg * xhat).sum(-1, keepdims=True))
    axes = tuple(range(x.ndim - 1))
    return dx, (g * xhat).sum(axis=axes), g.sum(axis=axes)


# --------------------------------------------------------------------------------------------
# the extension must be there


def test_native_extension_is_built():
    assert native.HAVE_NATIVE, f"flow._C failed to import: {native.NATIVE_ERROR}"
    assert native.NATIVE_ERROR is None
    from flow import _C

    assert _C.__version__
    assert native.get_num_threads() >= 1


def test_missing_extension_is_reported_not_silent():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["flow._C"] = None  # make `from flow import _C` fail
        from flow.backends.cpu import native
        import numpy as np
        assert native.HAVE_NATIVE is False
        assert isinstance(native.NATIVE_ERROR, str) and native.NATIVE_ERROR
        try:
            native.softmax_forward(np.zeros((2, 3), np.float32))
        except RuntimeError as e:
            assert "softmax_forward" in str(e)
        else:
            raise AssertionError("expected RuntimeError")
        print("OK")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


# --------------------------------------------------------------------------------------------
# softmax / log_softmax


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_forward(shape, dtype):
    x = randn(shape, dtype, scale=3.0)
    y = native.softmax_forward(x)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, ref_softmax(x), **tol(dtype))
    np.testing.assert_allclose(y.sum(-1), 1.0, **tol(dtype, 10))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_log_softmax_forward(shape, dtype):
    x = randn(shape, dtype, scale=3.0)
    y = native.log_softmax_forward(x)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, ref_log_softmax(x), **tol(dtype, 5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_extreme_values_are_stable(dtype):
    x = np.array(
        [[1e4, 1e4 - 1.0, -1e4, 0.0], [-1e4, -1e4, -1e4, -1e4], [1e4, 1e4, 1e4, 1e4], [-1e4, 1e4, 5.0, -5.0]],
        dtype=dtype,
    )
    x = np.concatenate([x, randn((4, 4), dtype, scale=1e4)])
    y = native.softmax_forward(x)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ref_softmax(x), **tol(dtype))
    ly = native.log_softmax_forward(x)
    assert not np.isnan(ly).any()
    np.testing.assert_allclose(ly, ref_log_softmax(x), **tol(dtype, 5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_masked_rows(dtype):
    # -inf entries (attention masks) get probability 0; a NaN poisons its row only
    x = randn((3, 6), dtype)
    x[0, :3] = -np.inf
    x[1, 2] = np.nan
    y = native.softmax_forward(x)
    np.testing.assert_array_equal(y[0, :3], 0.0)
    np.testing.assert_allclose(y[0], ref_softmax(x[0]), **tol(dtype))
    assert np.isnan(y[1]).all()
    np.testing.assert_allclose(y[2], ref_softmax(x[2]), **tol(dtype))


def test_softmax_0d():
    y = native.softmax_forward(np.array(3.0))
    assert y.shape == () and y == 1.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_backward(shape, dtype):
    out = ref_softmax(randn(shape, dtype, seed=1)).astype(dtype)
    g = randn(shape, dtype, seed=2)
    dx = native.softmax_backward(g, out)
    o64, g64 = out.astype(np.float64), g.astype(np.float64)
    ref = o64 * (g64 - (g64 * o64).sum(-1, keepdims=True))
    assert dx.dtype == dtype
    np.testing.assert_allclose(dx, ref, **tol(dtype, 5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_log_softmax_backward(shape, dtype):
    out = ref_log_softmax(randn(shape, dtype, seed=1)).astype(dtype)
    g = randn(shape, dtype, seed=2)
    dx = native.log_softmax_backward(g, out)
    o64, g64 = out.astype(np.float64), g.astype(np.float64)
    ref = g64 - np.exp(o64) * g64.sum(-1, keepdims=True)
    assert dx.dtype == dtype
    np.testing.assert_allclose(dx, ref, **tol(dtype, 20))


def test_softmax_backward_matches_finite_differences():
    x = randn((3, 5), np.float64, seed=3)
    g = randn((3, 5), np.float64, seed=4)
    out = native.softmax_forward(x)
    dx = native.softmax_backward(g, out)
    h = 1e-6
    num = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        num[idx] = ((native.softmax_forward(xp) - native.softmax_forward(xm)) * g).sum() / (2 * h)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------------------------
# GELU / SiLU


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 7), (5, 1), (3, 4, 5), (70000,)])
def test_gelu(shape, dtype, approximate):
    x = randn(shape, dtype, scale=3.0)
    g = randn(shape, dtype, seed=1)
    y = native.gelu_forward(x, approximate)
    dx = native.gelu_backward(g, x, approximate)
    assert y.dtype == dtype and dx.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, ref_gelu(x, approximate), **tol(dtype, 5))
    np.testing.assert_allclose(dx, ref_gelu_grad(g, x, approximate), **tol(dtype, 5))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_matches_finite_differences(approximate):
    x = np.linspace(-6, 6, 101)
    h = 1e-6
    num = (native.gelu_forward(x + h, approximate) - native.gelu_forward(x - h, approximate)) / (2 * h)
    np.testing.assert_allclose(native.gelu_backward(np.ones_like(x), x, approximate), num, rtol=1e-6, atol=1e-8)


def test_gelu_default_is_exact_and_rejects_unknown_mode():
    x = randn((4, 4), np.float64)
    np.testing.assert_array_equal(native.gelu_forward(x), native.gelu_forward(x, "none"))
    with pytest.raises(ValueError, match="approximate"):
        native.gelu_forward(x, "fast")
    from flow import _C

    with pytest.raises(ValueError, match="approximate"):
        _C.gelu_backward(x, x, "erf")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 7), (5, 1), (3, 4, 5), (70000,)])
def test_silu(shape, dtype):
    x = randn(shape, dtype, scale=4.0)
    x.flat[0] = 80.0
    if x.size > 1:
        x.flat[1] = -80.0
    g = randn(shape, dtype, seed=1)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    s = ref_sigmoid(x64)
    np.testing.assert_allclose(native.silu_forward(x), x64 * s, **tol(dtype, 5))
    np.testing.assert_allclose(native.silu_backward(g, x), g64 * s * (1 + x64 * (1 - s)), **tol(dtype, 5))


# --------------------------------------------------------------------------------------------
# LayerNorm


@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 7), (5, 1), (9,), (3, 4, 5), (2, 4097), (300, 257)])
def test_layer_norm_forward(shape, dtype, affine):
    n = shape[-1]
    x = randn(shape, dtype, scale=2.0) + dtype(3.0)
    w = randn((n,), dtype, seed=5) if affine in ("both", "weight") else None
    b = randn((n,), dtype, seed=6) if affine in ("both", "bias") else None
    y, mean, rstd = native.layer_norm_forward(x, w, b, 1e-5)
    ry, rmean, rrstd = ref_layer_norm(x, w, b, 1e-5)
    assert y.shape == x.shape and mean.shape == x.shape[:-1] and rstd.shape == x.shape[:-1]
    assert y.dtype == mean.dtype == rstd.dtype == dtype
    np.testing.assert_allclose(y, ry, **tol(dtype, 10))
    np.testing.assert_allclose(mean, rmean, **tol(dtype))
    np.testing.assert_allclose(rstd, rrstd, **tol(dtype, 10))


def test_layer_norm_large_offset_is_accurate():
    # two-pass statistics in double: no catastrophic cancellation for |mean| >> std
    x = (1e4 + randn((8, 512), np.float64, scale=1e-2)).astype(np.float32)
    y, _, _ = native.layer_norm_forward(x, None, None, 1e-12)
    ry, _, _ = ref_layer_norm(x, None, None, 1e-12)
    np.testing.assert_allclose(y, ry, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("with_weight", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 7), (5, 1), (3, 4, 5), (2, 4097), (300, 257)])
def test_layer_norm_backward(shape, dtype, with_weight):
    n = shape[-1]
    eps = 1e-5
    x = randn(shape, dtype, scale=2.0)
    w = randn((n,), dtype, seed=5) if with_weight else None
    g = randn(shape, dtype, seed=7)
    _, mean, rstd = native.layer_norm_forward(x, w, None, eps)
    dx, dw, db = native.layer_norm_backward(g, x, mean, rstd, w)
    rdx, rdw, rdb = ref_layer_norm_backward(g, x, w, eps)
    k = 20 if shape[-1] > 1 else 1
    np.testing.assert_allclose(dx, rdx, **tol(dtype, k * 10))
    if with_weight:
        assert dw.dtype == db.dtype == dtype and dw.shape == db.shape == (n,)
        np.testing.assert_allclose(dw, rdw, **tol(dtype, k * 10))
        np.testing.assert_allclose(db, rdb, **tol(dtype, k * 10))
    else:
        assert dw is None and db is None


def test_layer_norm_backward_grad_flags_and_keepdims_stats():
    x = randn((4, 6), np.float64)
    g = randn((4, 6), np.float64, seed=1)
    _, mean, rstd = native.layer_norm_forward(x)
    # stats given with a trailing singleton axis are accepted too
    dx, dw, db = native.layer_norm_backward(
        g, x, mean[:, None], rstd[:, None], None, need_weight_grad=False, need_bias_grad=True
    )
    rdx, _, rdb = ref_layer_norm_backward(g, x, None, 1e-5)
    assert dw is None
    np.testing.assert_allclose(dx, rdx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(db, rdb, rtol=1e-10, atol=1e-12)


def test_layer_norm_backward_matches_finite_differences():
    x = randn((3, 6), np.float64, seed=8)
    w = randn((6,), np.float64, seed=9)
    b = randn((6,), np.float64, seed=10)
    g = randn((3, 6), np.float64, seed=11)
    _, mean, rstd = native.layer_norm_forward(x, w, b, 1e-5)
    dx, dw, db = native.layer_norm_backward(g, x, mean, rstd, w)
    h = 1e-6

    def loss(x_, w_, b_):
        return (native.layer_norm_forward(x_, w_, b_, 1e-5)[0] * g).sum()

    for arr, grad, which in ((x, dx, 0), (w, dw, 1), (b, db, 2)):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            args_p, args_m = [x.copy(), w.copy(), b.copy()], [x.copy(), w.copy(), b.copy()]
            args_p[which][idx] += h
            args_m[which][idx] -= h
            num[idx] = (loss(*args_p) - loss(*args_m)) / (2 * h)
        np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-7)


def test_layer_norm_rejects_bad_weight():
    x = randn((2, 4), np.float32)
    with pytest.raises(ValueError, match="weight"):
        native.layer_norm_forward(x, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="layer_norm_forward"):
        native.layer_norm_forward(x, np.ones(4, np.float64))


# --------------------------------------------------------------------------------------------
# dtype errors, non-contiguous inputs, threading


UNARY = {
    "softmax_forward": lambda x: native.softmax_forward(x),
    "log_softmax_forward": lambda x: native.log_softmax_forward(x),
    "gelu_forward": lambda x: native.gelu_forward(x, "tanh"),
    "silu_forward": lambda x: native.silu_forward(x),
    "layer_norm_forward": lambda x: native.layer_norm_forward(x)[0],
}
BINARY = {
    "softmax_backward": native.softmax_backward,
    "log_softmax_backward": native.log_softmax_backward,
    "gelu_backward": lambda g, x: native.gelu_backward(g, x, "none"),
    "silu_backward": native.silu_backward,
}


@pytest.mark.parametrize("bad", [np.int64, np.int32, np.float16, np.complex64, np.bool_])
@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY))
def test_wrong_dtype_raises_type_error(name, bad):
    x = np.ones((3, 4), dtype=bad)
    with pytest.raises(TypeError, match=rf"{name}: unsupported dtype {np.dtype(bad)}"):
        if name in UNARY:
            UNARY[name](x)
        else:
            BINARY[name](x, x)


def test_wrong_dtype_raises_type_error_in_extension_too():
    from flow import _C

    with pytest.raises(TypeError, match="softmax_forward: unsupported dtype int64"):
        _C.softmax_forward(np.ones((2, 2), np.int64))
    with pytest.raises(TypeError, match="silu_backward: dtype mismatch"):
        native.silu_backward(np.ones(3, np.float32), np.ones(3, np.float64))
    with pytest.raises(ValueError, match="shape mismatch"):
        native.softmax_backward(np.ones((2, 3)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="C-contiguous"):
        _C.softmax_forward(np.ones((4, 4))[:, ::2])


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_inputs(dtype):
    base = randn((40, 66), dtype, scale=2.0)
    views = [base[:, ::2], base.T, np.asfortranarray(base), base[::3, 1:-1], base.reshape(40, 6, 11)[:, :, 3]]
    for v in views:
        assert not v.flags.c_contiguous
        c = np.ascontiguousarray(v)
        for name, f in UNARY.items():
            np.testing.assert_array_equal(f(v), f(c), err_msg=name)
        g = randn(v.shape, dtype, seed=3)[:, ::-1]
        for name, f in BINARY.items():
            np.testing.assert_array_equal(f(g, v), f(np.ascontiguousarray(g), c), err_msg=name)
        _, mean, rstd = native.layer_norm_forward(c)
        a = native.layer_norm_backward(g, v, mean, rstd, None, need_bias_grad=True)
        b = native.layer_norm_backward(np.ascontiguousarray(g), c, mean, rstd, None, need_bias_grad=True)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[2], b[2])


def test_lists_are_accepted_as_inputs():
    y = native.softmax_forward([[0.0, 0.0], [1.0, 1.0]])
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, 0.5)


def test_results_do_not_depend_on_thread_count():
    x = randn((512, 300), np.float32)
    g = randn((512, 300), np.float32, seed=1)
    old = native.get_num_threads()
    try:
        native.set_num_threads(1)
        one = [native.softmax_forward(x), native.gelu_forward(x), native.layer_norm_forward(x)[0]]
        one_bwd = native.layer_norm_backward(g, x, *native.layer_norm_forward(x)[1:], np.ones(300, np.float32))
        native.set_num_threads(max(2, old))
        many = [native.softmax_forward(x), native.gelu_forward(x), native.layer_norm_forward(x)[0]]
        many_bwd = native.layer_norm_backward(g, x, *native.layer_norm_forward(x)[1:], np.ones(300, np.float32))
    finally:
        native.set_num_threads(old)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(one_bwd[0], many_bwd[0])
    np.testing.assert_allclose(one_bwd[1], many_bwd[1], rtol=1e-6)
    np.testing.assert_allclose(one_bwd[2], many_bwd[2], rtol=1e-6)


def test_concurrent_calls_from_python_threads():
    # kernels release the GIL; concurrent callers must still get correct results
    xs = [randn((256, 512), np.float32, seed=i) for i in range(8)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(native.softmax_forward, xs))
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, ref_softmax(x), **tol(np.float32))


def test_empty_inputs():
    for shape in [(0, 5), (3, 0), (0,)]:
        x = np.zeros(shape, np.float32)
        assert native.softmax_forward(x).shape == shape
        assert native.gelu_forward(x).shape == shape
        assert native.silu_backward(x, x).shape == shape
