"""The graph runtime: plan cache and re-specialisation, error locations, autotuning, the dataflow
scheduler, prefetching, debug output and DOT/JSON export, tracing errors."""

from __future__ import annotations

import json
import time
import types

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.graph import GraphExecutionError, GraphTraceError
from flow.graph.dataflow import Actor, Channel, DataflowScheduler, Prefetcher, connect
from flow.ops.meta import same
from flow.plugins import hookimpl
from flow.registry import Attr, schema


def _mlp():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


class Infer(nn.Graph):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def build(self, x):
        return self.m(x)


# -- plan cache -------------------------------------------------------------------------------------


def test_new_input_shape_retraces_and_switching_back_reuses_the_plan():
    m = _mlp()
    g = Infer(m)
    x4, x7 = flow.randn(4, 6), flow.randn(7, 6)
    y4 = g(x4)
    assert g.compiles == 1
    y7 = g(x7)
    assert g.compiles == 2 and tuple(y7.shape) == (7, 3)
    first = g._latest
    g(x4)
    assert g.compiles == 2 and g.cache_size == 2
    assert g._latest is not first
    np.testing.assert_allclose(y4.numpy(), m(x4).detach().numpy(), rtol=1e-6)
    g(x4.double().float())  # same shape and dtype: no new trace
    assert g.compiles == 2
    g(flow.randn(4, 6, dtype=flow.float64).float())
    assert g.compiles == 2


def test_dtype_change_and_train_eval_switch_respecialise():
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    g = Infer(m)
    x = flow.randn(5, 4)
    g(x)
    m.eval()
    y = g(x)
    assert g.compiles == 2
    np.testing.assert_allclose(y.numpy(), m(x).detach().numpy(), rtol=1e-6)
    m.double()
    g(x.double())
    assert g.compiles == 3


# -- errors -----------------------------------------------------------------------------------------


class EmbedGraph(nn.Graph):
    def __init__(self, emb):
        super().__init__()
        self.emb = emb

    def build(self, idx):
        h = self.emb(idx)
        return h.sum(1)  # ERROR-LINE-MARKER (the embedding above fails)


def test_errors_at_run_time_point_at_the_line_in_build():
    g = EmbedGraph(nn.Embedding(10, 4))
    g(flow.tensor([1, 2, 3]))
    with pytest.raises(GraphExecutionError) as ei:
        g(flow.tensor([1, 2, 30]))
    err = ei.value
    msg = str(err)
    assert "op 'embedding'" in msg
    assert err.loc is not None and err.loc.file == __file__
    src = open(__file__).read().splitlines()
    assert src[err.loc.line - 1].strip() == "h = self.emb(idx)"
    assert f"test_graph_runtime.py:{err.loc.line}" in msg
    assert isinstance(err.__cause__, IndexError)


def test_backward_op_errors_name_the_forward_line():
    from flow.graph.executor import _located_error

    m = _mlp()
    opt = flow.optim.SGD(m.parameters(), lr=0.1)

    class T(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x):
            loss = self.m(x).sum()
            loss.backward()
            return loss

    g = T()
    g(flow.randn(2, 6))
    bwd = next(s for s in g.plan.steps if s.node.tags.get("phase") == "backward" and s.node.name == "matmul")
    msg = str(_located_error(g.plan, bwd, ValueError("boom")))
    assert "backward pass of the op at test_graph_runtime.py" in msg and "boom" in msg


