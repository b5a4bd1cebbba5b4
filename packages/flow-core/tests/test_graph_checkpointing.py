"""The ``activation_checkpointing`` graph pass: same results, recomputation in backward, lower peak."""

from __future__ import annotations

import numpy as np
import pytest
from test_graph_equivalence import TrainGraph, _assert_same_state, _batch, _eager, _setup

import flow
import flow.nn as nn
import flow.nn.functional as F


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flow-cache"))


class Net(nn.Module):
    def __init__(self, d=64, h=256, layers=4, p=0.0):
        super().__init__()
        self.blocks = nn.ModuleList(
            [
                nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Dropout(p), nn.Linear(h, d), nn.Tanh())
                for _ in range(layers)
            ]
        )
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _train(ckpt, p=0.0, steps=3, which="blocks", planning=True, fusion=True):
    flow.manual_seed(0)
    m = Net(p=p)
    opt = flow.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = F.cross_entropy(self.m(x), y)
            loss.backward()
            return loss

    g = G()
    g.config.enable_memory_planning(planning)
    g.config.enable_fusion(fusion)
    if ckpt and which == "blocks":
        g.m.blocks.activation_checkpointing = True
    elif ckpt:
        getattr(g.m.blocks, which).activation_checkpointing = True
    rng = np.random.default_rng(0)
    flow.manual_seed(7)
    losses = []
    for _ in range(steps):
        x = flow.tensor(rng.standard_normal((256, 64)).astype(np.float32))
        y = flow.tensor(rng.integers(0, 10, 256))
        losses.append(g(x, y).item())
    return losses, [q.detach().numpy().copy() for q in m.parameters()], g


def _same(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_checkpointing_gives_the_same_training_and_a_lower_peak():
    # without fusion the recomputation runs the very same kernels: bit-identical
    l0, p0, _ = _train(False, fusion=False)
    l1, p1, _ = _train(True, fusion=False)
    np.testing.assert_array_equal(l0, l1)
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)
    # with fusion, clones may fuse with backward nodes (float32 exp/tanh differ by an ulp or two)
    l0, p0, g0 = _train(False)
    l1, p1, g1 = _train(True)
    _same(l0, l1)
    for a, b in zip(p0, p1):
        _same(a, b)
    r0, r1 = g0.memory_report(), g1.memory_report()
    assert r1["peak_bytes"] < 0.75 * r0["peak_bytes"], (r0, r1)
    note = g1.ir.meta["pass_notes"]["activation_checkpointing"]
    assert note.startswith("4 segments of m.blocks")
    clones = [n for n in g1.ir.nodes if "recompute_of" in n.tags]
    assert clones and all(n.tags["phase"] == "backward" for n in clones)
    # each clone runs after the last forward node and before the backward of its own block
    order = {n.id: i for i, n in enumerate(g1.ir.nodes)}
    last_fwd = max(order[n.id] for n in g1.ir.nodes if n.tags.get("phase") == "forward")
    assert all(order[c.id] > last_fwd for c in clones)
    # a block's output is the next block's saved input: it is kept, not recomputed
    assert sorted({c.name for c in clones}) == ["gelu", "linear"]


def test_one_block_and_the_switch():
    l0, _, _ = _train(False, steps=2)
    l1, _, g1 = _train(True, steps=2, which="1")
    _same(l0, l1)
    scopes = {c.scope for c in g1.ir.nodes if "recompute_of" in c.tags}
    assert scopes and all(s.startswith("m.blocks.1") for s in scopes)
    g1.config.disable_pass("activation_checkpointing")
    g1(flow.zeros(256, 64), flow.zeros(256, dtype=flow.int64))
    assert not [c for c in g1.ir.nodes if "recompute_of" in c.tags]


def test_dropout_masks_are_kept_not_redrawn():
    l0, p0, _ = _train(False, p=0.2)
    l1, p1, g1 = _train(True, p=0.2)
    _same(l0, l1)
    for a, b in zip(p0, p1):
        _same(a, b)
    assert not [c for c in g1.ir.nodes if "recompute_of" in c.tags and c.name == "bernoulli_mask"]
    assert g1.ir.op_counts()["bernoulli_mask"] == 4


def test_gpt_blocks_checkpointed_match_eager():
    kind = "gpt"
    rng = np.random.default_rng(5)
    batches = [_batch(kind, rng) for _ in range(3)]
    m1, o1, eager_losses = _eager(kind, batches)
    m2, o2 = _setup(kind)
    g = TrainGraph(kind, m2, o2)
    g.model.blocks.activation_checkpointing = True
    flow.manual_seed(123)
    losses = [g(*b).item() for b in batches]
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    _assert_same_state(m1, m2, o1, o2)
    assert any("recompute_of" in n.tags for n in g.ir.nodes)


def test_all_passes_with_gradient_accumulation():
    """Fusion, checkpointing and memory planning on a step the runtime splits into micro-batches."""

    def run(passes):
        flow.manual_seed(0)
        m = Net(d=32, h=64, layers=2)
        opt = flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        class G(nn.Graph):
            def __init__(self):
                super().__init__()
                self.m = m
                self.add_optimizer(opt)

            def build(self, x, y):
                loss = F.cross_entropy(self.m(x), y)
                loss.backward()
                return loss

        g = G()
        g.config.set_gradient_accumulation_steps(4)
        g.config.enable_fusion(passes)
        g.config.enable_memory_planning(passes)
        g.config.set_option("fusion.min_elements", 0)
        if passes:
            g.m.blocks.activation_checkpointing = True
        rng = np.random.default_rng(3)
        losses = [
            g(
                flow.tensor(rng.standard_normal((64, 32)).astype(np.float32)), flow.tensor(rng.integers(0, 10, 64))
            ).item()
            for _ in range(3)
        ]
        return losses, [p.detach().numpy().copy() for p in m.parameters()], g

    l0, p0, _ = run(False)
    l1, p1, g1 = run(True)
    _same(l0, l1)
    for a, b in zip(p0, p1):
        _same(a, b)
    assert any("recompute_of" in n.tags for n in g1.ir.nodes)
    assert g1.ir.op_counts().get("fused_elementwise", 0) >= 1
