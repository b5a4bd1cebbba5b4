"""Shared by the layer and loss tests: run a flow module and its PyTorch twin on the same inputs and
compare outputs, input gradients and parameter gradients."""

from __future__ import annotations

import numpy as np
import pytest

import flow

RTOL, ATOL = 1e-4, 1e-5


def _torch():
    return pytest.importorskip("torch")


def _np(t):
    return t.detach().numpy()


def _outputs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_parity(
    fm,
    tm,
    *inputs,
    grad: bool = True,
    rtol: float = RTOL,
    atol: float = ATOL,
    copy: bool = True,
    kwargs: dict | None = None,
    grad_args=None,
):
    """Run ``fm`` and ``tm`` on the same NumPy ``inputs``; compare outputs and all gradients.

    Float inputs require grad (only those at positions ``grad_args``, when given).
    """
    torch = _torch()
    if copy:
        fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    kwargs = kwargs or {}
    tin, fin = [], []
    for i, a in enumerate(inputs):
        if isinstance(a, np.ndarray):
            float_in = a.dtype.kind == "f" and (grad_args is None or i in grad_args)
            tin.append(torch.tensor(a, requires_grad=grad and float_in))
            fin.append(flow.tensor(a, requires_grad=grad and float_in))
        else:
            tin.append(a)
            fin.append(a)
    touts = [o for o in _outputs(tm(*tin, **kwargs)) if o is not None]
    fouts = [o for o in _outputs(fm(*fin, **kwargs)) if o is not None]
    assert len(touts) == len(fouts)
    for t, f in zip(touts, fouts):
        assert tuple(f.shape) == tuple(t.shape)
        np.testing.assert_allclose(_np(f), t.detach().numpy(), rtol=rtol, atol=atol)
    if not grad:
        return fouts
    rng = np.random.default_rng(0)
    tloss, floss = 0, 0
    for t, f in zip(touts, fouts):
        if t.requires_grad:
            g = rng.standard_normal(tuple(t.shape)).astype(np.float32)
            tloss = tloss + (t * torch.tensor(g)).sum()
            floss = floss + (f * flow.tensor(g)).sum()
    tloss.backward()
    floss.backward()
    for t, f in zip(tin, fin):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            np.testing.assert_allclose(_np(f.grad), t.grad.numpy(), rtol=rtol, atol=atol)
    tparams = dict(tm.named_parameters())
    for name, p in fm.named_parameters():
        tp = tparams[name]
        if tp.grad is None:
            assert p.grad is None or not _np(p.grad).any(), name
        else:
            np.testing.assert_allclose(_np(p.grad), tp.grad.numpy(), rtol=rtol, atol=atol, err_msg=name)
    return fouts


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
