"""The ``amp`` graph pass: colours, casts at colour boundaries, and losses that track eager autocast."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.registry import REGISTRY
from flow_amp.colors import TABLE


def _mlp():
    return nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 5))


def _convnet():
    return nn.Sequential(
        nn.Conv2d(2, 6, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 8, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 5),
    )


class _Char(nn.Module):
    """A tiny language model: embedding, a residual MLP block with layer norm, tied-free head."""

    def __init__(self, vocab=17, d=24):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        h = self.emb(idx)
        h = h + self.fc2(F.gelu(self.fc1(self.ln(h))))
        return self.head(h).reshape(-1, 17)


def _data(kind, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "mlp":
        return flow.tensor(rng.standard_normal((16, 12), dtype=np.float32)), flow.tensor(rng.integers(0, 5, 16))
    if kind == "conv":
        return flow.tensor(rng.standard_normal((4, 2, 8, 8), dtype=np.float32)), flow.tensor(rng.integers(0, 5, 4))
    return flow.tensor(rng.integers(0, 17, (4, 6))), flow.tensor(rng.integers(0, 17, 24))


MODELS = {"mlp": _mlp, "conv": _convnet, "char": _Char}


class _Train(nn.Graph):
    def __init__(self, model, opt, dtype=None):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        if dtype is not None:
            self.config.enable_amp(True, dtype=dtype)

    def build(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


def _graph_losses(kind, dtype, steps=4):
    flow.manual_seed(0)
    m = MODELS[kind]()
    opt = flow.optim.AdamW(m.parameters(), lr=1e-2)
    g = _Train(m, opt, dtype)
    x, y = _data(kind)
    return [float(g(x, y).item()) for _ in range(steps)], g, m


def _eager_losses(kind, dtype, steps=4):
    flow.manual_seed(0)
    m = MODELS[kind]()
    opt = flow.optim.AdamW(m.parameters(), lr=1e-2)
    x, y = _data(kind)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        with flow.autocast("cpu", dtype=dtype):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        out.append(float(loss.item()))
    return out


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("dtype", [flow.bfloat16, flow.float16], ids=["bf16", "fp16"])
def test_graph_amp_losses_track_eager_autocast(kind, dtype):
    graph, g, m = _graph_losses(kind, dtype)
    eager = _eager_losses(kind, dtype)
    fp32, _, _ = _graph_losses(kind, None)
    # the same ops in the same dtypes: graph and eager agree to a few low-precision roundings,
    # while the fp32 run is visibly different (so the comparison could fail)
    tol = 2e-2 if dtype is flow.bfloat16 else 5e-3
    np.testing.assert_allclose(graph, eager, rtol=tol, atol=tol)
    assert all(np.isfinite(graph)) and graph[-1] < graph[0]
    assert max(abs(a - b) for a, b in zip(graph, fp32)) > 0
    # master weights stay float32
    assert all(p.dtype is flow.float32 for p in m.parameters())


def _ir(g):
    return g._latest.ir


def test_ir_colours_and_dtypes():
    _, g, _ = _graph_losses("mlp", flow.bfloat16, steps=1)
    ir = _ir(g)
    for n in ir.nodes:
        if n.name in ("linear", "matmul"):
            assert n.tags.get("amp") == "allow"
            assert all(o.dtype is flow.bfloat16 for o in n.outputs), n
            assert all(v.dtype is flow.bfloat16 for v in n.input_values() if v.dtype.is_floating_point)
        if n.name in ("cross_entropy", "cross_entropy_backward", "adam_update"):
            assert n.tags.get("amp") == "deny"
            floats = [v for v in n.input_values() if v.dtype.is_floating_point and v.dtype is not flow.float64]
            assert floats and all(v.dtype is flow.float32 for v in floats), n
        if n.name == "tanh":  # clear: runs in what arrives (a linear's bf16 output)
            assert n.outputs[0].dtype is flow.bfloat16
    # the loss is float32; every state keeps its dtype
    assert ir.outputs[0].dtype is flow.float32
    for s, new in ir.updates:
        assert new.dtype is s.dtype is flow.float32
    meta = ir.meta["amp"]
    assert meta["dtype"] == "bfloat16" and meta["casts"] == ir.op_counts()["cast"] > 0


def test_one_cast_per_value_and_dtype():
    """A weight read by the forward linear and the backward matmul is cast once (the weight cache)."""
    _, g, _ = _graph_losses("mlp", flow.bfloat16, steps=1)
    ir = _ir(g)
    seen = set()
    for n in ir.nodes:
        if n.name == "cast":
            (src,) = list(n.input_values())
            key = (src.id, n.attrs["dtype"])
            assert key not in seen, f"value %{src.id} cast to {n.attrs['dtype']} twice"
            seen.add(key)
            assert src.dtype.name != n.attrs["dtype"], "a cast to the value's own dtype"
    params = {v.id for v in ir.states if ir.state_specs[v.id].kind == "param"}
    weight_casts = [n for n in ir.nodes if n.name == "cast" and next(iter(n.input_values())).id in params]
    linears = [n for n in ir.nodes if n.name == "linear"]
    norms = [n for n in ir.nodes if n.name == "layer_norm"]  # infer: its weights follow the bf16 activation
    # weight and bias of each linear and layer norm, once each, though the backward reads them again
    assert len(weight_casts) == 2 * (len(linears) + len(norms))


def test_cast_pairs_cancel():
    """A bf16 input the model widens itself (``x.float()``) feeds an allow op as the original bf16 value."""
    flow.manual_seed(0)
    lin = nn.Linear(8, 4)

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.lin = lin
            self.config.enable_amp(True, dtype=flow.bfloat16)

        def build(self, x):
            return self.lin(x.float())

    g = G()
    x = flow.randn(3, 8).bfloat16()
    y = g(x)
    assert y.dtype is flow.bfloat16
    ir = _ir(g)
    (node,) = [n for n in ir.nodes if n.name == "linear"]
    assert node.inputs[0] is ir.inputs[0]  # no bf16 -> f32 -> bf16 round trip
    with flow.autocast("cpu", dtype=flow.bfloat16):
        ref = lin(x.float())
    np.testing.assert_array_equal(y.float().numpy(), ref.detach().float().numpy())


def test_float64_and_integers_untouched():
    flow.manual_seed(0)
    lin = nn.Linear(6, 3).double()

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.lin = lin
            self.config.enable_amp(True)

        def build(self, x, i):
            return self.lin(x), i * 2

    g = G()
    y, j = g(flow.randn(2, 6, dtype=flow.float64), flow.arange(4))
    assert y.dtype is flow.float64 and j.dtype is flow.int64
    assert "cast" not in _ir(g).op_counts()


def test_buffers_keep_their_dtype():
    """A running statistic computed from low-precision activations is cast back before its update."""
    flow.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    opt = flow.optim.SGD(m.parameters(), lr=0.1)
    g = _Train(m, opt, flow.bfloat16)
    x, y = flow.randn(10, 6), flow.randint(0, 3, (10,))
    for _ in range(2):
        loss = g(x, y)
    assert np.isfinite(loss.item())
    bn = m[1]
    assert bn.running_mean.dtype is flow.float32 and bn.running_var.dtype is flow.float32
    assert float(bn.running_var.numpy().min()) > 0
    for s, new in _ir(g).updates:
        assert new.dtype is s.dtype


def test_print_shows_colours_and_casts():
    _, g, _ = _graph_losses("mlp", flow.bfloat16, steps=1)
    text = repr(g)
    n_casts = _ir(g).meta["amp"]["casts"]
    assert f"{n_casts} casts inserted" in text
    assert "amp: bfloat16:" in text
    assert "{amp='allow'}" in text and "{amp='deny'}" in text and "{amp='cast'}" in text
    assert "amp={'dtype': flow.bfloat16}" in text


@pytest.fixture
def rule_plugin():
    """Register amp_color rules as a temporary plugin and remove them (and what they replaced) after."""
    prev = REGISTRY.current_plugin
    name = "test_graph_amp_rules"

    def register(op, colour):
        REGISTRY.current_plugin = name
        try:
            REGISTRY.register_rule(TABLE, op, colour, override=True)
        finally:
            REGISTRY.current_plugin = prev

    yield register
    REGISTRY.remove_plugin(name)


def test_table_rules_drive_the_pass(rule_plugin):
    """An op coloured through the table (as an op package does) is honoured by the pass."""
    rule_plugin("tanh", "deny")
    _, g, _ = _graph_losses("mlp", flow.bfloat16, steps=1)
    (node,) = [n for n in _ir(g).nodes if n.name == "tanh"]
    assert node.tags["amp"] == "deny" and node.outputs[0].dtype is flow.float32
    # a device-specific rule: deny on cuda only leaves cpu's tanh clear
    rule_plugin("tanh", {"cuda": "deny"})
    _, g, _ = _graph_losses("mlp", flow.bfloat16, steps=1)
    (node,) = [n for n in _ir(g).nodes if n.name == "tanh"]
    assert "amp" not in node.tags and node.outputs[0].dtype is flow.bfloat16


def test_bad_rule_is_reported(rule_plugin):
    rule_plugin("tanh", "sometimes")
    with pytest.raises(flow.errors.FlowError, match="unknown colour 'sometimes'"):
        _graph_losses("mlp", flow.bfloat16, steps=1)


@pytest.mark.parametrize("bad", [flow.int32, flow.float64, "float8"])
def test_enable_amp_rejects_bad_dtypes(bad):
    g = _Train(_mlp(), flow.optim.SGD(_mlp().parameters(), lr=0.1))
    with pytest.raises(TypeError, match="enable_amp: dtype must be flow.bfloat16 or flow.float16"):
        g.config.enable_amp(True, dtype=bad)


def test_disable_amp_recompiles_in_float32():
    losses, g, _ = _graph_losses("mlp", flow.bfloat16, steps=1)
    g.config.enable_amp(False)
    x, y = _data("mlp")
    g(x, y)
    assert "cast" not in _ir(g).op_counts()
    assert all(n.outputs[0].dtype is not flow.bfloat16 for n in _ir(g).nodes if n.outputs)
