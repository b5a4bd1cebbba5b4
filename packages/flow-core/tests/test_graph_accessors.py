"""nn.Graph's public accessors and block substitution (what a plugin driving a graph uses)."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import FlowError


class _Train(nn.Graph):
    def __init__(self, a, b, opt, sch=None):
        super().__init__()
        self.a = a
        self.b = b
        self.add_optimizer(opt, lr_sch=sch)

    def build(self, x, y):
        loss = F.mse_loss(self.b(self.a(x)), y)
        loss.backward()
        return loss


def _graph():
    flow.manual_seed(0)
    a, b = nn.Linear(4, 8), nn.Linear(8, 2)
    opt = flow.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
    sch = flow.optim.lr_scheduler.StepLR(opt, step_size=1)
    return _Train(a, b, opt, sch), a, b, opt, sch


def test_named_blocks_optimizers_schedulers_scaler_and_name():
    g, a, b, opt, sch = _graph()
    blocks = list(g.named_blocks())
    assert [n for n, _ in blocks] == ["a", "b"]
    assert blocks[0][1].module is a and blocks[1][1].module is b
    assert g.optimizers() == [opt] and g.lr_schedulers() == [sch]
    assert g.get_grad_scaler() is None
    assert g.name == "_Train"


def test_substitute_block_replaces_the_call_while_tracing_and_restores_it():
    g, a, b, opt, _ = _graph()
    x = flow.randn(3, 4)
    seen = []

    def double_then_a(t):
        seen.append(tuple(t.shape))
        return a(t * 2.0)

    with g.substitute_block("a", double_then_a) as block:
        assert block is dict(g.named_blocks())["a"]
        assert block.weight is a.weight  # attribute access still reaches the module
        out = g.b(g.a(x))
    assert seen == [(3, 4)]
    np.testing.assert_allclose(out.detach().numpy(), b(a(x * 2.0)).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(g.a(x).detach().numpy(), a(x).detach().numpy())  # restored on exit

    # restored even when the body raises
    with pytest.raises(RuntimeError, match="boom"):
        with g.substitute_block("a", double_then_a):
            raise RuntimeError("boom")
    seen.clear()
    g.a(x)
    assert seen == []


def test_substitute_block_in_a_compiled_step_traces_the_substitute():
    g, a, b, opt, _ = _graph()
    x, y = flow.randn(3, 4), flow.randn(3, 2)
    ref_a, ref_b = nn.Linear(4, 8), nn.Linear(8, 2)
    ref_a.load_state_dict(a.state_dict())
    ref_b.load_state_dict(b.state_dict())
    ref_loss = F.mse_loss(ref_b(ref_a(x) + 1.0), y)
    with g.substitute_block("a", lambda t: a(t) + 1.0):
        loss = g(x, y)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-6)


def test_substitute_block_rejects_bad_input():
    g, *_ = _graph()
    with pytest.raises(KeyError, match="no block 'c'"):
        with g.substitute_block("c", lambda t: t):
            pass
    with pytest.raises(TypeError, match="callable"):
        with g.substitute_block("a", 3):
            pass
    with g.substitute_block("a", lambda t: t):
        with pytest.raises(FlowError, match="already substituted"):
            with g.substitute_block("a", lambda t: t):
                pass