def test_asking_for_values_while_tracing_is_a_clear_error():
    class Bad(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = _mlp()

        def build(self, x):
            y = self.m(x)
            if y.sum().item() > 0:  # needs data
                return y
            return -y

    with pytest.raises(GraphTraceError, match=r"item\(\) at test_graph_runtime.py:\d+ .*made by op 'sum'"):
        Bad()(flow.randn(2, 6))


def test_a_failed_trace_restores_every_state_tensor():
    m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    arrays = [p._data for p in m.parameters()]

    @flow.compile
    def f(x):
        y = m(x)
        return y.detach().numpy()

    with pytest.raises(GraphTraceError):
        f(flow.randn(4, 3))
    assert all(p._data is a for p, a in zip(m.parameters(), arrays))
    assert all(p.grad is None for p in m.parameters())
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    assert not flow.interceptors.active()


def test_value_dependent_shapes_cannot_be_compiled():
    @flow.compile
    def f(x):
        return flow.nonzero(x)

    with pytest.raises(flow.errors.FlowError, match="nonzero.*depends on the input'?s? values"):
        f(flow.tensor([0.0, 1.0]))


# -- autotuning -------------------------------------------------------------------------------------


def _slow(x, factor=1.0):
    time.sleep(0.01)
    return x * x.dtype.type(factor)


def _fast(xp):
    return lambda x, factor=1.0: x * x.dtype.type(factor)


@pytest.fixture
def toy_op_plugin():
    def ops(registry):
        registry.register_op(schema("toy_scale", ["x"], [Attr("factor", float)]), meta=same, samples=None)

    def kernels(registry):
        registry.register_kernel("toy_scale", "cpu", _slow, name="slow")
        registry.register_kernel("toy_scale", "generic", _fast, name="fast")

    mod = types.ModuleType("toy_autotune")
    mod.flow_register_ops = hookimpl(ops)
    mod.flow_register_kernels = hookimpl(kernels)
    flow.plugins.register(mod, name="tests.graph_toy")
    yield
    flow.plugins.unregister("tests.graph_toy")


def test_autotune_times_alternative_kernels_and_keeps_the_fastest(toy_op_plugin):
    @flow.compile
    def f(x):
        return flow.ops.call("toy_scale", x, factor=2.0) + 1

    x = flow.randn(3, 3)
    for _ in range(5):
        y = f(x)
        np.testing.assert_allclose(y.numpy(), x.numpy() * 2 + 1, rtol=1e-6)
    (choice,) = f.autotuned.values()
    assert choice["op"] == "toy_scale" and choice["chosen"] == "fast"
    assert set(choice["times"]) == {"slow", "fast"} and choice["times"]["slow"] > choice["times"]["fast"]
    t0 = time.perf_counter()
    f(x)
    assert time.perf_counter() - t0 < 0.01  # the slow kernel is no longer called


def test_autotune_can_be_switched_off(toy_op_plugin):
    cfg = flow.graph.GraphConfig()
    cfg.enable_autotune(False)
    f = flow.compile(lambda x: flow.ops.call("toy_scale", x, factor=3.0), config=cfg)
    for _ in range(4):
        f(flow.ones(2))
    assert f.autotuned == {}


# -- the dataflow scheduler ----------------------------------------------------------------------------


def test_scheduler_fires_in_dependency_order_with_back_pressure():
    produced, consumed = [], []
    counter = iter(range(100))
    src = Actor("src", lambda: produced.append(next(counter)) or produced[-1], budget=5)
    dst = Actor("dst", lambda tok: consumed.append(tok))
    ch = connect(src, dst, capacity=2)
    order = DataflowScheduler([src, dst]).run()
    assert consumed == [0, 1, 2, 3, 4]
    assert len(order) == 10 and ch.capacity == 2
    # the producer never ran more than two tokens ahead of the consumer
    ahead, worst = 0, 0
    for a in order:
        ahead += 1 if a is src else -1
        worst = max(worst, ahead)
    assert worst <= 2


def test_channel_blocks_when_full():
    ch = Channel(1, "c")
    ch.put(1)
    with pytest.raises(flow.errors.FlowError, match="full"):
        ch.put(2, block=False)
    assert ch.get() == 1
    with pytest.raises(flow.errors.FlowError, match="empty"):
        ch.get(block=False)


def test_prefetcher_overlaps_loading_and_is_bounded():
    loaded = []

    def load(item):
        loaded.append(item)
        return item * 10

    pf = Prefetcher(load, depth=2)
    pf.start(iter(range(6)))
    time.sleep(0.05)
    assert len(loaded) <= 3  # two buffers filled, a third load waiting for space
    got = []
    while True:
        try:
            got.append(pf.get()[1])
        except StopIteration:
            break
    assert got == [0, 10, 20, 30, 40, 50]


def test_dataflow_executor_mode_gives_the_same_results():
    m = _mlp()
    x = flow.randn(4, 6)
    g1, g2 = Infer(m), Infer(m)
    g2.config.executor = "dataflow"
    np.testing.assert_array_equal(g1(x).numpy(), g2(x).numpy())


def test_graph_called_with_an_iterator_prefetches_the_next_batch():
    m = _mlp()
    g = Infer(m)
    xs = [flow.randn(4, 6) for _ in range(3)]
    it = iter(xs)
    outs = [g(it) for _ in range(3)]
    with pytest.raises(StopIteration):
        g(it)
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y.numpy(), m(x).detach().numpy(), rtol=1e-6)
    assert len(list(g.iterate(xs))) == 3
    x = flow.randn(4, 6)
    g.prefetch(x)
    np.testing.assert_allclose(g().numpy(), m(x).detach().numpy(), rtol=1e-6)


# -- debug output ----------------------------------------------------------------------------------------


def test_debug_prints_the_passes_with_op_counts(capsys):
    g = Infer(_mlp())
    g.debug(2)
    g(flow.randn(2, 6))
    err = capsys.readouterr().err
    for name in ("trace", "constant_folding", "simplify", "cse", "dce"):
        assert name in err
    assert "relu 1" in err and "nodes" in err
    text = repr(g)
    assert "BLOCK:m:Sequential" in text and "op counts:" in text and "relu" in text
    assert "= input input0" in text and "state m.0.weight (param)" in text


