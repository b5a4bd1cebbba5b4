"""``graph.config.enable_zero`` (the settings the ``zero`` pass reads) and the optimizer-state layout
hook (:func:`flow.optim.set_state_layout`) that lets a plugin give a parameter's states their
own layout, in eager and in graph mode, on one process."""

from __future__ import annotations

import types

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import FlowError
from flow.graph.config import FEATURE_PASSES, GraphConfig
from flow.optim import StateLayout, set_state_layout, state_layout
from flow.optim.errors import OptimizerError
from flow.plugins import hookimpl
from flow.registry import REGISTRY


def _model():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))


class Train(nn.Graph):
    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


def _batches(k=3):
    rng = np.random.default_rng(0)
    return [
        (flow.tensor(rng.standard_normal((6, 5)).astype(np.float32)), flow.tensor(rng.integers(0, 3, 6)))
        for _ in range(k)
    ]


class _Entry:
    def __init__(self, name, enabled_by_default=False):
        self.name, self.enabled_by_default = name, enabled_by_default


# -- enable_zero -------------------------------------------------------------------------------
class _WithZero:
    """The registry's passes with a 'zero' entry (as when flow-dist is installed)."""

    def __init__(self, passes):
        self._passes = passes

    def __contains__(self, name):
        return name == "zero" or name in self._passes

    def __getattr__(self, name):
        return getattr(self._passes, name)


def test_enable_zero_stores_the_settings_and_switches_the_pass(monkeypatch):
    passes = REGISTRY.passes
    monkeypatch.setattr(type(REGISTRY), "passes", property(lambda self: _WithZero(passes)))  # with or without flow-dist
    c = GraphConfig()
    assert c.zero is None and FEATURE_PASSES["zero"] == "zero"
    assert not c.pass_enabled(_Entry("zero"))
    v = c.key()
    c.enable_zero()
    assert c.zero == {"stage": 1, "shard_min_size": 1024, "shard_restore_level": 1}
    assert c.pass_enabled(_Entry("zero")) and c.key() != v  # a change recompiles
    c.enable_zero(True, stage=2, shard_min_size=1, shard_restore_level=0)
    assert c.zero == {"stage": 2, "shard_min_size": 1, "shard_restore_level": 0}
    assert "zero={'stage': 2" in repr(c)
    c.disable_pass("zero")  # an explicit override wins
    assert not c.pass_enabled(_Entry("zero"))
    c.enable_pass("zero")
    c.enable_zero(False)
    assert c.zero is None and c.pass_enabled(_Entry("zero"))  # (the override still says on)


@pytest.mark.parametrize(
    "kw, what",
    [
        (dict(stage=0), "stage"),
        (dict(stage=4), "stage"),
        (dict(stage=True), "stage"),
        (dict(stage="1"), "stage"),
        (dict(shard_min_size=0), "shard_min_size"),
        (dict(shard_min_size=2.5), "shard_min_size"),
        (dict(shard_restore_level=2), "shard_restore_level"),
    ],
)
def test_enable_zero_rejects_bad_settings(kw, what):
    c = GraphConfig()
    with pytest.raises(ValueError, match=what):
        c.enable_zero(**kw)
    assert c.zero is None


class _NoZero:
    """The registry's passes without 'zero' (as when flow-dist is not installed)."""

    def __init__(self, passes):
        self._passes = passes

    def __contains__(self, name):
        return name != "zero" and name in self._passes

    def __getattr__(self, name):
        return getattr(self._passes, name)


def test_enable_zero_needs_a_zero_pass(monkeypatch):
    passes = REGISTRY.passes
    monkeypatch.setattr(type(REGISTRY), "passes", property(lambda self: _NoZero(passes)))
    c = GraphConfig()
    with pytest.raises(FlowError, match="graph pass 'zero'.*flow-dist"):
        c.enable_zero()
    c.enable_zero(False)  # switching it off needs nothing
    c.zero = {"stage": 1, "shard_min_size": 1, "shard_restore_level": 1}  # set behind its back: check() says so
    with pytest.raises(FlowError, match="graph pass 'zero'"):
        c.check()


def test_a_zero_pass_gets_the_settings():
    seen = []

    def zero_pass(ir, config):
        seen.append(dict(config.zero))
        return ir

    mod = types.ModuleType("fake_zero")
    mod.flow_register_passes = hookimpl(
        lambda registry: registry.register_pass("zero", zero_pass, enabled_by_default=False, priority=100)
    )
    flow.plugins.register(mod, name="tests.fake_zero")
    try:
        m = _model()
        g = Train(m, flow.optim.SGD(m.parameters(), lr=0.1))
        g.config.enable_zero(stage=2, shard_min_size=8)
        x, y = _batches(1)[0]
        g(x, y)
        assert seen == [{"stage": 2, "shard_min_size": 8, "shard_restore_level": 1}]
        assert "zero" in [r.name for r in g.pass_log]
    finally:
        flow.plugins.unregister("tests.fake_zero")


# -- the state layout hook ---------------------------------------------------------------------
class FlatLayout(StateLayout):
    """The states of a parameter as one flat row (the update ops still see the parameter's shape)."""

    def __init__(self, p):
        self.shape = tuple(p.shape)
        super().__init__((p.numel(),))

    def wrap(self, view):
        return view.reshape(self.shape)

    def from_param(self, arr):
        return np.asarray(arr).reshape(-1)


