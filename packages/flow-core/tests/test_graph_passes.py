"""Graph passes, each alone on a traced IR, and the pipeline (ordering, plugins' passes, checks)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import flow
import flow.nn as nn
from flow.errors import FlowError
from flow.graph import GraphConfig
from flow.graph.executor import Executor
from flow.graph.lowering import lower
from flow.graph.passes import constant_folding, cse, dce, run_pipeline, simplify
from flow.graph.tracer import trace
from flow.plugins import hookimpl
from flow.registry import REGISTRY


def _ir(fn, *args):
    return trace(fn, args, {}, name="t")


def _execute(ir, *args):
    exe = Executor(lower(ir))
    outs, _ = exe.run(
        [a._data for a in args],
        [ir.state_specs[v.id].get() for v in ir.states],
        [ir.host_specs[v.id].feed() for v in ir.hosts],
    )
    return [np.asarray(o) for o in outs]


def _check(fn, pass_fn, *args):
    """Trace ``fn``, run ``pass_fn`` on the IR; the results must not change. Returns (before, after) IRs' op counts."""
    ir = _ir(fn, *args)
    ir.verify()
    before = ir.op_counts()
    want = _execute(ir, *args)
    ir = pass_fn(ir, GraphConfig())
    ir.verify()
    got = _execute(ir, *args)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    eager = fn(*args)
    eager = eager if isinstance(eager, tuple) else (eager,)
    for e, g in zip(eager, got):
        np.testing.assert_allclose(g, e.detach().numpy(), rtol=1e-6)
    return before, ir


# -- dead-code elimination ---------------------------------------------------------------------------


def test_dce_removes_unused_nodes_and_inputs():
    def f(x, w):
        _unused = (x * 3).exp()
        return x + 1

    before, ir = _check(f, dce, flow.randn(3), flow.randn(3))
    assert before["mul"] == 1 and before["exp"] == 1
    assert ir.op_counts() == {"add": 1}


def test_dce_keeps_random_draws_and_state_updates():
    bn = nn.BatchNorm1d(3)
    drop = nn.Dropout(0.5)

    def f(x):
        bn(x)  # result unused, but the running statistics are updated
        drop(x)  # result unused, but the draw advances the generator (as in eager mode)
        return x * 2

    ir = trace(f, (flow.randn(4, 3),), {}, modules={"bn": bn})
    n_before = len(ir.nodes)
    ir = dce(ir)
    counts = ir.op_counts()
    assert counts["bernoulli_mask"] == 1
    assert {s.name for s, _ in ir.updates} == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}
    assert len(ir.nodes) < n_before


# -- common-subexpression elimination ----------------------------------------------------------------------


def test_cse_merges_identical_computations():
    def f(x, y):
        a = (x * y).sum(0)
        b = (x * y).sum(0)
        c = (x * y).sum(1)  # different attribute: not merged
        return a + b, c

    before, ir = _check(f, cse, flow.randn(3, 4), flow.randn(3, 4))
    assert before["mul"] == 3 and before["sum"] == 3
    assert ir.op_counts()["mul"] == 1 and ir.op_counts()["sum"] == 2


def test_cse_merges_equal_small_constants_but_not_random_draws():
    def f(x):
        a = x + flow.tensor([1.0, 2.0])
        b = x + flow.tensor([1.0, 2.0])
        m1 = flow.nn.functional.dropout(x, 0.5)
        m2 = flow.nn.functional.dropout(x, 0.5)
        return a * b, m1, m2

    ir = _ir(f, flow.randn(2))
    ir = cse(ir)
    counts = ir.op_counts()
    assert counts["add"] == 1
    assert counts["bernoulli_mask"] == 2


# -- constant folding ------------------------------------------------------------------------------------


def test_constant_folding_evaluates_constant_subgraphs():
    def f(x):
        c = (flow.arange(4).float() * 2 + 1).exp().reshape(2, 2)  # no graph input: folded
        return x * c

    before, ir = _check(f, constant_folding, flow.randn(2, 2))
    assert before["exp"] == 1 and before["mul"] == 2
    assert ir.op_counts() == {"mul": 1}
    (folded,) = [v for v in ir.nodes[0].input_values() if v.kind == "const"]
    np.testing.assert_allclose(ir.constants[folded.id], np.exp(np.arange(4.0) * 2 + 1).reshape(2, 2), rtol=1e-6)


