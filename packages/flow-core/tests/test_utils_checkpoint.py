"""flow.utils.checkpoint: gradients equal to the plain run (dropout included), fewer saved bytes,
both schemes, checkpoint_sequential, and parity with torch.utils.checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
from flow.autograd.node import Node
from flow.errors import AutogradError
from flow.utils.checkpoint import checkpoint, checkpoint_sequential


def N(t):
    return np.asarray(t.detach().numpy())


def _net(p=0.5):
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Dropout(p), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 8))


def _grads(m, x, run):
    for p in m.parameters():
        p.grad = None
    x.grad = None
    flow.manual_seed(11)
    y = run(x)
    flow.manual_seed(99)  # backward draws from a different state: the recomputation must restore its own
    (y * y).sum().backward()
    return [N(y), N(x.grad)] + [N(p.grad) for p in m.parameters()]


def _x():
    return flow.tensor(np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32), requires_grad=True)


@pytest.mark.parametrize("reentrant", [False, True])
def test_gradients_equal_plain_run_with_dropout(reentrant):
    m, x = _net(), _x()
    want = _grads(m, x, m)
    got = _grads(m, x, lambda x: checkpoint(m, x, use_reentrant=reentrant))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_without_preserved_rng_state_dropout_differs():
    m, x = _net(), _x()
    want = _grads(m, x, m)
    got = _grads(m, x, lambda x: checkpoint(m, x, use_reentrant=False, preserve_rng_state=False))
    assert not np.array_equal(got[1], want[1])


def _saved_bytes(t) -> int:
    """Bytes of the arrays the autograd graph behind ``t`` holds for backward (inputs and outputs saved)."""
    seen, stack, arrays = set(), [t.grad_fn], {}
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        for s in (n.saved_in, n.saved_out):
            if isinstance(s, tuple):
                for a in s:
                    a = getattr(a, "_data", a)
                    if hasattr(a, "nbytes"):
                        arrays[id(a)] = a.nbytes
        stack.extend(e for e, _ in n.next if isinstance(e, Node))
    return sum(arrays.values())


def test_checkpoint_saves_fewer_bytes():
    flow.manual_seed(0)
    m = nn.Sequential(*[nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64)) for _ in range(4)])
    x = flow.randn(32, 64, requires_grad=True)
    plain = _saved_bytes(m(x))
    ckpt = _saved_bytes(checkpoint(m, x, use_reentrant=False))
    # what stays is the region's input (and the parameters its first ops keep): the activations are gone
    assert ckpt < plain / 4, (ckpt, plain)
    seq = checkpoint_sequential(m, 2, x, use_reentrant=False)
    assert _saved_bytes(seq) < plain


def test_autograd_grad_reaches_closure_parameters():
    m, x = _net(0.0), _x()
    g = flow.autograd.grad(checkpoint(m, x, use_reentrant=False).sum(), [x] + list(m.parameters()))
    w = flow.autograd.grad(m(x).sum(), [x] + list(m.parameters()))
    for a, b in zip(g, w):
        np.testing.assert_allclose(N(a), N(b), rtol=1e-6)
    assert all(p.grad is None for p in m.parameters())


def test_checkpoint_sequential_matches_plain():
    m, x = _net(), _x()
    want = _grads(m, x, m)
    for segments in (1, 2, 3):
        got = _grads(m, x, lambda x, segments=segments: checkpoint_sequential(m, segments, x, use_reentrant=False))
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="segments"):
        checkpoint_sequential(m, 0, x)
    with pytest.raises(ValueError, match="segments for only"):
        checkpoint_sequential(m, 99, x)


def test_kwargs_multiple_outputs_and_retain_graph():
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    b = flow.tensor([3.0, 4.0], requires_grad=True)

    def fn(x, y, *, k):
        return x.sin() * y, (x * y).exp() * k

    u, v = checkpoint(fn, a, b, k=2.0, use_reentrant=False)
    loss = u.sum() + v.sum()
    loss.backward(retain_graph=True)
    g1 = N(a.grad).copy()
    loss.backward()
    np.testing.assert_allclose(N(a.grad), 2 * g1)
    want = np.cos([1.0, 2.0]) * [3.0, 4.0] + np.exp(np.array([3.0, 8.0])) * [3.0, 4.0] * 2
    np.testing.assert_allclose(g1, want, rtol=1e-6)


def test_nondeterministic_function_is_reported():
    calls = []

    def fn(x):
        calls.append(1)
        return x.exp() if len(calls) == 1 else x.exp().sin()

    x = flow.tensor([1.0], requires_grad=True)
    y = checkpoint(fn, x, use_reentrant=False)
    with pytest.raises(AutogradError, match="different ops"):
        y.sum().backward()


def test_no_grad_and_bad_arguments():
    x = flow.ones(2, requires_grad=True)
    with flow.no_grad():
        assert not checkpoint(lambda t: t * 2, x).requires_grad
    with pytest.raises(TypeError, match="callable"):
        checkpoint(3, x)
    with pytest.raises(ValueError, match="keyword arguments"):
        checkpoint(lambda t, k: t, x, k=1, use_reentrant=True)


def test_matches_torch_checkpoint():
    torch = pytest.importorskip("torch")
    import torch.utils.checkpoint as tcp

    w = np.random.default_rng(3).normal(size=(5, 5))
    xv = np.random.default_rng(4).normal(size=(2, 5))

    def block_f(x, w):
        return (x @ w).tanh() @ w

    fx, fw = flow.tensor(xv, requires_grad=True), flow.tensor(w, requires_grad=True)
    tx, tw = torch.tensor(xv, requires_grad=True), torch.tensor(w, requires_grad=True)
    checkpoint(block_f, fx, fw, use_reentrant=False).pow(2).sum().backward()
    tcp.checkpoint(block_f, tx, tw, use_reentrant=False).pow(2).sum().backward()
    np.testing.assert_allclose(N(fx.grad), tx.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(N(fw.grad), tw.grad.numpy(), rtol=1e-10)


def test_recomputation_runs_under_the_forwards_autocast():
    pytest.importorskip("flow_amp")
    m, x = _net(0.0), _x()

    def run(ck):
        x.grad = None
        with flow.autocast("cpu", dtype=flow.bfloat16):
            y = checkpoint(m, x, use_reentrant=False) if ck else m(x)
        assert y.dtype == flow.bfloat16
        y.float().sum().backward()  # outside the region, as usual
        return N(x.grad)

    np.testing.assert_array_equal(run(True), run(False))
