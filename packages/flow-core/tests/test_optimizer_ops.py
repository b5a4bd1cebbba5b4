"""Optimizer updates and dropout masks are registered ops, in eager and in graph mode.

``optimizer.step()`` calls ``sgd_update`` / ``adam_update`` / ``optimizer_update`` through the
dispatcher: an interceptor sees each call with the parameters, gradients and states, a kernel a
plugin registers for the op on its device is the one that runs, and a compiled step records the
same op (no step hook) with bit-identical results. Dropout's mask is the ``bernoulli_mask`` op in
both modes, drawing the same masks for the same seed.
"""

from __future__ import annotations

import types

import array_device_plugin
import numpy as np
import pytest

import flow
from flow import nn
from flow.plugins import hookimpl

NPDEV_PLUGIN = "tests.optimizer_ops.npdev"


class Recorder:
    """An interceptor that records the calls of some ops and lets them run. The host values (``lr``, the
    step count ...) are the optimizer's small feed tensors, written before each call: their values are
    read at the call (``values``), as an interceptor that keeps them must."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.calls: list = []
        self.values: list = []

    def __call__(self, op, inputs, attrs):
        if op.name in self.names:
            self.calls.append((op.name, inputs, dict(attrs)))
            self.values.append([x.numpy().copy() if isinstance(x, flow.Tensor) else None for x in inputs])
        return NotImplemented


def _params(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [nn.Parameter(flow.tensor(rng.standard_normal(s).astype(np.float32))) for s in shapes]


def _set_grads(ps, seed):
    rng = np.random.default_rng(seed)
    for p in ps:
        p.grad = flow.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32))


# -- eager: an interceptor sees the update op ----------------------------------------------------------


def test_an_interceptor_sees_sgd_step_as_one_sgd_update_per_bucket():
    ps = _params((3, 4), (4,), (2, 2))
    opt = flow.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
    rec = Recorder("sgd_update", "adam_update", "optimizer_update")
    for step in range(2):
        _set_grads(ps, step)
        with flow.interceptors.intercept(rec):
            opt.step()
    assert [c[0] for c in rec.calls] == ["sgd_update", "sgd_update"]
    for k, ((_, inputs, attrs), values) in enumerate(zip(rec.calls, rec.values)):
        params, grads, bufs, lr, first = inputs
        assert len(params) == 3 and all(a is b for a, b in zip(params, ps))  # the parameters themselves
        assert [tuple(b.shape) for b in bufs] == [(3, 4), (4,), (2, 2)]
        assert values[3] == pytest.approx(0.1) and lr.dtype is flow.float64 and lr.shape == ()
        assert bool(values[4]) is (k == 0)  # the momentum buffer is new on the first step only
        assert attrs == dict(
            momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.01, maximize=False, inplace=True
        )
    # the state the interceptor saw is the optimizer's own (views of its flat buffer)
    bufs = rec.calls[-1][1][2]
    for p, b in zip(ps, bufs):
        np.testing.assert_array_equal(b.numpy(), opt.state[p]["momentum_buffer"].numpy())


def test_an_interceptor_sees_adam_steps_and_the_other_optimizers_updates():
    ps = _params((5,), (2, 3))
    opt = flow.optim.AdamW(ps, lr=0.01, betas=(0.8, 0.9), amsgrad=True)
    rec = Recorder("adam_update")
    for step in range(3):
        _set_grads(ps, step)
        with flow.interceptors.intercept(rec):
            opt.step()
    assert [int(v[6]) for v in rec.values] == [1, 2, 3]  # the 1-based step count
    _, inputs, attrs = rec.calls[0]
    assert [len(x) for x in inputs[:5]] == [2, 2, 2, 2, 2]  # params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq
    assert attrs["decoupled"] is True and attrs["amsgrad"] is True and attrs["beta1"] == 0.8

    ps = _params((4,))
    opt = flow.optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True)
    rec = Recorder("optimizer_update")
    _set_grads(ps, 0)
    with flow.interceptors.intercept(rec):
        opt.step()
    ((name, inputs, attrs),) = rec.calls
    assert attrs["optimizer"] == "flow.optim.rmsprop:RMSprop"
    assert attrs["names"] == ("square_avg", "momentum_buffer", "grad_avg") and len(inputs[2]) == 3
    assert rec.values[0][5].tolist() == [False, False, False]  # no state held a value before this step


def test_an_interceptor_can_answer_the_update_op():
    """The update is a dispatcher call like any op: an interceptor may change it (here: half the lr)."""
    ps = _params((3,))
    ref = [p.detach().numpy().copy() for p in ps]
    opt = flow.optim.SGD(ps, lr=0.2)
    _set_grads(ps, 1)
    g = ps[0].grad.numpy().copy()

    def half_lr(op, inputs, attrs):
        if op.name != "sgd_update":
            return NotImplemented
        params, grads, bufs, lr, first = inputs
        return flow.interceptors.redispatch(op, (params, grads, bufs, lr * 0.5, first), attrs)

    with flow.interceptors.intercept(half_lr):
        opt.step()
    np.testing.assert_allclose(ps[0].detach().numpy(), ref[0] - np.float32(0.1) * g, rtol=1e-6)


def test_the_plugins_doc_example_rewrites_gradients_before_every_update():
    """docs/plugins.md: an interceptor averaging the gradients of 'world_size' replicas before each update."""
    world_size = 4

    def average_grads(op, inputs, attrs):
        if op.name not in flow.ops.optim.UPDATE_OPS:
            return NotImplemented
        params, grads, *rest = inputs
        grads = [g / world_size for g in grads]
        return flow.interceptors.redispatch(op, (params, grads, *rest), attrs)

    for make in (
        lambda ps: flow.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: flow.optim.Adam(ps, lr=0.1),
        lambda ps: flow.optim.Adagrad(ps, lr=0.1),
    ):
        a, b = _params((3, 2), (4,)), _params((3, 2), (4,))
        oa, ob = make(a), make(b)
        for step in range(2):
            _set_grads(a, step)
            _set_grads(b, step)
            for p in b:
                p.grad = p.grad / world_size
            with flow.interceptors.intercept(average_grads):
                oa.step()
            ob.step()
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.detach().numpy(), y.detach().numpy())


def test_without_an_interceptor_the_update_is_the_reference_formula():
    ps = _params((6,))
    p0 = ps[0].detach().numpy().astype(np.float64)
    view = ps[0].detach()  # an alias made before the step sees the update
    opt = flow.optim.SGD(ps, lr=0.1, momentum=0.9)
    bufs = np.zeros(6)
    for step in range(3):
        _set_grads(ps, step)
        g = ps[0].grad.numpy().astype(np.float64)
        bufs = g if step == 0 else 0.9 * bufs + g
        p0 = p0 - 0.1 * bufs
        opt.step()
    np.testing.assert_allclose(view.numpy(), p0, rtol=1e-5, atol=1e-6)


# -- a device plugin's kernel for the op ---------------------------------------------------------------

CALLS: list = []


def _plugin_sgd(
    params,
    grads,
    bufs,
    lr,
    first_step,
    *,
    momentum=0.0,
    dampening=0.0,
    nesterov=False,
    weight_decay=0.0,
    maximize=False,
    inplace=False,
):
    """A plugin's own (plain) SGD kernel: what a fused CUDA kernel would be on a GPU."""
    CALLS.append(len(params))
    assert inplace and momentum == 0.0 and not bufs
    for p, g in zip(params, grads):
        p -= np.asarray(lr, dtype=p.dtype) * g
    return tuple(params)