def test_constant_folding_leaves_big_broadcasts_and_random_ops():
    def f(x):
        big = flow.ones(1).expand(2048, 1024)  # folding would only make a 8 MiB constant
        mask = flow.nn.functional.dropout(flow.ones(3), 0.5)
        return x + big.sum(), mask

    ir = constant_folding(_ir(f, flow.randn(1)), GraphConfig())
    counts = ir.op_counts()
    assert counts.get("expand") == 1 and counts.get("bernoulli_mask") == 1


# -- algebraic simplification ------------------------------------------------------------------------------


def test_simplify_removes_neutral_elements():
    def f(x):
        y = x * 1.0
        y = 1.0 * y
        y = y + 0.0
        y = 0.0 + y
        y = y - 0.0
        y = y / 1.0
        y = y * flow.ones(3)  # same shape: nothing broadcast
        return y.exp()

    before, ir = _check(f, simplify, flow.randn(3))
    assert before["mul"] == 3
    assert ir.op_counts() == {"exp": 1}


def test_simplify_keeps_broadcasting_and_promoting_neutral_ops():
    def f(x):
        a = x * flow.ones(3, 4)  # (3, 1) -> (3, 4): broadcast
        b = x.double() * 1.0
        return a, b

    before, ir = _check(f, simplify, flow.randn(3, 1))
    assert ir.op_counts()["mul"] == 1  # the broadcasting one stays; x.double() * 1.0 goes
    assert ir.op_counts()["cast"] == 1


def test_simplify_reshapes_permutes_and_casts():
    def f(x):
        a = x.reshape(6, 4).reshape(4, 6).reshape(2, 12)  # reshape of reshape
        b = x.reshape(2, 3, 4)  # same shape
        c = x.transpose(0, 1).transpose(0, 1)  # transpose of transpose
        d = x.permute(1, 2, 0).permute(2, 0, 1)  # composition is the identity
        e = x.permute(1, 0, 2).permute(0, 2, 1)  # composed into one permute
        g = flow.ops.call("cast", x, dtype="float32")
        h = flow.ops.call("expand", x, shape=(2, 3, 4))
        return a, b + c + d + g + h, e

    before, ir = _check(f, simplify, flow.randn(2, 3, 4))
    assert before["reshape"] >= 3 and before["permute"] == 6
    counts = ir.op_counts()
    assert counts["reshape"] == 1 and counts["permute"] == 1 and "cast" not in counts and "expand" not in counts
    (p,) = [n for n in ir.nodes if n.name == "permute"]
    assert p.attrs["dims"] == (1, 2, 0)


# -- the pipeline ---------------------------------------------------------------------------------------------


def test_builtin_passes_are_registered_in_order():
    names = [e.name for e in REGISTRY.passes.ordered()]
    order = [names.index(n) for n in ("constant_folding", "simplify", "cse", "dce")]
    assert order == sorted(order)
    assert all(REGISTRY.passes[n].plugin == "flow.graph" for n in ("constant_folding", "simplify", "cse", "dce"))


def test_pipeline_runs_every_pass_and_logs_op_counts():
    def f(x):
        c = flow.ones(3) * 2
        a = (x * 1.0 + c).exp()
        b = (x * 1.0 + c).exp()
        return (a + b).reshape(3, 1).reshape(3), (x - 5).abs()

    ir = _ir(f, flow.randn(3))
    log = []
    want = _execute(ir, flow.ones(3))
    ir = run_pipeline(ir, GraphConfig(), log, keep_text=True)
    log = [r for r in log if r.ran]  # plugins' passes (amp where flow-amp is installed) are off by default
    assert [r.name for r in log][:5] == ["trace", "constant_folding", "simplify", "cse", "dce"]
    assert log[0].nodes > log[-1].nodes
    assert "op counts" in log[2].text
    # x * 1.0 gone, c folded, the two exps merged, reshape(reshape(y, (3, 1)), (3,)) is y
    assert ir.op_counts() == {"add": 2, "exp": 1, "sub": 1, "abs": 1}
    for w, g in zip(want, _execute(ir, flow.ones(3))):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_disabled_passes_are_skipped_and_unknown_names_rejected():
    cfg = GraphConfig()
    cfg.disable_pass("cse")
    log = []
    ir = run_pipeline(_ir(lambda x: (x + 1) * (x + 1), flow.randn(2)), cfg, log)
    assert ir.op_counts()["add"] == 2
    assert any(r.name == "cse" and not r.ran for r in log)
    cfg.disable_pass("no_such_pass")
    with pytest.raises(FlowError, match=r"no graph pass named \['no_such_pass'\].*registered passes"):
        run_pipeline(_ir(lambda x: x + 1, flow.randn(2)), cfg, [])


