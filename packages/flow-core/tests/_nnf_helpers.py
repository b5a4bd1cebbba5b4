"""Helpers shared by the nn.functional tests (test_activation, test_norm, test_loss, test_attention,
test_nn_functional): comparisons against PyTorch and a second-derivative check."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.testing import gradcheck

DTYPES = [np.float32, np.float64]


def tol(dtype) -> dict:
    return dict(rtol=1e-4, atol=1e-5) if np.dtype(dtype) == np.float32 else dict(rtol=1e-7, atol=1e-9)


def torch_or_skip():
    return pytest.importorskip("torch")


def compare(
    flow_fn, torch_fn, arrays, dtype=np.float64, grad=True, requires_grad=None, seed=1, rtol=None, atol=None, consts=()
):
    """Run ``flow_fn`` and ``torch_fn`` on the same float arrays (cast to ``dtype``); compare outputs and the
    gradients of every input (for a random output gradient). ``consts`` are extra non-float arguments
    (index arrays) given to both as tensors after the float ones."""
    torch = torch_or_skip()
    t = tol(dtype)
    rtol = t["rtol"] if rtol is None else rtol
    atol = t["atol"] if atol is None else atol
    arrays = [np.asarray(a, dtype) for a in arrays]
    rg = requires_grad if requires_grad is not None else [grad] * len(arrays)
    fs = [flow.tensor(a, requires_grad=r) for a, r in zip(arrays, rg)]
    ts = [torch.tensor(a, requires_grad=r) for a, r in zip(arrays, rg)]
    fc = [flow.tensor(np.asarray(c)) for c in consts]
    tc = [torch.tensor(np.asarray(c)) for c in consts]
    a = flow_fn(*fs, *fc)
    b = torch_fn(*ts, *tc)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol)
    if a.dtype.is_floating_point:
        assert a.dtype.np == np.dtype(dtype), f"output dtype {a.dtype}, expected {np.dtype(dtype)}"
    if not grad:
        return a, b
    go = np.random.default_rng(seed).standard_normal(tuple(b.shape)).astype(dtype)
    a.backward(flow.tensor(go))
    b.backward(torch.tensor(go))
    for k, (f, th) in enumerate(zip(fs, ts)):
        if not f.requires_grad:
            continue
        gt = th.grad.numpy() if th.grad is not None else np.zeros(th.shape, dtype)
        gf = f.grad.numpy() if f.grad is not None else np.zeros(f.shape, dtype)
        assert gf.dtype == np.dtype(dtype), f"grad {k} has dtype {gf.dtype}"
        np.testing.assert_allclose(gf, gt, rtol=rtol, atol=atol, err_msg=f"gradient of input {k}")
    return a, b


def gradgrad(fn, inputs, seed: int = 1, **kw) -> bool:
    """gradcheck of the first derivative of ``fn`` (built with create_graph=True) against finite differences."""
    rng = np.random.default_rng(seed)
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    projs = [flow.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in outs]
    idx = [i for i, x in enumerate(inputs) if isinstance(x, flow.Tensor) and x.requires_grad]

    def first_grad(*xs):
        numeric = not all(xs[i].requires_grad for i in idx)
        with flow.enable_grad():
            if numeric:  # finite differences evaluate this under no_grad with fresh leaves
                xs = [x.detach().requires_grad_(True) if i in idx else x for i, x in enumerate(xs)]
            r = fn(*xs)
            rs = r if isinstance(r, (tuple, list)) else (r,)
            tot = sum((o * p).sum() for o, p in zip(rs, projs))
            gs = flow.autograd.grad(tot, [xs[i] for i in idx], create_graph=not numeric, allow_unused=True)
        return tuple(g if g is not None else flow.zeros_like(xs[i]) for g, i in zip(gs, idx))

    return gradcheck(first_grad, inputs, **kw)


def leaf(a, dtype=np.float64):
    return flow.tensor(np.asarray(a, dtype), requires_grad=True)
