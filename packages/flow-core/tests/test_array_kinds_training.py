"""Array kinds in training and graph mode: an MLP and the optimizers with the mirrored test kind
(tests/_mirrored_kind.py) against plain tensors, eagerly and in nn.Graph; the graph tracer's
symbolic arrays as an array kind."""

from __future__ import annotations

import numpy as np
import pytest
from _mirrored_kind import SEEN, MirroredArray, check_equal, is_mirrored, mirror, mirrored, mirrored_handler

import flow
import flow.nn as nn
from flow import array_kinds as K
from flow.interceptors import run_op


@pytest.fixture(autouse=True)
def mirrored_kind():
    K.register_array_kind(MirroredArray, mirrored_handler)
    SEEN.clear()
    yield
    K.unregister_array_kind(MirroredArray)


# -- training --------------------------------------------------------------------------------
def _mlp():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _data():
    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5)) for _ in range(2)]
    return batches * 4


def _sgd_step(params, lr):
    with flow.no_grad():
        for p in params:
            p.sub_(p.grad * lr)
            p.grad = None


def _train_eager(model, steps, optimizer=None, wrap_input=lambda t: t):
    losses = []
    for x, y in steps:
        loss = nn.functional.cross_entropy(model(wrap_input(flow.tensor(x))), flow.tensor(y))
        loss.backward()
        if optimizer is None:
            _sgd_step(model.parameters(), 0.1)
        else:
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(loss.detach().numpy()))
    return losses


def _momentum_sgd(model):
    return flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def test_mlp_trains_the_same_eagerly_with_mirrored_tensors_and_in_graph_mode():
    data = _data()
    plain = _train_eager(_mlp(), data)
    model = _mlp()
    for p in model.parameters():
        mirror(p)
    mirrored_losses = _train_eager(model, data, wrap_input=mirror)
    assert all(is_mirrored(p) for p in model.parameters())
    for p in model.parameters():
        check_equal(p._data.a, p._data.b, "the parameters")
    np.testing.assert_allclose(mirrored_losses, plain, rtol=1e-5)

    # with flow.optim (its update is an op, which the handler runs on both copies)
    ref = _mlp()
    plain_opt = _train_eager(ref, data, optimizer=_momentum_sgd(ref))
    model = _mlp()
    for p in model.parameters():
        mirror(p)
    SEEN.clear()
    mirrored_opt = _train_eager(model, data, optimizer=_momentum_sgd(model), wrap_input=mirror)
    assert "sgd_update" in SEEN and all(is_mirrored(p) for p in model.parameters())
    np.testing.assert_allclose(mirrored_opt, plain_opt, rtol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)

    gmodel = _mlp()
    opt = _momentum_sgd(gmodel)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = gmodel
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = nn.functional.cross_entropy(self.m(x), y)
            loss.backward()
            return loss

    step = Step()
    graph_losses = [float(step(flow.tensor(x), flow.tensor(y)).numpy()) for x, y in data]
    np.testing.assert_allclose(graph_losses, plain_opt, rtol=1e-5)
    assert plain[-1] < plain[0] and plain[-2] < plain[1]  # it does train
    assert plain_opt[-1] < plain_opt[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
        lambda p: flow.optim.AdamW(p, lr=0.05, weight_decay=0.1),
        lambda p: flow.optim.RMSprop(p, lr=0.01, momentum=0.5),
        lambda p: flow.optim.Adadelta(p, weight_decay=0.1),
        lambda p: flow.optim.Adamax(p, lr=0.05),
        lambda p: flow.optim.NAdam(p, lr=0.05),
        lambda p: flow.optim.RAdam(p, lr=0.05, betas=(0.5, 0.9)),
        lambda p: flow.optim.Rprop(p, lr=0.05),
        lambda p: flow.optim.ASGD(p, lr=0.05, t0=1),
    ],
    ids=["sgd", "adamw", "rmsprop", "adadelta", "adamax", "nadam", "radam", "rprop", "asgd"],
)
def test_optimizer_steps_of_mirrored_parameters(make):
    x, a = mirrored(4, 3, requires_grad=True)
    ref = flow.tensor(a, requires_grad=True)
    opt, ref_opt = make([x]), make([ref])
    for _ in range(3):
        SEEN.clear()
        (x.tanh() * x).sum().backward()
        opt.step()
        opt.zero_grad()
        (ref.tanh() * ref).sum().backward()
        ref_opt.step()
        ref_opt.zero_grad()
        assert SEEN[-1] in ("sgd_update", "adam_update", "optimizer_update")
    assert is_mirrored(x)
    check_equal(x._data.a, x._data.b, "the parameter")
    np.testing.assert_allclose(x.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_optimizer_zero_grad_in_place_on_mirrored_gradients():
    x, _ = mirrored(3, requires_grad=True)
    (x * 2.0).sum().backward()
    g = x.grad
    assert is_mirrored(g)
    opt = flow.optim.SGD([x], lr=0.1)
    opt.zero_grad(set_to_none=False)
    assert x.grad is g and not g._data.a.any() and not g._data.b.any()


# -- the graph tracer's symbolic arrays are an array kind ------------------------------------
def test_symbolic_array_is_a_registered_kind():
    from flow.graph.symbolic import SymbolicArray

    assert SymbolicArray in K.registered_array_kinds()


def test_an_op_below_the_interceptors_reaches_the_tracer():
    class G(nn.Graph):
        def build(self, x):
            y = run_op("mul", (x, x), {})  # skips the interceptors: goes to the symbolic kind's handler
            return y + 1

    g = G()
    out = g(flow.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(out.numpy(), [2.0, 5.0, 10.0])
    assert [n.name for n in g.ir.nodes if n.name in ("mul", "add")] == ["mul", "add"]


def test_a_leaked_symbolic_tensor_raises_a_trace_error():
    from flow.graph.symbolic import GraphTraceError

    leaked = []

    class G(nn.Graph):
        def build(self, x):
            y = x * 2
            leaked.append(y)
            return y

    G()(flow.ones(2))
    with pytest.raises(GraphTraceError, match="outside the trace"):
        leaked[0] + 1


def test_backward_ops_in_a_trace_are_marked_through_record():
    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.add_optimizer(flow.optim.SGD(self.lin.parameters(), lr=0.1))

        def build(self, x):
            loss = self.lin(x).sum()
            loss.backward()
            return loss

    g = G()
    g(flow.randn(4, 3))
    bwd = [n for n in g.ir.nodes if n.tags.get("phase") == "backward"]
    assert bwd and all("bwd_of" in n.tags for n in bwd)


def test_graph_mode_rejects_tensors_of_an_array_kind_clearly():
    from flow.graph.symbolic import GraphTraceError

    lin = nn.Linear(3, 2)
    mirror(lin.weight)

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def build(self, x):
            return self.lin(x)

    with pytest.raises(GraphTraceError, match="state tensor 'lin.weight' is a tensor of array kind MirroredArray"):
        G()(flow.ones(1, 3))
    assert is_mirrored(lin.weight) and lin.weight.grad_fn is None  # left as it was
    lin.weight.data = flow.ones(2, 3)
    x, _ = mirrored(1, 3)
    with pytest.raises(GraphTraceError, match="input 0 is a tensor of array kind"):
        G()(x)

    class H(nn.Graph):
        def build(self, y):
            return y + x  # x: captured, would be a constant

    with pytest.raises(GraphTraceError, match="captured by build .a constant of the graph. is a tensor of array kind"):
        H()(flow.ones(1, 3))
