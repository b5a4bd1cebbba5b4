"""The ``fusion`` graph pass: fused results equal unfused ones, node counts drop, fallbacks work.

Each expression is compiled twice (fusion on and off) and compared with eager mode; with the
pass's thresholds lowered (``fusion.min_elements``) small tensors fuse too.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.backends.cpu import codegen
from flow.graph.config import GraphConfig

needs_cc = pytest.mark.skipif(codegen.find_compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flow-cache"))


def _config(fusion=True, **opts):
    c = GraphConfig()
    c.enable_fusion(fusion)
    c.set_option("fusion.min_elements", 0)
    for k, v in opts.items():
        c.set_option(f"fusion.{k}", v)
    return c


def _compare(fn, *args, rtol=2e-5, atol=1e-6, expect_fused=True, **opts):
    on = flow.compile(fn, config=_config(True, **opts))
    off = flow.compile(fn, config=_config(False))
    got, ref, eager = on(*args), off(*args), fn(*args)
    got, ref, eager = (x if isinstance(x, tuple) else (x,) for x in (got, ref, eager))
    for g, r, e in zip(got, ref, eager):
        assert g.dtype == r.dtype and tuple(g.shape) == tuple(r.shape)
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=rtol, atol=atol)
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=rtol, atol=atol)
    if expect_fused:
        assert on.ir.op_counts().get("fused_elementwise", 0) >= 1, on.ir
    assert "fused_elementwise" not in off.ir.op_counts()
    return on


EXPRESSIONS = {
    "affine": lambda x, y: x * y + 1.5,
    "scalars": lambda x, y: 2 * x - 3 + y / 4,
    "div": lambda x, y: (x - y) / (y.abs() + 1),
    "exp_log": lambda x, y: (x.exp() + 1).log() - y,
    "tanh_sigmoid": lambda x, y: x.tanh() * y.sigmoid(),
    "relu_chain": lambda x, y: F.relu(x * y) - F.relu(-x),
    "gelu": lambda x, y: F.gelu(x) + y,
    "gelu_tanh": lambda x, y: F.gelu(x, approximate="tanh") * y,
    "silu": lambda x, y: F.silu(x) - y,
    "where": lambda x, y: flow.where(x > 0, x, y * 0.1) + 1,
    "max_min": lambda x, y: flow.maximum(x, y) - flow.minimum(x, y * 2),
    "pow2": lambda x, y: x**2 + y**2,
    "pow_half": lambda x, y: (x.abs() + 1) ** 0.5 - y,
    "pow3": lambda x, y: x**3 - y,
    "pow_tensor": lambda x, y: (x.abs() + 0.5) ** y.tanh(),
    "mask_cast": lambda x, y: (x > 0).float() * y,
    "clamp": lambda x, y: (x * 3).clamp(-1, 1) + y,
    "softplus": lambda x, y: F.softplus(x * 2) - y,
    "sqrt_rsqrt": lambda x, y: (x * x + 1).sqrt() * (y * y + 1).rsqrt(),
    "neg_square": lambda x, y: -(x * y).square(),
    "logical": lambda x, y: ((x > 0) & (y < 0)).float() + ((x < 0) | (y > 0.5)).float() * x,
    "sum_last": lambda x, y: (x * y + 1).sum(-1),
    "mean_keep": lambda x, y: (x - y).tanh().mean(-1, keepdim=True),
    "full_mean": lambda x, y: ((x - y) ** 2).mean(),
    "two_outputs": lambda x, y: ((x * y).exp(), (x * y).sigmoid() * 2),
}


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(EXPRESSIONS))
def test_fused_expression_equals_unfused(name, dtype):
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((6, 40)).astype(dtype))
    y = flow.tensor(rng.standard_normal((6, 40)).astype(dtype))
    tol = 2e-5 if dtype == np.float32 else 1e-10
    _compare(EXPRESSIONS[name], x, y, rtol=tol, atol=tol)


@needs_cc
@pytest.mark.parametrize("yshape", [(40,), (6, 1), (1, 40), (1,), (), (3, 6, 40)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_broadcasting(yshape, dtype):
    rng = np.random.default_rng(1)
    x = flow.tensor(rng.standard_normal((6, 40)).astype(dtype))
    y = flow.tensor(rng.standard_normal(yshape).astype(dtype))
    _compare(lambda x, y: F.relu(x * y - 0.5) + y.exp() * x, x, y, rtol=1e-5 if dtype == np.float32 else 1e-10)


@needs_cc
def test_mixed_dtypes_and_casts():
    rng = np.random.default_rng(2)
    x = flow.tensor(rng.standard_normal((8, 16)).astype(np.float32))
    y = flow.tensor(rng.standard_normal((8, 16)))  # float64
    on = _compare(lambda x, y: (x * 2).double() * y + (y > 0).to(flow.float32).double(), x, y, rtol=1e-6)
    assert on.ir.outputs[0].dtype is flow.float64


@needs_cc
def test_expand_in_front_is_absorbed():
    rng = np.random.default_rng(3)
    x = flow.tensor(rng.standard_normal((4, 8, 5)).astype(np.float32))
    b = flow.tensor(rng.standard_normal((8, 1)).astype(np.float32))
    on = _compare(lambda x, b: (x * b.expand(4, 8, 5)).tanh() + 1, x, b)
    fused = [n for n in on.ir.nodes if n.name == "fused_elementwise"][0]
    assert [v.shape for v in fused.input_values()] == [(4, 8, 5), (8, 1)]


@needs_cc
def test_node_count_drops_and_the_pass_log_shows_it():
    rng = np.random.default_rng(4)
    x = flow.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    fn = lambda x: ((x * 2 + 1).tanh() * x - 0.5).sigmoid()  # noqa: E731
    on = _compare(fn, x)
    log = {r.name: r for r in on.pass_log}
    assert log["dce"].nodes == 6 and log["fusion"].nodes == 1
    assert on.ir.op_counts() == {"fused_elementwise": 1}
    assert on.ir.meta["pass_notes"]["fusion"].startswith("1 groups: 6 nodes -> 1 fused nodes")


@needs_cc
def test_switching_fusion_off_by_name_and_by_flag():
    x = flow.tensor(np.random.default_rng(5).standard_normal((64, 64)).astype(np.float32))
    fn = lambda x: (x * 2 + 1).tanh()  # noqa: E731
    for how in ("flag", "name"):
        c = _config()
        if how == "flag":
            c.enable_fusion(False)
        else:
            c.disable_pass("fusion")
        g = flow.compile(fn, config=c)
        g(x)
        assert "fused_elementwise" not in g.ir.op_counts()
        assert not [r for r in g.pass_log if r.name == "fusion" and r.ran]


@needs_cc
def test_small_groups_and_single_ops_stay_unfused_by_default():
    x = flow.tensor(np.ones((4, 4), np.float32))
    g = flow.compile(lambda x: (x * 2 + 1).tanh())
    g(x)
    assert "fused_elementwise" not in g.ir.op_counts()  # 16 elements < fusion.min_elements
    g = flow.compile(lambda x: x.tanh(), config=_config())
    g(x)
    assert "fused_elementwise" not in g.ir.op_counts()  # one op: nothing to fuse


@needs_cc
def test_groups_stay_convex():
    """``a`` and ``c`` are elementwise, but ``c`` needs a matmul of ``a``: they cannot be one node."""
    rng = np.random.default_rng(6)
    x = flow.tensor(rng.standard_normal((16, 16)).astype(np.float32))
    w = flow.tensor(rng.standard_normal((16, 16)).astype(np.float32))

    def fn(x, w):
        a = (x * 2).exp()
        b = a @ w
        return (a + b).tanh() * a

    on = _compare(fn, x, w, rtol=1e-5, atol=1e-4)
    order = [n.name for n in on.ir.nodes]
    assert order.index("matmul") > 0 and order.count("fused_elementwise") == 2


def test_no_compiler_keeps_the_graph_unfused(monkeypatch, capsys):
    monkeypatch.setattr(codegen, "find_compiler", lambda: None)
    monkeypatch.setattr(codegen, "_KERNELS", {})
    rng = np.random.default_rng(7)
    x = flow.tensor(rng.standard_normal((32, 32)).astype(np.float32))
    fn = lambda x: (x * 3 - 1).tanh() * x  # noqa: E731
    g = flow.compile(fn, config=_config())
    g.debug(1)
    out = g(x)
    np.testing.assert_allclose(out.numpy(), fn(x).numpy(), rtol=1e-6)
    assert "fused_elementwise" not in g.ir.op_counts()
    assert "no C compiler" in g.ir.meta["pass_notes"]["fusion"]
    assert "no C compiler" in capsys.readouterr().err


@needs_cc
def test_a_failing_compiler_keeps_the_graph_unfused(monkeypatch, tmp_path):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FLOW_CC", "false")  # exits 1: compilation fails
    monkeypatch.setattr(codegen, "_KERNELS", {})
    x = flow.tensor(np.random.default_rng(8).standard_normal((32, 32)).astype(np.float32))
    fn = lambda x: (x * 5 + 2).sigmoid() - x  # noqa: E731
    g = flow.compile(fn, config=_config())
    np.testing.assert_allclose(g(x).numpy(), fn(x).numpy(), rtol=1e-6)
    assert "fused_elementwise" not in g.ir.op_counts()
    assert "compiling fused kernels failed" in g.ir.meta["pass_notes"]["fusion"]


@needs_cc
def test_pass_order():
    from flow.registry import REGISTRY

    names = [e.name for e in REGISTRY.passes.ordered()]
    assert (
        names.index("cse")
        < names.index("dce")
        < names.index("activation_checkpointing")
        < names.index("fusion")
        < names.index("memory_planning")
    )
    assert names.index("simplify") < names.index("fusion")


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).flatten(1))


@needs_cc
@pytest.mark.parametrize("model", ["cnn", "mlp"])
def test_training_with_fused_forward_and_backward_matches_unfused(model):
    """Fusion runs on forward + backward together: ReLU masks, bias adds (batch norm is one native op)."""

    def setup():
        flow.manual_seed(0)
        m = (
            _CNN()
            if model == "cnn"
            else nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))
        )
        return m, flow.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

    def graph(fuse):
        m, opt = setup()

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
        g.config.enable_fusion(fuse)
        g.config.set_option("fusion.min_elements", 0)
        return g, m

    rng = np.random.default_rng(9)
    shape = (4, 3, 8, 8) if model == "cnn" else (16, 20)
    batches = [
        (flow.tensor(rng.standard_normal(shape).astype(np.float32)), flow.tensor(rng.integers(0, 10, shape[0])))
        for _ in range(3)
    ]
    (g1, m1), (g2, m2) = graph(True), graph(False)
    l1 = [g1(*b).item() for b in batches]
    l2 = [g2(*b).item() for b in batches]
    np.testing.assert_allclose(l1, l2, rtol=1e-5)
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)
    counts = g1.ir.op_counts()
    assert counts.get("fused_elementwise", 0) >= (3 if model == "cnn" else 1), counts
    assert len(g1.ir.nodes) < len(g2.ir.nodes)
    if model == "cnn":
        assert any(n.tags.get("phase") == "backward" for n in g1.ir.nodes if n.name == "fused_elementwise")
