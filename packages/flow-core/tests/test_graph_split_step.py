"""flow.graph.SplitStep: a compiled forward and a compiled backward run separately, micro-batch by
micro-batch, equal eager autograd, the whole compiled step of nn.Graph, and torch."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import FlowError
from flow.graph.split_step import SavedActivations, SplitStep


def _mlp(seed: int = 0) -> nn.Module:
    flow.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 4)).double()


def _data(seed: int = 1, n: int = 8):
    rng = np.random.default_rng(seed)
    return flow.tensor(rng.standard_normal((n, 6))), flow.tensor(rng.standard_normal((n, 4)))


def _grads(m: nn.Module) -> dict:
    return {k: p.grad.numpy().copy() for k, p in m.named_parameters()}


def test_forward_and_backward_equal_eager_autograd():
    m, ref = _mlp(), _mlp()
    x, _ = _data()
    gy = flow.tensor(np.random.default_rng(2).standard_normal((8, 4)))
    xs = x.clone().requires_grad_(True)
    step = SplitStep(m)
    out, saved = step.forward(xs)
    assert isinstance(saved, SavedActivations) and out.grad_fn is None
    (gx,) = step.backward(saved, [gy])

    xr = x.clone().requires_grad_(True)
    yr = ref(xr)
    yr.backward(gy)
    np.testing.assert_allclose(out.numpy(), yr.detach().numpy(), rtol=0, atol=1e-13)
    np.testing.assert_allclose(gx.numpy(), xr.grad.numpy(), rtol=0, atol=1e-13)
    for k, g in _grads(ref).items():
        np.testing.assert_allclose(_grads(m)[k], g, rtol=0, atol=1e-13)


def test_interleaved_micro_batches_equal_the_whole_compiled_step():
    """Forwards and backwards in the 1F1B order of a middle stage (two forwards ahead) accumulate the
    gradients nn.Graph's compiled step with gradient accumulation uses; the SGD step then agrees."""
    m, ref = _mlp(), _mlp()
    x, y = _data(n=8)
    n = 4
    xs, ys = x.chunk(n), y.chunk(n)
    step = SplitStep(m)
    held: dict = {}

    def fwd(k):
        held[k] = step.forward(xs[k])

    def bwd(k):
        out, saved = held.pop(k)
        # the gradient of mse_loss(out, y_k) / n with respect to out, as the next stage would send it
        g = (out - ys[k]) * (2.0 / (out.numel() * n))
        step.backward(saved, [g])

    fwd(0)
    fwd(1)
    for k in range(2, n):
        fwd(k)
        bwd(k - 2)
    bwd(2)
    bwd(3)
    assert step.compiles == 1
    opt = flow.optim.SGD(m.parameters(), lr=0.1)
    opt.step()

    ropt = flow.optim.SGD(ref.parameters(), lr=0.1)

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.net = ref
            self.add_optimizer(ropt)
            self.config.set_gradient_accumulation_steps(n)

        def build(self, a, b):
            loss = F.mse_loss(self.net(a), b)
            loss.backward()
            return loss

    G()(x, y)
    for (k, p), q in zip(m.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=0, atol=1e-13, err_msg=k)


def test_loss_inside_the_module_and_grad_accumulation_modes():
    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _mlp()

        def forward(self, a, b):
            return F.mse_loss(self.net(a), b)

    m = WithLoss()
    ref = copy.deepcopy(m)
    x, y = _data()
    step = SplitStep(m)
    loss, saved = step.forward(x, y)
    assert loss.ndim == 0
    assert step.backward(saved, [flow.tensor(1.0, dtype=flow.float64)]) == [None, None]
    loss2, saved2 = step.forward(x, y)
    step.backward(saved2, [None])  # zero seed: adds nothing
    F.mse_loss(ref.net(x), y).backward()
    np.testing.assert_allclose(loss.numpy(), loss2.numpy(), rtol=0, atol=0)
    for k, g in _grads(ref).items():
        np.testing.assert_allclose(_grads(m)[k], g, rtol=0, atol=1e-13)
    _, saved3 = step.forward(x, y)
    step.backward(saved3, [flow.tensor(2.0, dtype=flow.float64)], accumulate=False)
    for k, g in _grads(ref).items():
        np.testing.assert_allclose(_grads(m)[k], 2 * g, rtol=0, atol=1e-13)