def test_dot_and_json_export(tmp_path):
    m = _mlp()
    opt = flow.optim.SGD(m.parameters(), lr=0.1)

    @flow.compile
    def step(x):
        opt.zero_grad()
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    step(flow.randn(3, 6))
    dot = step.to_dot(str(tmp_path / "g.dot"))
    assert dot.startswith('digraph "step"') and "matmul" in dot and "update" in dot
    assert (tmp_path / "g.dot").read_text() == dot
    doc = json.loads(step.to_json(str(tmp_path / "g.json")))
    assert json.loads((tmp_path / "g.json").read_text()) == doc
    ops = [n["op"] for n in doc["nodes"]]
    assert "sgd_update" in ops and "matmul" in ops
    upd = next(n for n in doc["nodes"] if n["op"] == "sgd_update")
    assert upd["tags"]["phase"] == "optimizer" and upd["inplace"]
    assert {s["name"] for s in doc["states"]} >= {"m.0.weight", "m.2.bias"}
    assert len(doc["updates"]) == 4 and doc["op_counts"]["sgd_update"] == 1
    fwd = next(n for n in doc["nodes"] if n["op"] == "pow")
    assert fwd["loc"]["file"] == __file__ and fwd["tags"]["phase"] == "forward"
    assert any(n["tags"]["phase"] == "backward" for n in doc["nodes"])


def test_scopes_name_the_graph_blocks():
    g = Infer(_mlp())
    g(flow.randn(2, 6))
    scopes = {n.scope for n in g.ir.nodes}
    assert {"m.0", "m.1", "m.2"} <= scopes


def test_compile_time_of_a_small_step_is_reported():
    g = Infer(_mlp())
    g(flow.randn(2, 6))
    assert 0 < g.compile_time < 5
    assert g.pass_log[0].name == "trace"


def test_f_relu_inside_compile_of_a_lambda():
    f = flow.compile(lambda x: F.relu(x) * 2)
    np.testing.assert_array_equal(f(flow.tensor([-1.0, 2.0])).numpy(), [0.0, 4.0])


def test_optimizer_update_ops_in_place_match_the_functional_form():
    shapes = [(3, 4), (5,), (2, 2)]

    def arrays(seed):
        r = np.random.default_rng(seed)
        return [flow.tensor(r.standard_normal(s).astype(np.float32)) for s in shapes]

    lr, step = flow.tensor(0.1, dtype=flow.float64), flow.tensor(3)
    want = flow.ops.call(
        "adam_update", arrays(1), arrays(2), arrays(3), [t.abs() for t in arrays(4)], [], lr, step, weight_decay=0.1
    )
    ps, ms, vs = arrays(1), arrays(3), [t.abs() for t in arrays(4)]
    got = flow.ops.call("adam_update", ps, arrays(2), ms, vs, [], lr, step, weight_decay=0.1, inplace=True)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    for p, g in zip(ps + ms + vs, got):  # separate arrays (no flat buffer): written back in place
        np.testing.assert_array_equal(p.numpy(), g.numpy())


def test_plans_resolve_kernels_per_device_type(meta_device):
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(meta_device)
    f = flow.compile(lambda x: m(x).softmax(-1))
    y = f(flow.randn(3, 4).to(meta_device))
    assert tuple(y.shape) == (3, 2) and y.device == meta_device
    assert all(s.device_type == "meta" for s in f.plan.steps)


def test_training_from_a_dataloader_iterator():
    from flow.utils.data import DataLoader, TensorDataset

    flow.manual_seed(0)
    xs, ys = flow.randn(24, 6), flow.randint(0, 3, (24,))
    loader = DataLoader(TensorDataset(xs, ys), batch_size=8)
    m = _mlp()
    opt = flow.optim.SGD(m.parameters(), lr=0.1)

    class T(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = F.cross_entropy(self.m(x), y)
            loss.backward()
            return loss

    g = T()
    losses = [loss.item() for loss in g.iterate(loader)]
    assert len(losses) == 3 and g.compiles == 1
    m2 = _mlp()
    o2 = flow.optim.SGD(m2.parameters(), lr=0.1)
    for x, y in loader:
        o2.zero_grad()
        loss = F.cross_entropy(m2(x), y)
        loss.backward()
        o2.step()
        np.testing.assert_allclose(loss.item(), losses.pop(0), rtol=1e-6)


def test_many_recompilations_warn_with_the_reason():
    f = flow.compile(lambda x: x * 2)
    with pytest.warns(UserWarning, match="compiled 8 times.*input shapes"):
        for n in range(1, 10):
            f(flow.ones(n))