def _momenta(opt):
    return [opt.state[p]["momentum_buffer"].numpy().copy() for p in opt.param_groups[0]["params"]]


def test_state_layout_sizes_the_flat_state_and_keeps_the_update():
    ref_m, m = _model(), _model()
    ref = flow.optim.SGD(ref_m.parameters(), lr=0.1, momentum=0.9)
    opt = flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    w = m[0].weight
    assert state_layout(w) is None
    batches = _batches()
    for k, (x, y) in enumerate(batches):
        if k == 1:  # set after a step: the bucket is rebuilt and the state carried over (from_param)
            set_state_layout(w, FlatLayout(w))
            assert state_layout(w).local_shape == (20,)
        for model, o in ((ref_m, ref), (m, opt)):
            o.zero_grad()
            F.cross_entropy(model(x), y).backward()
            o.step()
    b = opt._buckets(0)[0]
    assert b.state_shapes[0] == (20,) and b.state_shapes[1] == (4,)
    assert b.param_state(0)["momentum_buffer"].shape == (20,)
    for a, r in zip(m.parameters(), ref_m.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), r.detach().numpy())
    mine, theirs = _momenta(opt), _momenta(ref)
    np.testing.assert_array_equal(mine[0].reshape(-1), theirs[0].reshape(-1))
    set_state_layout(w, None)  # back to the parameter's layout
    opt.zero_grad()
    F.cross_entropy(m(batches[0][0]), batches[0][1]).backward()
    opt.step()
    assert opt._buckets(0)[0].state_shapes[0] == (4, 5)


def test_state_layout_matches_torch_step_for_step():
    torch = pytest.importorskip("torch")
    m = _model()
    tm = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    with torch.no_grad():
        for tp, p in zip(tm.parameters(), m.parameters()):
            tp.copy_(torch.from_numpy(p.detach().numpy().copy()))
    for p in m.parameters():
        set_state_layout(p, FlatLayout(p))
    opt = flow.optim.Adam(m.parameters(), lr=0.05)
    topt = torch.optim.Adam(tm.parameters(), lr=0.05)
    for x, y in _batches():
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tm(torch.from_numpy(x.numpy())), torch.from_numpy(y.numpy())).backward()
        topt.step()
        for p, tp in zip(m.parameters(), tm.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert all(s == (p.numel(),) for s, p in zip(opt._buckets(0)[0].state_shapes, m.parameters()))


def test_compiled_step_binds_the_laid_out_states():
    ref_m, m = _model(), _model()
    ref = flow.optim.SGD(ref_m.parameters(), lr=0.1, momentum=0.9)
    opt = flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for p in m.parameters():
        set_state_layout(p, FlatLayout(p))
    g = Train(m, opt)
    for x, y in _batches():
        ref.zero_grad()
        want = F.cross_entropy(ref_m(x), y)
        want.backward()
        ref.step()
        np.testing.assert_allclose(g(x, y).numpy(), want.detach().numpy(), rtol=1e-6)
    for a, r in zip(m.parameters(), ref_m.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), r.detach().numpy(), rtol=1e-6, atol=1e-7)
    b = opt._buckets(0)[0]
    assert b.total == sum(p.numel() for p in m.parameters())
    assert [s for s in b.state_shapes] == [(p.numel(),) for p in m.parameters()]
    for mine, theirs in zip(_momenta(opt), _momenta(ref)):
        np.testing.assert_allclose(mine.reshape(-1), theirs.reshape(-1), rtol=1e-6, atol=1e-7)


def test_state_layout_errors():
    p = nn.Parameter(flow.zeros(3, 2))
    with pytest.raises(TypeError, match="StateLayout"):
        set_state_layout(p, (6,))
    with pytest.raises(TypeError, match="parameter"):
        set_state_layout(np.zeros(3), StateLayout((3,)))
    with pytest.raises(ValueError, match="non-negative"):
        StateLayout((-1,))
    set_state_layout(p, StateLayout((3,)))  # the base class cannot carry a parameter-shaped state over
    opt = flow.optim.SGD([p], lr=0.1, momentum=0.9)
    b = opt._buckets(0)[0]
    with pytest.raises(OptimizerError, match="laid out like its parameter"):
        b.set_param_state(0, "momentum_buffer", np.ones((3, 2)))
    with pytest.raises(OptimizerError, match="has 5 elements"):
        b.set_param_state(0, "momentum_buffer", np.ones(5))
    b.set_param_state(0, "momentum_buffer", np.ones(3))
    assert b.param_state(0)["momentum_buffer"].shape == (3,) and b.total == 3
    set_state_layout(p, None)
    assert state_layout(p) is None


def test_sparse_gradients_of_a_parameter_with_a_state_layout_are_refused():
    emb = nn.Embedding(10, 3, sparse=True)
    set_state_layout(emb.weight, FlatLayout(emb.weight))
    opt = flow.optim.SGD(emb.parameters(), lr=0.1)
    emb(flow.tensor([1, 4])).sum().backward()
    before = emb.weight.detach().numpy().copy()
    with pytest.raises(OptimizerError, match="layout of its own"):
        opt.step()
    np.testing.assert_array_equal(emb.weight.detach().numpy(), before)  # nothing was updated
