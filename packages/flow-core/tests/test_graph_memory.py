"""The ``memory_planning`` graph pass: liveness, the arena allocator, in-place reuse, peak bytes.

Planning must never change results: the equivalence models of ``test_graph_equivalence.py`` train
bit for bit the same with it on and off.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph_equivalence import TrainGraph, _batch, _setup

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.graph.config import GraphConfig
from flow.graph.passes.memory import ALIGN, allocate, ir_steps, liveness


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flow-cache"))


def _config(plan=True, fusion=False):
    c = GraphConfig()
    c.enable_memory_planning(plan)
    c.enable_fusion(fusion)
    return c


# -- liveness ----------------------------------------------------------------------------------------
def test_liveness_of_a_small_sequence():
    steps = [
        ([0], [1], {}),  # 1 = f(0)
        ([1], [2], {2: 1}),  # 2 = view of 1
        ([0], [3], {}),  # 3 = g(0)
        ([2, 3], [4], {}),  # 4 = h(2, 3): reads the view, so 1 lives until here
        ([4], [5], {}),
    ]
    base, defined, last = liveness(steps, roots=[5])
    assert base[2] == 1 and base[4] == 4
    assert defined == {1: 0, 3: 2, 4: 3, 5: 4}
    assert last[1] == 3 and last[3] == 3 and last[4] == 4 and last[5] == 5 and last[0] == 2


def test_views_extend_the_lifetime_of_their_base_in_a_traced_graph():
    def fn(x):
        a = x * 2
        v = a.reshape(-1)
        b = (a + 1).tanh()
        return (v * 3).sum(), b

    g = flow.compile(fn, config=_config())
    x = flow.tensor(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
    s, b = g(x)
    ir = g.ir
    base, _, last = liveness(ir_steps(ir), [v.id for v in ir.live_roots()])
    a = next(n for n in ir.nodes if n.name == "mul" and any(getattr(i, "value", None) == 2 for i in n.inputs))
    mul3 = next(n for n in ir.nodes if n.name == "mul" and n is not a)
    assert last[a.outputs[0].id] == ir.nodes.index(mul3)  # through the reshape view
    add = next(n for n in ir.nodes if n.name == "add")
    assert not add.tags.get("out_inplace")  # a's buffer is still read through the view
    np.testing.assert_allclose(s.numpy(), (x.numpy() * 6).sum(), rtol=1e-5)
    np.testing.assert_allclose(b.numpy(), np.tanh(x.numpy() * 2 + 1), rtol=1e-6)


# -- the allocator -----------------------------------------------------------------------------------
intervals = st.lists(
    st.tuples(st.integers(0, 30), st.integers(0, 12), st.integers(1, 5000)), min_size=0, max_size=40
).map(lambda xs: [(s, s + d, n) for s, d, n in xs])


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_the_arena_never_overlaps_two_live_values(ivs):
    offsets, total = allocate(ivs)
    up = [(n + ALIGN - 1) // ALIGN * ALIGN for _, _, n in ivs]
    for i, (s1, e1, _) in enumerate(ivs):
        assert offsets[i] % ALIGN == 0
        assert offsets[i] + up[i] <= total
        for j in range(i):
            s2, e2, _ = ivs[j]
            if s1 <= e2 and s2 <= e1:  # live at the same time
                assert offsets[i] + up[i] <= offsets[j] or offsets[j] + up[j] <= offsets[i], (i, j)
    if ivs:
        live_max = max(sum(u for (s, e, _), u in zip(ivs, up) if s <= t <= e) for t in range(0, 43))
        assert live_max <= total <= sum(up)


def test_the_allocator_reuses_memory_of_dead_values():
    offsets, total = allocate([(0, 1, 1000), (2, 3, 1000), (4, 5, 1000)])
    assert total == 1024 and offsets == [0, 0, 0]
    offsets, total = allocate([(0, 5, 100), (1, 2, 4000), (3, 4, 4000)])
    assert total == 4032 + 128  # sizes rounded up to 64 bytes


# -- planning on the models of the equivalence tests ------------------------------------------------
@pytest.mark.parametrize("kind", ["mlp", "cnn", "gpt", "dlrm"])
def test_results_are_the_same_with_planning_on_and_off(kind):
    rng = np.random.default_rng(1)
    batches = [_batch(kind, rng) for _ in range(3)]
    runs = []
    for plan in (True, False):
        m, o = _setup(kind)
        g = TrainGraph(kind, m, o)
        g.config.enable_memory_planning(plan)
        flow.manual_seed(123)
        losses = [g(*b).item() for b in batches]
        runs.append((losses, [p.detach().numpy().copy() for p in m.parameters()], g))
    (l1, p1, g1), (l2, p2, g2) = runs
    np.testing.assert_array_equal(l1, l2)
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(a, b)
    r1, r2 = g1.memory_report(), g2.memory_report()
    assert r1["planned"] and not r2["planned"]
    assert r1["peak_bytes"] <= r1["peak_bytes_unplanned"] * 1.02
    assert r2["peak_bytes"] == r2["peak_bytes_unplanned"]


def _mlp_graph(plan, B=1024, dims=(256, 512, 512, 10)):
    flow.manual_seed(0)
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    m = nn.Sequential(*layers[:-1])
    opt = flow.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x, y):
            out = self.m(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            return loss, out

    g = G()
    g.config.enable_memory_planning(plan)
    rng = np.random.default_rng(2)
    x = flow.tensor(rng.random((B, dims[0])).astype(np.float32))
    y = flow.tensor(rng.integers(0, dims[-1], B))
    return g, x, y


def test_peak_bytes_are_lower_with_planning_on_an_mlp(capsys):
    g, x, y = _mlp_graph(True)
    g.debug(1)
    g(x, y)
    rep = g.memory_report()
    assert rep["planned"] and rep["inplace_reuses"] >= 2 and rep["values_in_arena"] > 0
    assert rep["peak_bytes"] < 0.95 * rep["peak_bytes_unplanned"]
    assert rep["peak_bytes"] == rep["arena_bytes"] + rep["outside_peak_bytes"]
    err = capsys.readouterr().err
    assert "memory: peak" in err and "without planning" in err and "in place of a dead input" in err
    g2, x, y = _mlp_graph(False)
    g2(x, y)
    assert g2.memory_report()["peak_bytes"] == rep["peak_bytes_unplanned"]
    assert not g2.memory_report()["planned"]


def test_outputs_never_live_in_the_arena():
    g, x, y = _mlp_graph(True, B=64, dims=(32, 64, 10))
    loss1, out1 = g(x, y)
    arena = g.plan.memory.arena
    assert arena is not None and arena.size > 0
    assert not np.shares_memory(out1.numpy(), arena)
    keep = out1.numpy().copy()
    g(x * 2, y)  # a second step reuses the arena
    np.testing.assert_array_equal(out1.numpy(), keep)


def test_inplace_reuse_and_arena_with_the_dataflow_executor():
    def fn(x, w):
        a = (x @ w).exp()
        b = a * 2  # last reader of nothing: a is read again below
        c = (a + b).tanh()  # may write into a or b
        return (c * 3 - 1).sum()

    rng = np.random.default_rng(3)
    x = flow.tensor(rng.standard_normal((32, 16)).astype(np.float32) * 0.1)
    w = flow.tensor(rng.standard_normal((16, 16)).astype(np.float32) * 0.1)
    ref = flow.compile(fn, config=_config(False))(x, w)
    for executor in ("static", "dataflow"):
        c = _config(True)
        c.executor = executor
        g = flow.compile(fn, config=c)
        np.testing.assert_array_equal(g(x, w).numpy(), ref.numpy())
        np.testing.assert_array_equal(g(x, w).numpy(), ref.numpy())
        inplace = [n for n in g.ir.nodes if n.tags.get("out_inplace")]
        assert inplace and all(n.inplace for n in inplace)
        b = next(n for n in g.ir.nodes if n.name == "mul" and n.outputs[0].shape == (32, 16))
        assert not b.tags.get("out_inplace")  # a is still read by the add


def test_switching_planning_off_by_name():
    c = _config(True)
    c.disable_pass("memory_planning")
    g = flow.compile(lambda x: (x.exp() * 2).tanh(), config=c)
    g(flow.ones(64, 64))
    assert getattr(g.plan, "memory", None) is None and not g.memory_report()["planned"]
    assert not any(n.inplace for n in g.ir.nodes)


def test_inplace_into_a_strided_buffer():
    """A ufunc on a transposed input makes an F-ordered result; a fused node writing in place of it
    computes and copies (the native loop writes C order)."""

    def fn(x):
        a = flow.atan2(x.t(), x.t() + 1)  # a ufunc the fusion pass leaves alone
        return ((a * 2 + 1).tanh() - a) * 3

    x = flow.tensor(np.random.default_rng(4).standard_normal((64, 96)).astype(np.float32))
    ref = flow.compile(fn, config=_config(False))(x)
    c = _config(True, fusion=True)
    c.set_option("fusion.min_elements", 0)
    g = flow.compile(fn, config=c)
    np.testing.assert_allclose(g(x).numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    fused = [n for n in g.ir.nodes if n.name == "fused_elementwise"]
    assert fused and fused[0].tags.get("out_inplace")
