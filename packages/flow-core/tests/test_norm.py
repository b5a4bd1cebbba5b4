"""nn.functional normalization: layer_norm (fused op, native kernel, higher-order gradients), batch_norm with
running statistics, group/instance/RMS/local-response norms and normalize, against NumPy and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from _nnf_helpers import DTYPES, compare, gradgrad, leaf, tol, torch_or_skip

import flow
import flow.nn.functional as F
from flow.errors import OpError, OpTypeError
from flow.testing import opcheck

RNG = np.random.default_rng(1)


def np_layer_norm(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    m = x.mean(axes, keepdims=True)
    v = x.var(axes, keepdims=True)
    y = (x - m) / np.sqrt(v + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


@pytest.mark.parametrize("op", ["layer_norm", "layer_norm_backward"])
def test_opcheck(op):
    assert opcheck(op)["samples"] > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k", [((4, 7), 1), ((2, 3, 5), 2), ((6,), 1), ((2, 3, 4, 5), 1)])
def test_layer_norm_formula(shape, k, dtype):
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    w = RNG.standard_normal(shape[-k:]).astype(dtype)
    b = RNG.standard_normal(shape[-k:]).astype(dtype)
    y = F.layer_norm(flow.tensor(x), shape[-k:], flow.tensor(w), flow.tensor(b))
    assert y.dtype.np == dtype
    np.testing.assert_allclose(y.numpy(), np_layer_norm(x.astype(np.float64), k, w, b), **tol(dtype))
    y0 = F.layer_norm(flow.tensor(x), shape[-1], eps=1e-3)
    np.testing.assert_allclose(y0.numpy(), np_layer_norm(x.astype(np.float64), 1, eps=1e-3), **tol(dtype))


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
def test_layer_norm_native_matches_reference(dtype):
    from flow.registry import get_op

    x = RNG.standard_normal((6, 3, 8)).astype(dtype.np)
    g = RNG.standard_normal((6, 3, 8)).astype(dtype.np)
    w = RNG.standard_normal((3, 8)).astype(dtype.np)
    for op, args in (
        ("layer_norm", (x, w, None)),
        ("layer_norm_backward", (g, x, w)),
        ("layer_norm_backward", (g, x, None)),
    ):
        ref = get_op(op).kernels[("generic", None)][0].fn(np)
        out = flow.ops.call(
            op, *[None if a is None else flow.tensor(a) for a in args], normalized_shape=(3, 8), eps=1e-5
        )
        want = ref(*args, normalized_shape=(3, 8), eps=1e-5)
        for o, r in zip(out if isinstance(out, tuple) else (out,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(o.numpy(), r, rtol=1e-4, atol=1e-5)


def test_layer_norm_higher_order():
    x = leaf(RNG.standard_normal((2, 3, 4)))
    w = leaf(RNG.standard_normal((3, 4)))
    b = leaf(RNG.standard_normal((3, 4)))
    assert gradgrad(lambda x, w, b: F.layer_norm(x, (3, 4), w, b), [x, w, b])
    assert gradgrad(lambda x: F.layer_norm(x, 4) ** 2, [x])

    def third(x, w, b):
        y = F.layer_norm(x, (3, 4), w, b)
        gx, gw = flow.autograd.grad((y * y * y).sum(), [x, w], create_graph=True)
        return (gx * gx).sum() + (gw * gw).sum() * x.sum()

    assert gradgrad(third, [x, w, b])


def test_layer_norm_errors():
    x = flow.randn(3, 4)
    with pytest.raises(OpError, match="normalized_shape"):
        F.layer_norm(x, (5,))
    with pytest.raises(OpError, match="weight"):
        F.layer_norm(x, (4,), flow.randn(3))
    with pytest.raises(OpTypeError, match="weight"):
        F.layer_norm(x, (4,), flow.randn(4, dtype=flow.float64))
    with pytest.raises(OpTypeError, match="layer_norm"):
        F.layer_norm(flow.tensor([[1, 2]]), (2,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,ns,affine", [((4, 6, 3), (3,), True), ((2, 3, 4, 5), (4, 5), True), ((5, 8), (8,), False)]
)
def test_layer_norm_against_torch(shape, ns, affine, dtype):
    torch = torch_or_skip()
    arrays = [RNG.standard_normal(shape)] + ([RNG.standard_normal(ns), RNG.standard_normal(ns)] if affine else [])
    compare(
        lambda x, *wb: F.layer_norm(x, ns, *wb),
        lambda x, *wb: torch.nn.functional.layer_norm(x, ns, *wb),
        arrays,
        dtype,
    )


def test_layer_norm_double_backward_against_torch():
    torch = torch_or_skip()
    x, w, b = RNG.standard_normal((3, 5)), RNG.standard_normal(5), RNG.standard_normal(5)
    fs = [leaf(a) for a in (x, w, b)]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    gf = flow.autograd.grad((F.layer_norm(fs[0], (5,), fs[1], fs[2]) ** 3).sum(), fs, create_graph=True)
    gt = torch.autograd.grad(
        (torch.nn.functional.layer_norm(ts[0], (5,), ts[1], ts[2]) ** 3).sum(), ts, create_graph=True
    )
    sum(g.sum() * g.sum() for g in gf).backward()
    sum(g.sum() * g.sum() for g in gt).backward()
    for f, t in zip(fs, ts):
        np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=1e-8, atol=1e-10)


# -- batch norm ---------------------------------------------------------------------------------------------------
def test_batch_norm_formula_and_running_stats():
    x = RNG.standard_normal((8, 3, 5)) * 2 + 1
    rm, rv = flow.zeros(3, dtype=flow.float64), flow.ones(3, dtype=flow.float64)
    y = F.batch_norm(flow.tensor(x), rm, rv, training=True, momentum=0.2)
    m = x.mean((0, 2), keepdims=True)
    v = x.var((0, 2), keepdims=True)
    np.testing.assert_allclose(y.numpy(), (x - m) / np.sqrt(v + 1e-5), rtol=1e-10)
    np.testing.assert_allclose(rm.numpy(), 0.2 * m.reshape(3), rtol=1e-12)
    np.testing.assert_allclose(rv.numpy(), 0.8 + 0.2 * x.var((0, 2), ddof=1), rtol=1e-12)
    ye = F.batch_norm(flow.tensor(x), rm, rv, training=False)
    np.testing.assert_allclose(ye.numpy(), (x - rm.numpy()[:, None]) / np.sqrt(rv.numpy()[:, None] + 1e-5))
    with pytest.raises(OpError, match="more than 1 value per channel"):
        F.batch_norm(flow.randn(1, 3), None, None, training=True)
    with pytest.raises(OpError, match="running_mean"):
        F.batch_norm(flow.randn(4, 3), flow.zeros(4), flow.ones(3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 4), (4, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_against_torch(shape, dtype):
    torch = torch_or_skip()
    tf = torch.nn.functional
    c = shape[1]
    x, w, b = RNG.standard_normal(shape), RNG.standard_normal(c), RNG.standard_normal(c)
    compare(
        lambda x, w, b: F.batch_norm(x, None, None, w, b, True),
        lambda x, w, b: tf.batch_norm(x, None, None, w, b, True),
        [x, w, b],
        dtype,
    )
    rm, rv = RNG.standard_normal(c), RNG.uniform(0.5, 2, c)
    compare(
        lambda x: F.batch_norm(x, flow.tensor(rm.astype(dtype)), flow.tensor(rv.astype(dtype))),
        lambda x: tf.batch_norm(x, torch.tensor(rm.astype(dtype)), torch.tensor(rv.astype(dtype))),
        [x],
        dtype,
    )
    rmf, rvf = flow.tensor(rm.astype(dtype)), flow.tensor(rv.astype(dtype))
    rmt, rvt = torch.tensor(rm.astype(dtype)), torch.tensor(rv.astype(dtype))
    F.batch_norm(flow.tensor(x.astype(dtype)), rmf, rvf, training=True, momentum=0.3)
    tf.batch_norm(torch.tensor(x.astype(dtype)), rmt, rvt, training=True, momentum=0.3)
    np.testing.assert_allclose(rmf.numpy(), rmt.numpy(), **tol(dtype))
    np.testing.assert_allclose(rvf.numpy(), rvt.numpy(), **tol(dtype))


# -- group / instance / rms / lrn / normalize ------------------------------------------------------------------------
def test_group_norm_formula():
    x = RNG.standard_normal((2, 6, 3, 2))
    y = F.group_norm(flow.tensor(x), 3).numpy()
    xg = x.reshape(2, 3, -1)
    want = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(y, want, rtol=1e-9)
    with pytest.raises(OpError, match="divisible"):
        F.group_norm(flow.tensor(x), 4)


def test_rms_norm_normalize_formulas():
    x = RNG.standard_normal((3, 4, 5))
    w = RNG.standard_normal(5)
    y = F.rms_norm(flow.tensor(x), (5,), flow.tensor(w), eps=1e-6).numpy()
    np.testing.assert_allclose(y, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w, rtol=1e-10)
    n = F.normalize(flow.tensor(x), dim=1).numpy()
    np.testing.assert_allclose(n, x / np.linalg.norm(x, axis=1, keepdims=True), rtol=1e-10)
    z = F.normalize(flow.zeros(2, 3, dtype=flow.float64, requires_grad=True), dim=1)
    z.sum().backward()
    assert np.isfinite(z.detach().numpy()).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_other_norms_against_torch(dtype):
    torch = torch_or_skip()
    tf = torch.nn.functional
    x = RNG.standard_normal((4, 6, 3, 2))
    w, b = RNG.standard_normal(6), RNG.standard_normal(6)
    compare(lambda x, w, b: F.group_norm(x, 3, w, b), lambda x, w, b: tf.group_norm(x, 3, w, b), [x, w, b], dtype)
    compare(lambda x: F.group_norm(x, 2), lambda x: tf.group_norm(x, 2), [x], dtype)
    compare(
        lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
        lambda x, w, b: tf.instance_norm(x, weight=w, bias=b),
        [x, w, b],
        dtype,
    )
    compare(
        lambda x, w: F.rms_norm(x, (3, 2), w),
        lambda x, w: tf.rms_norm(x, (3, 2), w),
        [x, RNG.standard_normal((3, 2))],
        dtype,
    )
    compare(lambda x: F.rms_norm(x, (2,)), lambda x: tf.rms_norm(x, (2,)), [x], dtype)
    compare(
        lambda x: F.local_response_norm(x, 3, 0.1, 0.6, 1.5),
        lambda x: tf.local_response_norm(x, 3, 0.1, 0.6, 1.5),
        [x],
        dtype,
    )
    compare(
        lambda x: F.local_response_norm(x, 4),
        lambda x: tf.local_response_norm(x, 4),
        [RNG.standard_normal((2, 5, 7))],
        dtype,
    )
    for p in (2.0, 1.0, 3.0, float("inf")):
        compare(lambda x, p=p: F.normalize(x, p, 1), lambda x, p=p: tf.normalize(x, p, 1), [x], dtype)


def test_instance_norm_running_stats_against_torch():
    torch = torch_or_skip()
    x = RNG.standard_normal((4, 3, 5))
    rm, rv = RNG.standard_normal(3), RNG.uniform(0.5, 2, 3)
    rmf, rvf, rmt, rvt = flow.tensor(rm), flow.tensor(rv), torch.tensor(rm), torch.tensor(rv)
    a = F.instance_norm(flow.tensor(x), rmf, rvf, momentum=0.3)
    b = torch.nn.functional.instance_norm(torch.tensor(x), rmt, rvt, momentum=0.3)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9)
    np.testing.assert_allclose(rmf.numpy(), rmt.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rvf.numpy(), rvt.numpy(), rtol=1e-12)
    c = F.instance_norm(flow.tensor(x), rmf, rvf, use_input_stats=False)
    d = torch.nn.functional.instance_norm(torch.tensor(x), rmt, rvt, use_input_stats=False)
    np.testing.assert_allclose(c.numpy(), d.numpy(), rtol=1e-9)
