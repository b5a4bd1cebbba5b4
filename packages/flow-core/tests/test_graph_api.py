"""The graph-mode API: nn.Graph (blocks, add_optimizer, config), flow.compile, and sharing parameters
and optimizer state with eager mode (train in graph mode, evaluate eagerly, save, resume)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import FlowError
from flow.plugins import hookimpl


def _model():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))


def _batches(n, seed=0, bs=8):
    rng = np.random.default_rng(seed)
    return [
        (flow.tensor(rng.standard_normal((bs, 5)).astype(np.float32)), flow.tensor(rng.integers(0, 3, bs)))
        for _ in range(n)
    ]


class Train(nn.Graph):
    def __init__(self, model, opt, sched=None):
        super().__init__()
        self.model = model
        self.add_optimizer(opt, lr_sch=sched)

    def build(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


class Eval(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def _eager_steps(model, opt, batches, sched=None):
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return losses


def _same_params(m1, m2, rtol=1e-6):
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=rtol, atol=1e-7, err_msg=k)


# -- nn.Graph ----------------------------------------------------------------------------------------


def test_modules_become_blocks_that_forward_to_the_module():
    m = _model()
    g = Eval(m)
    assert isinstance(g.model, flow.graph.Block) and g.model.module is m
    assert g.model.training is True and g.model.__class__.__name__ == "Block"
    assert g.model.state_dict().keys() == m.state_dict().keys()
    g.model.activation_checkpointing = True
    assert g.model.activation_checkpointing and g.model.config.activation_checkpointing
    assert g.config.blocks["model"].activation_checkpointing
    assert not hasattr(m, "activation_checkpointing")
    g.model.config.activation_checkpointing = False
    assert not g.model.activation_checkpointing
    g.model.some_flag = 3  # other attributes go to the module
    assert m.some_flag == 3
    assert "BLOCK:model:Sequential" in repr(g)


def test_sub_blocks_and_checkpointing_settings_reach_the_passes():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(4, 4)
            self.dec = nn.Linear(4, 2)

        def forward(self, x):
            return self.dec(F.relu(self.enc(x)))

    g = Eval(Net())
    g.model.enc.activation_checkpointing = True
    assert g.config.blocks["model.enc"].activation_checkpointing
    assert isinstance(g.model.enc, flow.graph.Block) and g.model.enc.name == "model.enc"
    g(flow.randn(2, 4))
    assert {n.scope for n in g.ir.nodes} >= {"model.enc", "model.dec"}
    entry = types.SimpleNamespace(name="activation_checkpointing", enabled_by_default=False)
    assert g.config.pass_enabled(entry)


def test_graph_requires_super_init_and_build():
    class NoInit(nn.Graph):
        def __init__(self):
            self.m = _model()

    with pytest.raises(FlowError, match="must call super"):
        NoInit()

    class NoBuild(nn.Graph):
        pass

    with pytest.raises(NotImplementedError, match="must define build"):
        NoBuild()(flow.randn(2, 5))
    with pytest.raises(TypeError, match="flow.optim.Optimizer"):
        Eval(_model()).add_optimizer("sgd")


def test_lr_schedule_is_fed_each_step_without_recompiling():
    batches = _batches(6)
    m1 = _model()
    o1 = flow.optim.SGD(m1.parameters(), lr=0.5, momentum=0.9)
    s1 = flow.optim.lr_scheduler.StepLR(o1, step_size=2, gamma=0.1)
    eager = _eager_steps(m1, o1, batches, s1)
    m2 = _model()
    o2 = flow.optim.SGD(m2.parameters(), lr=0.5, momentum=0.9)
    s2 = flow.optim.lr_scheduler.StepLR(o2, step_size=2, gamma=0.1)
    g = Train(m2, o2, s2)
    losses = [g(x, y).item() for x, y in batches]
    np.testing.assert_allclose(losses, eager, rtol=1e-6)
    _same_params(m1, m2)
    assert g.compiles == 1
    assert s2.get_last_lr() == s1.get_last_lr()
    assert [v.name for v in g.ir.hosts] == ["optimizer.group0.lr", "optimizer.group0.first_step"]


def test_config_setters():
    g = Train(_model(), flow.optim.SGD(_model().parameters(), lr=0.1))
    g.config.set_gradient_accumulation_steps(3)
    assert g.config.gradient_accumulation_steps == 3
    with pytest.raises(ValueError):
        g.config.set_gradient_accumulation_steps(0)
    g.config.enable_fusion(False)
    g.config.enable_memory_planning(False)
    assert not g.config.fusion and not g.config.memory_planning
    g.config.disable_pass("cse")
    g.config.enable_pass("cse")
    assert "passes={'cse': True}" in repr(g.config)


def test_amp_needs_the_flow_amp_plugin():
    g = Eval(_model())
    if "amp" in flow.registry.REGISTRY.passes:
        pytest.skip("an amp pass is registered")
    with pytest.raises(FlowError, match="flow-amp"):
        g.config.enable_amp(True)
    g.config.enable_amp(False)  # switching it off needs nothing


def test_amp_pass_registered_by_a_plugin_gets_the_options():
    seen = []

    def amp_pass(ir, config):
        seen.append(dict(config.amp))
        return ir

    mod = types.ModuleType("fake_amp")
    mod.flow_register_passes = hookimpl(
        lambda registry: registry.register_pass("amp", amp_pass, before="constant_folding", priority=100)
    )
    flow.plugins.register(mod, name="tests.fake_amp")
    try:
        g = Eval(_model())
        g.config.enable_amp(True, dtype=flow.bfloat16, loss_scale="dynamic")
        g(flow.randn(2, 5))
        assert seen == [{"dtype": flow.bfloat16, "loss_scale": "dynamic"}]
        assert [r.name for r in g.pass_log][:2] == ["trace", "amp"]
    finally:
        flow.plugins.unregister("tests.fake_amp")


def test_changing_the_config_recompiles():
    g = Eval(_model())
    x = flow.randn(2, 5)
    g(x)
    g(x)
    assert g.compiles == 1
    g.config.disable_pass("dce")
    g(x)
    assert g.compiles == 2


def test_outputs_can_be_nested_and_non_tensor():
    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = _model()

        def build(self, x, scale: float = 1.0):
            y = self.m(x) * scale
            return {"y": y, "parts": (y.sum(), None, 3)}

    g = G()
    out = g(flow.randn(2, 5), scale=2.0)
    assert set(out) == {"y", "parts"} and out["parts"][1:] == (None, 3)
    assert tuple(out["y"].shape) == (2, 3) and out["parts"][0].ndim == 0
    g(flow.randn(2, 5), scale=3.0)  # a different constant: a different specialisation
    assert g.compiles == 2


# -- sharing state with eager mode -------------------------------------------------------------------------


def test_train_in_graph_evaluate_eagerly_save_and_resume(tmp_path):
    batches = _batches(8, seed=1)
    # reference: 8 graph steps without interruption
    m_ref = _model()
    o_ref = flow.optim.Adam(m_ref.parameters(), lr=0.01)
    g_ref = Train(m_ref, o_ref)
    ref = [g_ref(x, y).item() for x, y in batches]

    m = _model()
    opt = flow.optim.Adam(m.parameters(), lr=0.01)
    g = Train(m, opt)
    losses = [g(x, y).item() for x, y in batches[:4]]
    # evaluate eagerly and through an inference graph: the same parameters
    x = batches[0][0]
    with flow.no_grad():
        eager_out = m(x)
    np.testing.assert_allclose(Eval(m)(x).numpy(), eager_out.numpy(), rtol=1e-6)
    assert opt.state_dict()["state"][0]["step"].item() == 4
    flow.save({"model": m.state_dict(), "opt": opt.state_dict()}, str(tmp_path / "ckpt"))

    # resume eagerly for two steps, then in graph mode again
    m2 = _model()
    o2 = flow.optim.Adam(m2.parameters(), lr=0.01)
    ck = flow.load(str(tmp_path / "ckpt"))
    m2.load_state_dict(ck["model"])
    o2.load_state_dict(ck["opt"])
    losses += _eager_steps(m2, o2, batches[4:6])
    g2 = Train(m2, o2)
    losses += [g2(x, y).item() for x, y in batches[6:]]
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    _same_params(m_ref, m2, rtol=1e-5)

    # and the first model keeps training in graph mode after its state was loaded into it
    m.load_state_dict(m2.state_dict())
    opt.load_state_dict(o2.state_dict())
    g(*batches[0])
    m_ref2 = _model()
    m_ref2.load_state_dict(m2.state_dict())
    o_ref2 = flow.optim.Adam(m_ref2.parameters(), lr=0.01)
    o_ref2.load_state_dict(o2.state_dict())
    _eager_steps(m_ref2, o_ref2, batches[:1])
    _same_params(m_ref2, m, rtol=1e-5)


def test_gradients_and_eager_grads_are_untouched_by_graph_steps():
    m = _model()
    opt = flow.optim.SGD(m.parameters(), lr=0.1)
    x, y = _batches(1)[0]
    F.cross_entropy(m(x), y).backward()
    grads = [p.grad.numpy().copy() for p in m.parameters()]
    Train(m, opt)(x, y)
    for p, g in zip(m.parameters(), grads):
        np.testing.assert_array_equal(p.grad.numpy(), g)


def test_parameters_without_gradients_are_not_updated():
    m = nn.ModuleDict({"used": nn.Linear(3, 2), "unused": nn.Linear(3, 2)})
    opt = flow.optim.Adam(m.parameters(), lr=0.1)
    before = m["unused"].weight.detach().numpy().copy()

    @flow.compile
    def step(x):
        opt.zero_grad()
        m["used"](x).sum().backward()
        opt.step()

    for _ in range(2):
        step(flow.randn(4, 3))
    np.testing.assert_array_equal(m["unused"].weight.detach().numpy(), before)
    st = opt.state_dict()["state"]
    assert st[0]["step"].item() == 2 and 2 not in st


def test_other_optimizers_use_their_own_update_through_the_generic_op():
    for cls, kw in (
        (flow.optim.RMSprop, dict(lr=0.01, momentum=0.5)),
        (flow.optim.Adagrad, dict(lr=0.1)),
        (flow.optim.LAMB, dict(lr=0.01)) if hasattr(flow.optim, "LAMB") else (flow.optim.SGD, {}),
    ):
        batches = _batches(3, seed=2)
        m1, m2 = _model(), _model()
        o1, o2 = cls(m1.parameters(), **kw), cls(m2.parameters(), **kw)
        eager = _eager_steps(m1, o1, batches)
        g = Train(m2, o2)
        np.testing.assert_allclose([g(x, y).item() for x, y in batches], eager, rtol=1e-6)
        _same_params(m1, m2)


# -- flow.compile ---------------------------------------------------------------------------------------------


def test_compile_inference_function_finds_the_model_in_its_closure():
    m = _model()
    m.eval()

    @flow.compile
    def predict(x):
        return F.softmax(m(x), dim=-1)

    x = flow.randn(4, 5)
    np.testing.assert_allclose(predict(x).numpy(), F.softmax(m(x), dim=-1).detach().numpy(), rtol=1e-6)
    assert {v.name for v in predict.ir.states} == {"m.0.weight", "m.0.bias", "m.2.weight", "m.2.bias"}
    with flow.no_grad():
        m[0].weight.mul_(0.5)  # eager change in place: the graph reads the live array
    np.testing.assert_allclose(predict(x).numpy(), F.softmax(m(x), dim=-1).detach().numpy(), rtol=1e-6)


def test_compile_a_method_of_a_module():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(x).tanh()

        @flow.compile
        def fast(self, x):
            return self.forward(x)

    net = Net()
    x = flow.randn(5, 3)
    np.testing.assert_allclose(net.fast(x).numpy(), net(x).detach().numpy(), rtol=1e-6)
    assert any(v.name.endswith("fc.weight") for v in net.fast.ir.states)


def test_compile_with_a_config_and_decorator_arguments():
    cfg = flow.graph.GraphConfig()
    cfg.disable_pass("simplify")

    @flow.compile(config=cfg)
    def f(x):
        return x * 1.0 + 0.0

    f(flow.randn(2))
    assert f.ir.op_counts() == {"mul": 1, "add": 1}
    assert "flow.compile f" in repr(f)


def test_compiled_training_step_with_clipping_batchnorm_and_nesterov():
    def setup():
        flow.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        return m, flow.optim.SGD(m.parameters(), lr=0.5, momentum=0.9, nesterov=True, weight_decay=0.01)

    def step(m, opt, x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(m.parameters(), 0.1)
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    batches = [
        (flow.tensor(rng.standard_normal((6, 4)).astype(np.float32)), flow.tensor(rng.integers(0, 2, 6)))
        for _ in range(4)
    ]
    m1, o1 = setup()
    eager = [step(m1, o1, *b).item() for b in batches]
    m2, o2 = setup()
    compiled = flow.compile(lambda x, y: step(m2, o2, x, y))
    np.testing.assert_allclose([compiled(*b).item() for b in batches], eager, rtol=1e-6)
    _same_params(m1, m2)
    assert m2[1].num_batches_tracked.item() == 4


def test_a_compiled_function_called_while_tracing_is_inlined():
    m = _model()
    inner = flow.compile(lambda x: m(x).relu())

    @flow.compile
    def outer(x):
        return inner(x) * 2

    x = flow.randn(3, 5)
    np.testing.assert_allclose(outer(x).numpy(), (m(x).relu() * 2).detach().numpy(), rtol=1e-6)
    assert inner.cache_size == 0 and outer.ir.op_counts()["relu"] >= 1


@pytest.mark.parametrize("call", ["numpy", "detach_numpy", "tolist", "item", "float"])
def test_reading_values_inside_build_gives_graph_mode_advice(call):
    from flow.graph.symbolic import GraphTraceError

    class Step(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.lin = flow.nn.Linear(2, 1)

        def build(self, x):
            y = self.lin(x).sum()  # requires grad: eager advice would be .detach().numpy()
            if call == "numpy":
                y.numpy()
            elif call == "detach_numpy":
                y.detach().numpy()
            elif call == "tolist":
                y.tolist()
            elif call == "item":
                y.item()
            else:
                float(y)
            return y

    with pytest.raises(GraphTraceError) as info:
        Step()(flow.ones(3, 2))
    msg = str(info.value)
    assert "symbolic" in msg and "detach()" not in msg
    assert "test_graph_api.py" in msg  # points at the user's line