def test_bad_use_raises():
    m = _mlp()
    x, _ = _data()
    with pytest.raises(TypeError, match="flow.nn.Module"):
        SplitStep(lambda a: a)
    step = SplitStep(m)
    out, saved = step.forward(x)
    with pytest.raises(FlowError, match="1 output gradient"):
        step.backward(saved, [out, out])
    with pytest.raises(FlowError, match="shape"):
        step.backward(saved, [out[:2]])
    step.backward(saved, [out])
    with pytest.raises(FlowError, match="already used"):
        step.backward(saved, [out])
    with pytest.raises(FlowError, match="this step's forward"):
        SplitStep(_mlp()).backward(saved, [out])
    frozen = _mlp()
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(FlowError, match="no output of the module requires grad"):
        SplitStep(frozen).forward(x)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    m = _mlp()
    tm = torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Tanh(), torch.nn.Linear(8, 4)
    ).double()
    with torch.no_grad():
        for (_, p), tp in zip(m.named_parameters(), tm.parameters()):
            tp.copy_(torch.from_numpy(p.detach().numpy().copy()))
    x, gy = _data()
    step = SplitStep(m)
    out, saved = step.forward(x.clone().requires_grad_(True))
    (gx,) = step.backward(saved, [gy])
    tx = torch.from_numpy(x.numpy().copy()).requires_grad_(True)
    tout = tm(tx)
    tout.backward(torch.from_numpy(gy.numpy().copy()))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=0, atol=1e-12)
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=0, atol=1e-12)


def test_set_stage_and_graph_module_api():
    class G(nn.Graph):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def build(self, a):
            return self.m(a)

    g = G(_mlp())
    blk = g.m.to(flow.nn.graph.GraphModule)
    assert blk is g.m and isinstance(blk, flow.graph.Block)
    assert blk.set_stage(1) is blk and g.config.blocks["m"].stage_id == 1 and blk.placement is None
    g.m.config.set_stage(0)
    assert g.m.stage_id == 0
    with pytest.raises(ValueError, match="non-negative int"):
        g.m.config.set_stage(-1)
    with pytest.raises(ValueError, match="non-negative int"):
        g.m.config.set_stage(True)
    with pytest.raises(TypeError, match="flow.placement"):
        g.m.config.set_stage(0, "cpu")
    with pytest.raises(TypeError, match="GraphModule only"):
        g.m.to(nn.Linear)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        flow.nn.graph.Nope  # noqa: B018
    # without flow-dist's pipeline (or on one rank) the stage is only an annotation: the step runs as before
    x, _ = _data()
    np.testing.assert_allclose(g(x).detach().numpy(), g.m.module(x).detach().numpy(), rtol=0, atol=1e-13)


def test_capture_backward_records_instead_of_running():
    w = flow.ones(3, requires_grad=True)
    loss = (w * 2).sum()
    with flow.autograd.capture_backward() as calls:
        loss.backward()
        flow.autograd.backward([loss], [flow.tensor(3.0)], retain_graph=True)
    assert w.grad is None  # nothing ran
    assert len(calls) == 2 and calls[0].tensors == (loss,) and calls[0].grad_tensors == (None,)
    assert calls[1].retain_graph is True and float(calls[1].grad_tensors[0]) == 3.0
    loss.backward()  # outside the block it runs again
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0, 2.0])
    # per thread: another thread's backward is not captured
    import threading

    v = flow.ones(2, requires_grad=True)
    with flow.autograd.capture_backward() as mine:
        t = threading.Thread(target=lambda: (v * 3).sum().backward())
        t.start()
        t.join()
    assert mine == [] and v.grad.tolist() == [3.0, 3.0]
