"""The native fused optimizer kernels (SGD, Adam/AdamW) against NumPy reference updates in float64.

Like test_native.py, these FAIL (they do not skip) when the extension is missing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _native_ref import DTYPES, randn, tol

from flow.backends.cpu import native

# --------------------------------------------------------------------------------------------
# optimizers


def ref_sgd(p, g, buf, lr, momentum, dampening, nesterov, wd, first):
    d = g + wd * p if wd != 0 else g.copy()
    if momentum != 0:
        buf = d.copy() if first else momentum * buf + (1 - dampening) * d
        d = d + momentum * buf if nesterov else buf
    return p - lr * d, buf


def ref_adam(p, g, m, v, vmax, step, lr, b1, b2, eps, wd, decoupled, amsgrad):
    if wd != 0:
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
    m = m + (1 - b1) * (g - m)
    v = b2 * v + (1 - b2) * g * g
    if amsgrad:
        vmax = np.maximum(vmax, v)
        vv = vmax
    else:
        vv = v
    bc1 = 1 - b1**step
    bc2 = 1 - b2**step
    denom = np.sqrt(vv) / math.sqrt(bc2) + eps
    return p - (lr / bc1) * m / denom, m, v, vmax


SGD_CONFIGS = [
    dict(momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0),
    dict(momentum=0.9, dampening=0.0, nesterov=False, weight_decay=0.0),
    dict(momentum=0.9, dampening=0.1, nesterov=False, weight_decay=1e-2),
    dict(momentum=0.9, dampening=0.0, nesterov=True, weight_decay=1e-2),
]


@pytest.mark.parametrize("cfg", SGD_CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 37, 100_003])
def test_sgd_update(n, dtype, cfg):
    p = randn((n,), dtype)
    buf = np.zeros_like(p) if cfg["momentum"] else None
    rp = p.astype(np.float64)
    rbuf = None
    for step in range(4):
        g = randn((n,), dtype, seed=100 + step)
        native.sgd_update(p, g, buf, 0.05, first_step=step == 0, **cfg)
        rp, rbuf = ref_sgd(
            rp,
            g.astype(np.float64),
            rbuf,
            0.05,
            first=step == 0,
            wd=cfg["weight_decay"],
            **{k: cfg[k] for k in ("momentum", "dampening", "nesterov")},
        )
        np.testing.assert_allclose(p, rp, **tol(dtype, 10))
        if buf is not None:
            np.testing.assert_allclose(buf, rbuf, **tol(dtype, 10))


ADAM_CONFIGS = [
    dict(weight_decay=0.0, decoupled=False, amsgrad=False),
    dict(weight_decay=1e-2, decoupled=False, amsgrad=False),
    dict(weight_decay=1e-2, decoupled=True, amsgrad=False),
    dict(weight_decay=0.0, decoupled=False, amsgrad=True),
    dict(weight_decay=1e-1, decoupled=True, amsgrad=True),
]


@pytest.mark.parametrize("cfg", ADAM_CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 37, 100_003])
def test_adam_update(n, dtype, cfg):
    p = randn((n,), dtype)
    m, v = np.zeros_like(p), np.zeros_like(p)
    vmax = np.zeros_like(p) if cfg["amsgrad"] else None
    rp, rm, rv = p.astype(np.float64), np.zeros(n), np.zeros(n)
    rvmax = np.zeros(n)
    hp = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8)
    for step in range(1, 6):
        g = randn((n,), dtype, seed=200 + step, scale=1.0 / step)
        native.adam_update(p, g, m, v, vmax, step, hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], **cfg)
        rp, rm, rv, rvmax = ref_adam(
            rp,
            g.astype(np.float64),
            rm,
            rv,
            rvmax,
            step,
            hp["lr"],
            hp["beta1"],
            hp["beta2"],
            hp["eps"],
            cfg["weight_decay"],
            cfg["decoupled"],
            cfg["amsgrad"],
        )
        np.testing.assert_allclose(p, rp, **tol(dtype, 50))
        np.testing.assert_allclose(m, rm, **tol(dtype, 10))
        np.testing.assert_allclose(v, rv, **tol(dtype, 10))
        if vmax is not None:
            np.testing.assert_allclose(vmax, rvmax, **tol(dtype, 10))


def test_optimizers_match_torch_when_available():
    torch = pytest.importorskip("torch")
    n = 1000
    p0 = randn((n,), np.float32)
    grads = [randn((n,), np.float32, seed=300 + i) for i in range(5)]

    # AdamW + amsgrad
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.AdamW([tp], lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, amsgrad=True)
    p, m, v, vmax = p0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    for step, g in enumerate(grads, 1):
        tp.grad = torch.from_numpy(g.copy())
        opt.step()
        native.adam_update(p, g, m, v, vmax, step, 1e-2, 0.9, 0.99, 1e-8, 0.05, True, True)
    np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-6, atol=1e-7)

    # SGD, nesterov + weight decay
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.SGD([tp], lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
    p, buf = p0.copy(), np.zeros(n, np.float32)
    for step, g in enumerate(grads):
        tp.grad = torch.from_numpy(g.copy())
        opt.step()
        native.sgd_update(p, g, buf, 0.1, 0.9, 0.0, True, 1e-3, step == 0)
    np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_optimizer_inplace_requirements():
    p = np.zeros(8, np.float32)
    g = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="contiguous"):
        native.sgd_update(np.zeros(16, np.float32)[::2], g, None, 0.1, 0.0, 0.0, False, 0.0, True)
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        native.sgd_update(ro, g, None, 0.1, 0.0, 0.0, False, 0.0, True)
    with pytest.raises(ValueError, match="momentum_buf"):
        native.sgd_update(p, g, None, 0.1, 0.9, 0.0, False, 0.0, True)
    with pytest.raises(ValueError, match="elements"):
        native.sgd_update(p, np.ones(9, np.float32), None, 0.1, 0.0, 0.0, False, 0.0, True)
    with pytest.raises(TypeError, match="sgd_update.*float64"):
        native.sgd_update(p, g.astype(np.float64), None, 0.1, 0.0, 0.0, False, 0.0, True)
    m, v = np.zeros_like(p), np.zeros_like(p)
    with pytest.raises(ValueError, match="max_exp_avg_sq"):
        native.adam_update(p, g, m, v, None, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False, True)
    with pytest.raises(ValueError, match="step"):
        native.adam_update(p, g, m, v, None, 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, False, False)
    with pytest.raises(ValueError, match="exp_avg"):
        native.adam_update(p, g, np.zeros(16, np.float32)[::2], v, None, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False, False)
    # the C++ side enforces the same rules for direct callers of flow._C
    from flow import _C

    with pytest.raises(ValueError, match="contiguous"):
        _C.sgd_update(np.zeros(16, np.float32)[::2], g, None, 0.1, 0.0, 0.0, False, 0.0, True)
    with pytest.raises(ValueError, match="writable"):
        _C.adam_update(p, g, m, ro, None, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False, False)
    # a non-contiguous gradient is fine (read only)
    native.sgd_update(p, np.ones(16, np.float32)[::2], None, 0.1, 0.0, 0.0, False, 0.0, True)
    np.testing.assert_allclose(p, -0.1)