@pytest.fixture
def npdev_with_sgd_kernel():
    mod = types.ModuleType("plugin_sgd")
    mod.flow_register_kernels = hookimpl(lambda registry: registry.register_kernel("sgd_update", "npdev", _plugin_sgd))
    flow.plugins.register(array_device_plugin, name=NPDEV_PLUGIN)
    flow.plugins.register(mod, name="tests.optimizer_ops.sgd_kernel")
    CALLS.clear()
    try:
        yield flow.device(array_device_plugin.NAME)
    finally:
        flow.plugins.unregister("tests.optimizer_ops.sgd_kernel")
        flow.plugins.unregister(NPDEV_PLUGIN)


def test_a_kernel_registered_for_the_op_on_a_device_runs_the_step(npdev_with_sgd_kernel):
    dev = npdev_with_sgd_kernel
    host = _params((3, 2), (5,))
    ps = [nn.Parameter(p.detach().to(dev)) for p in host]
    opt = flow.optim.SGD(ps, lr=0.25)
    rng = np.random.default_rng(3)
    gs = [rng.standard_normal(tuple(p.shape)).astype(np.float32) for p in ps]
    for p, g in zip(ps, gs):
        p.grad = flow.tensor(g).to(dev)
    before = [p.detach().cpu().numpy().copy() for p in ps]
    opt.step()
    assert CALLS == [2]  # one call of the plugin's kernel for both parameters
    for p, b, g in zip(ps, before, gs):
        np.testing.assert_array_equal(p.detach().cpu().numpy(), b - np.float32(0.25) * g)
    assert ps[0].device.type == "npdev"