@pytest.fixture
def pass_plugin():
    seen = []

    def count_adds(ir, config):
        """a test pass"""
        seen.append((ir.op_counts().get("add", 0), config.options.get("tests.flag")))
        return ir

    def broken(ir, config):
        ir.nodes = ir.nodes[1:]  # drops the definition of a value that is still read
        return ir

    def passes(registry):
        registry.register_pass("tests_count_adds", count_adds, after="dce")
        registry.register_pass("tests_broken", broken, enabled_by_default=False)
        registry.register_pass("tests_none", lambda ir, config: None, enabled_by_default=False)

    mod = types.ModuleType("tests_graph_passes")
    mod.flow_register_passes = hookimpl(passes)
    flow.plugins.register(mod, name="tests.graph_passes")
    yield seen
    flow.plugins.unregister("tests.graph_passes")


def test_plugin_passes_run_in_their_place_with_the_config(pass_plugin):
    names = [e.name for e in REGISTRY.passes.ordered()]
    assert names.index("tests_count_adds") > names.index("dce")
    cfg = GraphConfig()
    cfg.set_option("tests.flag", 7)
    f = flow.compile(lambda x: (x + 1) + (x + 1), config=cfg)
    f(flow.randn(2))
    assert pass_plugin == [(2, 7)]  # after cse: two adds left of three


def test_a_pass_that_breaks_the_ir_or_returns_nothing_is_named(pass_plugin):
    cfg = GraphConfig()
    cfg.enable_pass("tests_broken")
    with pytest.raises(FlowError, match="graph pass 'tests_broken' .*invalid IR"):
        flow.compile(lambda x: (x + 1).exp(), config=cfg)(flow.randn(2))
    cfg = GraphConfig()
    cfg.enable_pass("tests_none")
    with pytest.raises(FlowError, match="graph pass 'tests_none' .*returned None"):
        flow.compile(lambda x: x + 1, config=cfg)(flow.randn(2))


def test_optimizer_updates_are_one_fused_op_per_group():
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    opt = flow.optim.Adam([{"params": m[0].parameters()}, {"params": m[1].parameters(), "lr": 0.1}])

    @flow.compile
    def step(x):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()

    step(flow.randn(3, 4))
    counts = step.ir.op_counts()
    assert counts["adam_update"] == 2
    (n0, n1) = [n for n in step.ir.nodes if n.name == "adam_update"]
    assert len(n0.inputs[0]) == 2 and len(n1.inputs[0]) == 2  # each group's weight and bias together
    assert n0.inplace and n0.has_side_effects


def test_passes_can_emit_registered_ops_with_shapes_from_meta_rules():
    def insert_casts(ir, config):
        """what an AMP-like pass does: compute the matmul in float64 and cast back"""
        for n in [n for n in ir.nodes if n.name == "matmul"]:
            a, b = n.inputs
            ca = ir.emit("cast", [a], {"dtype": "float64"}, before=n, tags={"phase": "amp"})
            cb = ir.emit("cast", [b], {"dtype": "float64"}, before=n)
            mm = ir.emit("matmul", [ca.outputs[0], cb.outputs[0]], before=n, loc=n.loc, scope=n.scope)
            back = ir.emit("cast", [mm.outputs[0]], {"dtype": "float32"}, after=mm)
            assert mm.outputs[0].dtype is flow.float64 and back.outputs[0].shape == n.outputs[0].shape
            ir.replace_uses({n.outputs[0].id: back.outputs[0]})
        return dce(ir, config)

    x, w = flow.randn(3, 4), flow.randn(4, 2)
    ir = _ir(lambda x, w: (x @ w).relu(), x, w)
    ir = insert_casts(ir, GraphConfig())
    ir.verify()
    assert ir.op_counts() == {"cast": 3, "matmul": 1, "relu": 1}
    (got,) = _execute(ir, x, w)
    np.testing.assert_allclose(got, (x.double() @ w.double()).float().relu().numpy(), rtol=1e-6)


def test_simplify_keeps_copies_of_values_updated_in_place():
    m = nn.Linear(2, 2)
    opt = flow.optim.SGD(m.parameters(), lr=1.0)

    @flow.compile
    def step(x):
        before = m.weight * 1.0  # must keep the value from before the update
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
        return before

    w0 = m.weight.detach().numpy().copy()
    np.testing.assert_array_equal(step(flow.ones(1, 2)).numpy(), w0)
    assert not np.array_equal(m.weight.detach().numpy(), w0)
