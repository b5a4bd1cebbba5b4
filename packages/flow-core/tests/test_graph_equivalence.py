"""Graph mode trains exactly like eager mode: N steps give the same losses, parameters and states.

Four models: an MLP (784-1024-1024-10, SGD with momentum), a small CNN (conv-bn-relu-pool-linear,
SGD), a small GPT-style decoder (2 blocks, d_model 64, AdamW; dropout 0, and dropout 0.1 through
the graph's RNG op) and a DLRM-style model (EmbeddingBag tables + MLP, Adam). float32, rtol 1e-5
(in practice the results are bitwise equal: the graph calls the same kernels in the same order).
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F

N_STEPS = 5


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(self.pool(F.relu(self.bn(self.conv(x)))).flatten(1))


class DecoderBlock(nn.Module):
    def __init__(self, d, nh, p):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.nh = nh
        self.drop = nn.Dropout(p)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.reshape(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, vocab=100, d=64, nh=4, layers=2, T=16, p=0.0):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList([DecoderBlock(d, nh, p) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.drop = nn.Dropout(p)

    def forward(self, idx):
        x = self.drop(self.tok(idx) + self.pos(flow.arange(idx.shape[1])))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class DLRM(nn.Module):
    TABLES = (50, 40, 30)

    def __init__(self, d=16, dense=13):
        super().__init__()
        self.embs = nn.ModuleList([nn.EmbeddingBag(n, d, mode="sum") for n in self.TABLES])
        self.bot = nn.Sequential(nn.Linear(dense, 32), nn.ReLU(), nn.Linear(32, d), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(d * (len(self.TABLES) + 1), 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense, idx, off):
        z = [self.bot(dense)] + [e(i, o) for e, i, o in zip(self.embs, idx, off)]
        return self.top(flow.cat(z, dim=1)).squeeze(1)


def _batch(kind, rng):
    if kind == "mlp":
        return (flow.tensor(rng.standard_normal((32, 784)).astype(np.float32)), flow.tensor(rng.integers(0, 10, 32)))
    if kind == "cnn":
        return (flow.tensor(rng.standard_normal((4, 3, 8, 8)).astype(np.float32)), flow.tensor(rng.integers(0, 10, 4)))
    if kind == "gpt":
        return (flow.tensor(rng.integers(0, 100, (4, 16))), flow.tensor(rng.integers(0, 100, (4, 16))))
    B = 8
    dense = flow.tensor(rng.standard_normal((B, 13)).astype(np.float32))
    idx = [flow.tensor(rng.integers(0, n, 2 * B)) for n in DLRM.TABLES]
    off = [flow.tensor(np.arange(0, 2 * B, 2)) for _ in DLRM.TABLES]
    return (dense, idx, off, flow.tensor(rng.integers(0, 2, B).astype(np.float32)))


def _setup(kind, p=0.0):
    flow.manual_seed(0)
    if kind == "mlp":
        m = MLP()
        return m, flow.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    if kind == "cnn":
        m = CNN()
        return m, flow.optim.SGD(m.parameters(), lr=0.05)
    if kind == "gpt":
        m = GPT(p=p)
        return m, flow.optim.AdamW(m.parameters(), lr=1e-3)
    m = DLRM()
    return m, flow.optim.Adam(m.parameters(), lr=1e-3)


def _loss(kind, m, batch):
    if kind in ("mlp", "cnn"):
        return F.cross_entropy(m(batch[0]), batch[1])
    if kind == "gpt":
        return F.cross_entropy(m(batch[0]).reshape(-1, 100), batch[1].reshape(-1))
    dense, idx, off, y = batch
    return F.binary_cross_entropy_with_logits(m(dense, idx, off), y)


class TrainGraph(nn.Graph):
    def __init__(self, kind, model, opt):
        super().__init__()
        self.kind = kind
        self.model = model
        self.add_optimizer(opt)

    def build(self, *batch):
        loss = _loss(self.kind, self.model, batch)
        loss.backward()
        return loss


def _eager(kind, batches, p=0.0):
    m, opt = _setup(kind, p)
    flow.manual_seed(123)
    losses = []
    for b in batches:
        opt.zero_grad()
        loss = _loss(kind, m, b)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return m, opt, losses


def _assert_same_state(m1, m2, o1, o2):
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-7, err_msg=k)
    s1, s2 = o1.state_dict()["state"], o2.state_dict()["state"]
    assert s1.keys() == s2.keys()
    for i in s1:
        for name in s1[i]:
            np.testing.assert_allclose(
                s2[i][name].numpy(), s1[i][name].numpy(), rtol=1e-5, atol=1e-7, err_msg=f"optimizer state {i}.{name}"
            )


@pytest.mark.parametrize("kind", ["mlp", "cnn", "gpt", "dlrm"])
def test_graph_training_matches_eager(kind):
    rng = np.random.default_rng(1)
    batches = [_batch(kind, rng) for _ in range(N_STEPS)]
    m1, o1, eager_losses = _eager(kind, batches)
    m2, o2 = _setup(kind)
    g = TrainGraph(kind, m2, o2)
    flow.manual_seed(123)
    graph_losses = [g(*b).item() for b in batches]
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    _assert_same_state(m1, m2, o1, o2)
    assert g.compiles == 1
    assert g.ir.op_counts().get("sgd_update", 0) + g.ir.op_counts().get("adam_update", 0) == 1  # one fused update


def test_flow_compile_training_step_matches_eager():
    kind = "gpt"
    rng = np.random.default_rng(2)
    batches = [_batch(kind, rng) for _ in range(N_STEPS)]
    m1, o1, eager_losses = _eager(kind, batches)
    m2, o2 = _setup(kind)

    @flow.compile
    def step(x, y):
        o2.zero_grad()
        loss = _loss(kind, m2, (x, y))
        loss.backward()
        o2.step()
        return loss

    flow.manual_seed(123)
    losses = [step(*b).item() for b in batches]
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    _assert_same_state(m1, m2, o1, o2)


def test_dropout_uses_the_graph_rng_op_and_matches_eager():
    rng = np.random.default_rng(3)
    batches = [_batch("gpt", rng) for _ in range(3)]
    m1, o1, eager_losses = _eager("gpt", batches, p=0.1)
    m2, o2 = _setup("gpt", p=0.1)
    g = TrainGraph("gpt", m2, o2)
    flow.manual_seed(123)
    losses = [g(*b).item() for b in batches]
    assert g.ir.op_counts()["bernoulli_mask"] == 5  # embedding dropout + 2 per block
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    _assert_same_state(m1, m2, o1, o2)


def test_gradient_accumulation_equals_the_full_batch_step():
    def setup():
        flow.manual_seed(0)
        m = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 5))
        return m, flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    rng = np.random.default_rng(4)
    batches = [
        (flow.tensor(rng.standard_normal((16, 20)).astype(np.float32)), flow.tensor(rng.integers(0, 5, 16)))
        for _ in range(3)
    ]
    m1, o1 = setup()
    eager_losses = []
    for x, y in batches:
        o1.zero_grad()
        loss = F.cross_entropy(m1(x), y)
        loss.backward()
        o1.step()
        eager_losses.append(loss.item())
    m2, o2 = setup()

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m2
            self.add_optimizer(o2)

        def build(self, x, y):
            out = self.m(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            return loss, out

    g = G()
    g.config.set_gradient_accumulation_steps(4)
    results = [g(*b) for b in batches]
    assert tuple(results[0][1].shape) == (16, 5)  # outputs of the micro-batches are concatenated
    np.testing.assert_allclose([r[0].item() for r in results], eager_losses, rtol=1e-5)
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(flow.errors.FlowError, match="divisible by 4"):
        g(flow.zeros(6, 20), flow.zeros(6, dtype=flow.int64))
