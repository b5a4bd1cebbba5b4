"""binary_cross_entropy stays finite when probabilities saturate at 0 or 1 (PyTorch's clamps)."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F

X = [0.0, 1.0, 0.5, 1e-30, 1.0 - 1e-7, 0.0, 1.0, 0.25]
T = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.6]


def _reference(x, t):
    """PyTorch's formulas, in float64 NumPy."""
    x, t = np.asarray(x, np.float64), np.asarray(t, np.float64)
    with np.errstate(divide="ignore"):
        lx, l1 = np.maximum(np.log(x), -100), np.maximum(np.log1p(-x), -100)
    loss = -(t * lx + (1 - t) * l1)
    gx = (x - t) / np.maximum(x * (1 - x), 1e-12)
    return loss, gx, l1 - lx


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
def test_saturated_probabilities_give_finite_loss_and_gradients(dtype):
    x = flow.tensor(X, dtype=dtype, requires_grad=True)
    t = flow.tensor(T, dtype=dtype, requires_grad=True)
    loss = F.binary_cross_entropy(x, t, reduction="none")
    loss.sum().backward()
    for a in (loss, x.grad, t.grad):
        assert np.isfinite(a.detach().numpy()).all()
    xr = np.asarray(x.detach().numpy(), np.float64)  # the values as stored in this dtype
    ref_loss, ref_gx, ref_gt = _reference(xr, T)
    rtol = 1e-5 if dtype is flow.float32 else 1e-12
    np.testing.assert_allclose(loss.detach().numpy(), ref_loss, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), ref_gx, rtol=rtol)
    np.testing.assert_allclose(t.grad.numpy(), ref_gt, rtol=rtol, atol=1e-6)


def test_matches_torch_at_and_near_saturation():
    torch = pytest.importorskip("torch")
    for dt, tdt in ((flow.float32, torch.float32), (flow.float64, torch.float64)):
        w = [0.5, 2.0, 1.0, 1.0, 3.0, 1.0, 1.0, 0.1]
        for reduction in ("none", "mean", "sum"):
            x = flow.tensor(X, dtype=dt, requires_grad=True)
            tx = torch.tensor(X, dtype=tdt, requires_grad=True)
            out = F.binary_cross_entropy(x, flow.tensor(T, dtype=dt), flow.tensor(w, dtype=dt), reduction=reduction)
            tout = torch.nn.functional.binary_cross_entropy(
                tx, torch.tensor(T, dtype=tdt), torch.tensor(w, dtype=tdt), reduction=reduction
            )
            np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5)
            out.sum().backward()
            tout.sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)


def test_bceloss_training_with_a_saturating_sigmoid_stays_finite():
    # the siamese-network pattern: sigmoid outputs hit exactly 0/1 in float32, BCELoss must not turn NaN
    flow.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
    with flow.no_grad():
        net[0].weight.mul_(0).add_(60.0)  # saturate
    opt = flow.optim.SGD(net.parameters(), lr=1e-3)
    x = flow.tensor(np.random.default_rng(0).standard_normal((32, 4)), dtype=flow.float32)
    y = flow.tensor((np.random.default_rng(1).random((32, 1)) > 0.5).astype(np.float32))
    crit = nn.BCELoss()
    for _ in range(5):
        loss = crit(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert np.isfinite(float(loss))
        assert all(np.isfinite(p.detach().numpy()).all() for p in net.parameters())


def test_double_backward_is_available():
    x = flow.tensor([0.3, 0.7], dtype=flow.float64, requires_grad=True)
    t = flow.tensor([1.0, 0.0], dtype=flow.float64)
    flow.testing.gradgradcheck(lambda v: F.binary_cross_entropy(v, t, reduction="sum"), [x])
