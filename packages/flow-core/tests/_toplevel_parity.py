"""Value-and-gradient parity against torch for the top-level functions tests (float32 and float64)."""

from __future__ import annotations

import numpy as np

import flow

FLOAT_DTYPES = ("float32", "float64")
_TOL = {"float32": (2e-5, 2e-5), "float64": (1e-10, 1e-10)}


def _to_flow(a, dtype: str, grad: bool):
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return flow.tensor(a, dtype=getattr(flow, dtype), requires_grad=grad)
    return flow.tensor(a) if isinstance(a, np.ndarray) else a


def _to_torch(a, dtype: str, grad: bool):
    import torch

    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=grad)
    return torch.tensor(a) if isinstance(a, np.ndarray) else a


def _outputs(o):
    return list(o) if isinstance(o, tuple) else [o]


def check(ff, tf, *arrays, dtypes=FLOAT_DTYPES, grad: bool = True, rtol=None, atol=None, seed: int = 0):
    """Run ``ff`` on flow tensors and ``tf`` on torch tensors made from ``arrays`` (float arrays in each of
    ``dtypes``, others as they are); compare every output and, with ``grad``, the gradients of the float
    inputs for a random output gradient."""
    for dt in dtypes:
        r, a = _TOL[dt]
        r, a = rtol or r, atol or a
        fx = [_to_flow(x, dt, grad) for x in arrays]
        tx = [_to_torch(x, dt, grad) for x in arrays]
        fo, to = _outputs(ff(*fx)), _outputs(tf(*tx))
        assert len(fo) == len(to)
        for f, t in zip(fo, to):
            assert tuple(f.shape) == tuple(t.shape), (tuple(f.shape), tuple(t.shape))
            assert str(f.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], (f.dtype, t.dtype)
            np.testing.assert_allclose(f.detach().numpy(), t.detach().numpy(), rtol=r, atol=a, equal_nan=True)
        if not grad:
            continue
        rng = np.random.default_rng(seed)
        floats = [(f, t) for f, t in zip(fo, to) if t.dtype.is_floating_point and t.requires_grad]
        if not floats:
            continue
        f_loss = t_loss = 0
        for f, t in floats:
            g = rng.normal(size=tuple(t.shape))
            f_loss = f_loss + (f * flow.tensor(g, dtype=f.dtype)).sum()
            t_loss = t_loss + (t * _to_torch(g, dt, False)).sum()
        f_loss.backward()
        t_loss.backward()
        for f, t in zip(fx, tx):
            if getattr(t, "requires_grad", False):
                tg = np.zeros(tuple(t.shape)) if t.grad is None else t.grad.numpy()
                fg = np.zeros(tuple(f.shape)) if f.grad is None else f.grad.numpy()
                np.testing.assert_allclose(fg, tg, rtol=r * 10, atol=a * 10, equal_nan=True)
