"""The fused batch_norm / batch_norm_backward ops: native CPU kernel vs the NumPy reference and vs PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn.functional as F
from flow import nn
from flow.backends.cpu import native
from flow.errors import OpError
from flow.ops.nn_batch_norm import _bn_kernel, _bnb_kernel

needs_native = pytest.mark.skipif(not native.HAVE_NATIVE, reason=f"flow._C not built: {native.NATIVE_ERROR}")
SHAPES = [(4, 3), (4, 3, 5), (2, 3, 4, 5), (2, 2, 3, 2, 3), (3, 1, 6)]


def _rand(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("training", [True, False])
def test_native_kernel_matches_reference(shape, dtype, training):
    x, c = _rand(shape, 0, dtype) * 3 + 2, shape[1]
    w, b, rm, rv = _rand(c, 1, dtype), _rand(c, 2, dtype), _rand(c, 3, dtype), np.abs(_rand(c, 4, dtype)) + 0.5
    x3 = x.reshape(shape[0], c, -1)
    if training:
        y, mean, inv = native.batch_norm_forward(x3, w, b, None, None, 1e-5)
    else:
        inv_rv = (1 / np.sqrt(rv.astype(np.float64) + 1e-5)).astype(dtype)
        y, mean, inv = native.batch_norm_forward(x3, w, b, rm, inv_rv, 1e-5)
    ry, rmean, rinv = _bn_kernel(np)(x, w, b, rm, rv, training, 1e-5)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y.reshape(shape), ry, **tol)
    np.testing.assert_allclose(mean, rmean, **tol)
    np.testing.assert_allclose(inv, rinv, **tol)
    g, gm, gi = _rand(shape, 5, dtype), _rand(c, 6, dtype), _rand(c, 7, dtype)
    dx, dw, db = native.batch_norm_backward(g.reshape(x3.shape), x3, w, mean, inv, gm, gi, training)
    rdx, rdw, rdb = _bnb_kernel(np)(g, x, w, mean, inv, gm, gi, training, 1e-5)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dx.reshape(shape), rdx, **tol)
    np.testing.assert_allclose(dw, rdw, **tol)
    np.testing.assert_allclose(db, rdb, **tol)


@needs_native
def test_native_kernel_rejects_bad_input():
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="'weight' must have shape \\(3,\\)"):
        native.batch_norm_forward(x, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="unsupported dtype int64 for 'x'"):
        native.batch_norm_forward(np.zeros((2, 3, 4), np.int64))
    with pytest.raises(ValueError, match="give both 'mean' and 'invstd'"):
        native.batch_norm_forward(x, None, None, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="shape \\(N, C, S\\)"):
        native.batch_norm_forward(np.zeros((2, 3), np.float32))


def test_op_uses_native_kernel_for_strided_input():
    # a non-contiguous (channels-last view) input goes through the contiguous copy and matches
    x = flow.randn(2, 4, 3, 5).permute(0, 3, 1, 2)
    y = F.batch_norm(x, None, None, training=True)
    ref = F.batch_norm(x.contiguous(), None, None, training=True)
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)


def test_training_with_one_value_per_channel_raises():
    with pytest.raises(OpError, match="expected more than 1 value per channel when training"):
        F.batch_norm(flow.randn(1, 3), flow.zeros(3), flow.ones(3), training=True)
    # evaluation is fine with a single sample, as in torch
    assert F.batch_norm(flow.randn(1, 3), flow.zeros(3), flow.ones(3), training=False).shape == (1, 3)


def test_eval_without_running_stats_raises_in_the_op():
    from flow.ops.nn_batch_norm import batch_norm_op

    with pytest.raises(OpError, match="expected running_mean and running_var when training=False"):
        batch_norm_op(flow.randn(2, 3), None, None, None, None, False, 1e-5)


def test_composite_switch_gives_the_same_values(monkeypatch):
    x, w, b = flow.randn(4, 3, 5, requires_grad=True), flow.randn(3, requires_grad=True), flow.randn(3)
    rm, rv = flow.zeros(3), flow.ones(3)
    y = F.batch_norm(x, rm, rv, w, b, training=True)
    (gx,) = flow.autograd.grad((y * y).sum(), [x])
    monkeypatch.setenv("FLOW_BATCH_NORM_COMPOSITE", "1")
    rm2, rv2 = flow.zeros(3), flow.ones(3)
    y2 = F.batch_norm(x, rm2, rv2, w, b, training=True)
    (gx2,) = flow.autograd.grad((y2 * y2).sum(), [x])
    for a, r in ((y, y2), (gx, gx2), (rm, rm2), (rv, rv2)):
        np.testing.assert_allclose(a.detach().numpy(), r.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_double_backward_matches_torch():
    torch = _torch()
    xn, wn, gn = _rand((3, 2, 4), 60), _rand(2, 61), _rand((3, 2, 4), 62)
    x, w = flow.tensor(xn, requires_grad=True), flow.tensor(wn, requires_grad=True)
    tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    y = F.batch_norm(x, None, None, w, None, training=True)
    ty = torch.nn.functional.batch_norm(tx, None, None, tw, None, training=True)
    gx, gw = flow.autograd.grad(y, [x, w], grad_outputs=[flow.tensor(gn)], create_graph=True)
    tgx, tgw = torch.autograd.grad(ty, [tx, tw], grad_outputs=[torch.tensor(gn)], create_graph=True)
    hh = flow.autograd.grad((gx * gx).sum() + (gw * gw).sum(), [x, w])
    th = torch.autograd.grad((tgx * tgx).sum() + (tgw * tgw).sum(), [tx, tw])
    for a, r in zip(hh, th):
        np.testing.assert_allclose(a.numpy(), r.numpy(), rtol=1e-8, atol=1e-9)


# -- vs PyTorch ------------------------------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_functional_matches_torch(shape, affine, training):
    torch = _torch()
    c = shape[1]
    xn = _rand(shape, 10) * 2 + 1
    gn = _rand(shape, 11)
    vecs = [_rand(c, 12), _rand(c, 13)] if affine else [None, None]
    rmn, rvn = _rand(c, 14), np.abs(_rand(c, 15)) + 0.5
    x = flow.tensor(xn, requires_grad=True)
    pw = [None if v is None else flow.tensor(v, requires_grad=True) for v in vecs]
    tx = torch.tensor(xn, requires_grad=True)
    tw = [None if v is None else torch.tensor(v, requires_grad=True) for v in vecs]
    rm, rv, trm, trv = flow.tensor(rmn), flow.tensor(rvn), torch.tensor(rmn), torch.tensor(rvn)
    y = F.batch_norm(x, rm, rv, pw[0], pw[1], training, 0.1, 1e-5)
    ty = torch.nn.functional.batch_norm(tx, trm, trv, tw[0], tw[1], training, 0.1, 1e-5)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(rm.numpy(), trm.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rv.numpy(), trv.numpy(), rtol=1e-10, atol=1e-12)
    leaves = [x] + [p for p in pw if p is not None]
    tleaves = [tx] + [p for p in tw if p is not None]
    grads = flow.autograd.grad(y, leaves, grad_outputs=[flow.tensor(gn)])
    tgrads = torch.autograd.grad(ty, tleaves, grad_outputs=[torch.tensor(gn)])
    for a, r in zip(grads, tgrads):
        np.testing.assert_allclose(a.numpy(), r.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("momentum", [0.1, None])
def test_module_running_stats_match_torch_over_three_steps(momentum):
    torch = _torch()
    flow.manual_seed(0)
    m = nn.BatchNorm2d(3, momentum=momentum)
    tm = torch.nn.BatchNorm2d(3, momentum=momentum)
    tm.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in m.state_dict().items()})
    for step in range(3):
        xn = (_rand((4, 3, 5, 5), 20 + step) * (step + 1) + step).astype(np.float32)
        x, tx = flow.tensor(xn, requires_grad=True), torch.tensor(xn, requires_grad=True)
        y, ty = m(x), tm(tx)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
        (y * y).sum().backward()
        (ty * ty).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(m.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(m.running_mean.numpy(), tm.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m.running_var.numpy(), tm.running_var.numpy(), rtol=1e-5, atol=1e-6)
    assert int(m.num_batches_tracked.item()) == int(tm.num_batches_tracked.item()) == 3
    m.eval()
    tm.eval()
    xn = _rand((2, 3, 4, 4), 30).astype(np.float32)
    np.testing.assert_allclose(
        m(flow.tensor(xn)).detach().numpy(), tm(torch.tensor(xn)).detach().numpy(), rtol=1e-5, atol=1e-5
    )


def test_single_channel_and_float32_match_torch():
    torch = _torch()
    xn = _rand((8, 1, 7), 40).astype(np.float32) * 100 + 50
    y = F.batch_norm(flow.tensor(xn), None, None, training=True)
    ty = torch.nn.functional.batch_norm(torch.tensor(xn), None, None, training=True)
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-4, atol=1e-4)


def test_instance_norm_still_matches_torch():
    torch = _torch()
    xn = _rand((2, 3, 4, 4), 50)
    rm, rv, trm, trv = flow.zeros(3, dtype=flow.float64), flow.ones(3, dtype=flow.float64), None, None
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    for use in (True, False):
        y = F.instance_norm(flow.tensor(xn), rm, rv, use_input_stats=use)
        ty = torch.nn.functional.instance_norm(torch.tensor(xn), trm, trv, use_input_stats=use)
        np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("training", [True, False])
def test_an_inplace_activation_after_batch_norm_keeps_the_gradient(training):
    # the op keeps its statistics for the gradient, not its output, which an in-place ReLU overwrites
    torch = pytest.importorskip("torch")

    def run(lib):
        lib.manual_seed(0)
        bn = lib.nn.BatchNorm2d(3).double()
        bn.train(training)
        x = lib.tensor(np.random.default_rng(3).standard_normal((4, 3, 5, 5)), requires_grad=True)
        y = lib.nn.functional.leaky_relu(bn(x), 0.2, inplace=True)
        (y * y).sum().backward()
        return y.detach().numpy(), x.grad.numpy(), bn.weight.grad.numpy(), bn.bias.grad.numpy()

    for got, want in zip(run(flow), run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