# -- graph mode: the same op, bit for bit ----------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: flow.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
        lambda ps: flow.optim.AdamW(ps, lr=0.01, amsgrad=True),
        lambda ps: flow.optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
        lambda ps: flow.optim.LAMB(ps, lr=0.01),
    ],
    ids=["sgd", "adamw", "rmsprop", "lamb"],
)
def test_graph_mode_records_the_update_op_and_agrees_bit_for_bit(make):
    def model(seed):
        flow.manual_seed(seed)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

    rng = np.random.default_rng(0)
    batches = [
        (
            flow.tensor(rng.standard_normal((5, 4)).astype(np.float32)),
            flow.tensor(rng.standard_normal((5, 2)).astype(np.float32)),
        )
        for _ in range(4)
    ]
    m1, m2 = model(1), model(1)
    o1, o2 = make(list(m1.parameters())), make(list(m2.parameters()))

    def eager(x, y):
        o1.zero_grad()
        loss = ((m1(x) - y) ** 2).mean()
        loss.backward()
        o1.step()
        return loss

    @flow.compile
    def compiled(x, y):
        o2.zero_grad()
        loss = ((m2(x) - y) ** 2).mean()
        loss.backward()
        o2.step()
        return loss

    for x, y in batches:
        assert eager(x, y).item() == compiled(x, y).item()
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())
    for a, b in zip(o1.state_dict()["state"].values(), o2.state_dict()["state"].values()):
        for k in a:
            assert np.array_equal(a[k].numpy(), b[k].numpy()), k
    ops = compiled.ir.op_counts()
    name = {"SGD": "sgd_update", "AdamW": "adam_update"}.get(type(o2).__name__, "optimizer_update")
    assert ops[name] == 1
    (node,) = [n for n in compiled.ir.nodes if n.name == name]
    assert node.tags["phase"] == "optimizer" and node.inplace and node.has_side_effects
    assert {v.kind for v in node.inputs[0]} == {"state"}  # the live parameters
    # nothing routes step() to the tracer any more
    import flow.optim.optimizer as optmod

    assert not hasattr(optmod, "_graph_step_hook")


def test_an_eager_step_between_graph_runs_continues_the_same_state():
    flow.manual_seed(0)
    m = nn.Linear(3, 2)
    opt = flow.optim.Adam(m.parameters(), lr=0.01)
    x = flow.randn(4, 3)

    @flow.compile
    def step(x):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()

    step(x)
    opt.zero_grad()
    m(x).sum().backward()
    opt.step()  # eager, in between
    step(x)
    assert all(int(st["step"].item()) == 3 for st in opt.state_dict()["state"].values())


def test_an_optimizer_the_graph_does_not_know_is_an_error():
    flow.manual_seed(0)
    m = nn.Linear(3, 2)
    holder = types.SimpleNamespace(opts={"deep": {"opt": flow.optim.SGD(m.parameters(), lr=0.1)}})
    x = flow.randn(2, 3)

    @flow.compile
    def step(x):
        opt = holder.opts["deep"]["opt"]  # too deep for flow.compile to find
        m(x).sum().backward()
        opt.step()

    with pytest.raises(flow.errors.FlowError, match="optimizer the graph does not know"):
        step(x)
    w = m.weight.detach().numpy().copy()
    assert holder.opts["deep"]["opt"].state_dict()["state"] == {}  # tracing changed nothing
    np.testing.assert_array_equal(m.weight.detach().numpy(), w)


# -- dropout's mask ---------------------------------------------------------------------------------


def test_dropout_mask_is_an_op_in_eager_mode():
    x = flow.ones(4, 6)
    rec = Recorder("bernoulli_mask")
    flow.manual_seed(7)
    with flow.interceptors.intercept(rec):
        y = flow.nn.functional.dropout(x, p=0.25)
        z = flow.nn.functional.dropout2d(flow.ones(2, 3, 4, 4), p=0.5)
    assert [c[2] for c in rec.calls] == [
        dict(shape=(4, 6), p=0.25, scale=1.0 / 0.75),
        dict(shape=(2, 3, 1, 1), p=0.5, scale=2.0),
    ]
    # the mask comes from flow's default generator, uniforms >= p
    flow.manual_seed(7)
    from flow._random import host_rng

    keep = host_rng(None).random((4, 6)) >= 0.25
    np.testing.assert_array_equal(y.numpy(), keep.astype(np.float32) * np.float32(1 / 0.75))
    assert set(np.unique(z.numpy())) <= {0.0, 2.0}


def test_dropout_mask_op_is_in_the_traced_ir_and_draws_eager_masks():
    drop = nn.Dropout(0.5)

    @flow.compile
    def f(x):
        return drop(x) * 2

    x = flow.ones(3, 5)
    flow.manual_seed(11)
    graph = [f(x).numpy() for _ in range(3)]
    assert f.ir.op_counts()["bernoulli_mask"] == 1
    flow.manual_seed(11)
    eager = [(drop(x) * 2).numpy() for _ in range(3)]
    for g, e in zip(graph, eager):
        np.testing.assert_array_equal(g, e)
    assert not np.array_equal(graph[0], graph[1])  # a new mask each run
    import flow.graph.tracer as tracer

    assert not hasattr(tracer, "_keep_mask") and not hasattr(tracer, "_route_hooks")


def test_alpha_dropout_draws_its_mask_with_the_same_op():
    @flow.compile
    def f(x):
        return flow.nn.functional.alpha_dropout(x, 0.3, training=True)

    x = flow.randn(4, 6)
    flow.manual_seed(5)
    graph = [f(x).numpy() for _ in range(2)]
    assert f.ir.op_counts()["bernoulli_mask"] == 1
    flow.manual_seed(5)
    rec = Recorder("bernoulli_mask")
    with flow.interceptors.intercept(rec):
        eager = [flow.nn.functional.alpha_dropout(x, 0.3, training=True).numpy() for _ in range(2)]
    assert [c[2]["scale"] for c in rec.calls] == [1.0, 1.0]
    for g, e in zip(graph, eager):
        np.testing.assert_array_equal(g, e)
    assert not np.array_equal(graph[0], graph[1])
