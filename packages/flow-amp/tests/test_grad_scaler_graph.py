"""nn.Graph.set_grad_scaler: a compiled step with loss scaling equals eager GradScaler training step for step."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow_amp.grad_scaler import GradScaler, StaticGradScaler

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the injected infs


def _model():
    flow.manual_seed(0)
    return flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.ReLU(), flow.nn.Linear(8, 3))


def _batches(n, inject=()):
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        x = rng.standard_normal((5, 4)).astype(np.float32)
        y = rng.standard_normal((5, 3)).astype(np.float32)
        if i in inject:
            x[0, 0] = np.inf if i % 2 else np.nan
        out.append((flow.tensor(x), flow.tensor(y)))
    return out


class _Train(flow.nn.Graph):
    def __init__(self, model, opt, scaler):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.set_grad_scaler(scaler)

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        return loss


def _pair(opt_name, opt_kw, make_scaler):
    me, mg = _model(), _model()
    mg.load_state_dict(me.state_dict())
    oe = getattr(flow.optim, opt_name)(me.parameters(), **opt_kw)
    og = getattr(flow.optim, opt_name)(mg.parameters(), **opt_kw)
    se, sg = make_scaler(), make_scaler()
    return (me, oe, se), (mg, og, sg), _Train(mg, og, sg)


def _eager_step(me, oe, se, x, y):
    oe.zero_grad()
    loss = ((me(x) - y) ** 2).mean()
    se.scale(loss).backward()
    se.step(oe)
    se.update()
    return loss


def _params(m):
    return [p.detach().numpy().copy() for p in m.parameters()]


INJECT = (2, 3, 7)


@pytest.mark.parametrize(
    "opt_name,opt_kw", [("SGD", dict(lr=0.05, momentum=0.9)), ("Adam", dict(lr=0.01)), ("RMSprop", dict(lr=0.01))]
)
def test_graph_matches_eager_step_for_step(opt_name, opt_kw):
    eager, graph, g = _pair(opt_name, opt_kw, lambda: GradScaler(init_scale=1024.0, growth_interval=3))
    (me, oe, se), (mg, og, sg) = eager, graph
    scales = []
    for i, (x, y) in enumerate(_batches(12, INJECT)):
        before = _params(mg)
        le = _eager_step(me, oe, se, x, y)
        lg = g(x, y)
        np.testing.assert_array_equal(lg.numpy(), le.detach().numpy())
        assert sg.get_scale() == se.get_scale()
        assert sg.state_dict() == se.state_dict()
        for a, b in zip(_params(me), _params(mg)):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
        if i in INJECT:  # skipped inside the compiled step: parameters untouched
            for a, b in zip(before, _params(mg)):
                np.testing.assert_array_equal(a, b)
        scales.append(sg.get_scale())
    assert g.compiles == 1
    assert scales == [1024.0, 1024.0, 512.0, 256.0, 256.0, 256.0, 512.0, 256.0, 256.0, 256.0, 512.0, 512.0]
    # optimizer states and step counts: skipped steps left them as eager mode did
    se_state, sg_state = oe.state_dict()["state"], og.state_dict()["state"]
    assert sorted(se_state) == sorted(sg_state)
    for k in se_state:
        for name, v in se_state[k].items():
            np.testing.assert_allclose(sg_state[k][name].numpy(), v.numpy(), rtol=1e-6, atol=1e-7)


def test_graph_records_scaling_as_ops():
    _, (mg, og, sg), g = _pair("SGD", dict(lr=0.1), lambda: GradScaler(init_scale=8.0))
    x, y = _batches(1)[0]
    g(x, y)
    names = [n.name for n in g.ir.nodes]
    assert names.count("amp_unscale") == 1 and names.count("amp_update_scale") == 1
    updates = [n for n in g.ir.nodes if n.name == "sgd_update"]
    assert updates and all(n.tags.get("skip_if") is not None for n in updates)


def test_graph_scale_growth_and_setters_without_recompiling():
    eager, graph, g = _pair("SGD", dict(lr=0.01), lambda: GradScaler(init_scale=4.0, growth_interval=2))
    (me, oe, se), (_, _, sg) = eager, graph
    seen = []
    for i, (x, y) in enumerate(_batches(8)):
        if i == 4:  # growth factor and interval are fed before each run
            for s in (se, sg):
                s.set_growth_factor(4.0)
                s.set_growth_interval(1)
        _eager_step(me, oe, se, x, y)
        g(x, y)
        assert sg.get_scale() == se.get_scale()
        seen.append(sg.get_scale())
    assert seen == [4.0, 8.0, 8.0, 16.0, 64.0, 256.0, 1024.0, 4096.0]
    assert g.compiles == 1


def test_static_grad_scaler_in_graph():
    eager, graph, g = _pair("Adam", dict(lr=0.01), lambda: StaticGradScaler(64.0))
    (me, oe, se), (mg, og, sg) = eager, graph
    for i, (x, y) in enumerate(_batches(6, (1, 4))):
        before = _params(mg)
        le = _eager_step(me, oe, se, x, y)
        lg = g(x, y)
        np.testing.assert_array_equal(lg.numpy(), le.detach().numpy())
        assert sg.get_scale() == 64.0
        for a, b in zip(_params(me), _params(mg)):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
        if i in (1, 4):
            for a, b in zip(before, _params(mg)):
                np.testing.assert_array_equal(a, b)
    assert "amp_update_scale" not in [n.name for n in g.ir.nodes]
    assert [int(v["step"].item()) for v in og.state_dict()["state"].values()] == [4] * 4


def test_graph_backward_starts_from_the_scale():
    """Loss scaling proper, not a rescale after backward: a float16 gradient of 2**-26 underflows to 0
    unless backward starts from the scale (2**10), so the step happens only with real loss scaling."""
    a = flow.tensor(2.0**-13, dtype=flow.float16)

    def run(graph: bool, scale: float):
        p = flow.nn.Parameter(flow.zeros(2))
        opt = flow.optim.SGD([p], lr=1.0)
        scaler = GradScaler(init_scale=scale)

        def loss_of():
            return ((p.half() * a) * a).sum().float()

        if graph:

            class G(flow.nn.Graph):
                def __init__(self):
                    super().__init__()
                    self.add_optimizer(opt)
                    self.set_grad_scaler(scaler)

                def build(self):
                    loss = loss_of()
                    loss.backward()
                    return loss

            G()()
        else:
            scaler.scale(loss_of()).backward()
            scaler.step(opt)
            scaler.update()
        return p.detach().numpy()

    np.testing.assert_array_equal(run(True, 1.0), [0.0, 0.0])  # unscaled: the gradient underflows
    np.testing.assert_array_equal(run(True, 2.0**10), [-(2.0**-26)] * 2)
    np.testing.assert_array_equal(run(False, 2.0**10), [-(2.0**-26)] * 2)


def test_disabled_scaler_in_graph_is_plain_training():
    _, (mg, og, sg), g = _pair("SGD", dict(lr=0.1), lambda: GradScaler(enabled=False))
    x, y = _batches(1)[0]
    g(x, y)
    assert "amp_unscale" not in [n.name for n in g.ir.nodes]


def test_set_grad_scaler_checks_its_argument():
    class G(flow.nn.Graph):
        def build(self):
            return None

    with pytest.raises(TypeError, match="GradScaler"):
        G().set_grad_scaler(object())
