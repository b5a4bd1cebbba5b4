"""IR metas and per-value attributes: ``ir.infer_metas()`` after a dtype-changing pass, ``verify()``
catching a recorded meta that disagrees with the op's meta rule, and ``Value.attrs`` surviving the
pass pipeline (simplify, CSE, constant folding, fusion, activation checkpointing, memory planning)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import FlowError
from flow.graph.ir import Value
from flow.graph.tracer import trace
from flow.plugins import hookimpl


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flow-cache"))


def _ir(fn, *args):
    return trace(fn, args, {})


def _x(*shape, seed=0):
    return flow.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _pass_plugin(name: str, fn, **order):
    mod = types.ModuleType(name)
    mod.flow_register_passes = hookimpl(lambda registry: registry.register_pass(name, fn, **order))
    return mod


class _registered:
    """Register a test pass for the duration of a ``with`` block."""

    def __init__(self, name, fn, **order):
        self.name, self.mod = name, _pass_plugin(name, fn, **order)

    def __enter__(self):
        flow.plugins.register(self.mod, name=f"tests.{self.name}")

    def __exit__(self, *exc):
        flow.plugins.unregister(f"tests.{self.name}")


# -- verify() checks metas -----------------------------------------------------------------------


def test_verify_catches_a_wrong_dtype_and_a_wrong_shape_naming_the_node():
    ir = _ir(lambda x, y: flow.exp(x * y).sum(1), _x(4, 5), _x(4, 5, seed=1))
    ir.verify()
    mul = next(n for n in ir.nodes if n.name == "mul")
    mul.outputs[0].dtype = flow.float64
    with pytest.raises(
        FlowError,
        match=rf"node {mul.id} \(mul\) at .*: output 0 \(%{mul.outputs[0].id}\) is recorded "
        r"as f64\[4,5\], its meta rule gives f32\[4,5\].*ir.infer_metas\(\)",
    ):
        ir.verify()
    mul.outputs[0].dtype = flow.float32
    ir.verify()
    s = next(n for n in ir.nodes if n.name == "sum")
    s.outputs[0].shape = (5,)
    with pytest.raises(FlowError, match=rf"node {s.id} \(sum\).*recorded as f32\[5\], its meta rule gives f32\[4\]"):
        ir.verify()
    ir.verify(metas=False)  # the structural checks alone


def test_verify_catches_a_wrong_device():
    ir = _ir(lambda x: flow.exp(x) * 2.0, _x(3))
    e = next(n for n in ir.nodes if n.name == "exp")
    good = e.outputs[0].device
    e.outputs[0].device = flow.device("meta")
    with pytest.raises(FlowError, match=rf"node {e.id} \(exp\).*recorded on device meta, its meta rule gives cpu"):
        ir.verify()
    e.outputs[0].device = good
    ir.verify()


def test_verify_reports_a_meta_rule_that_rejects_the_rewritten_inputs():
    ir = _ir(lambda x, y: flow.matmul(x, y), _x(2, 3), _x(3, 4))
    ir.inputs[1].shape = (5, 4)
    with pytest.raises(
        FlowError,
        match=r"node \d+ \(matmul\).*its meta rule rejects its inputs \(f32\[2,3\], "
        r"f32\[5,4\]\)",
    ):
        ir.verify()


def test_a_pass_that_breaks_metas_is_named_by_the_pipeline():
    def bad(ir, config):
        for n in ir.nodes:
            if n.name == "exp":
                n.outputs[0].dtype = flow.float64
        return ir

    with _registered("tests_bad_metas", bad, after="dce", before="fusion"):
        c = flow.compile(lambda x: flow.exp(x) + 1.0)
        with pytest.raises(FlowError, match=r"graph pass 'tests_bad_metas'.*invalid IR.*\(exp\).*recorded as f64"):
            c(_x(3))


# -- infer_metas() after a rewrite ----------------------------------------------------------------


def _to_float64(ir, config):
    """A dtype pass as flow-amp's would be: cast every float32 graph input to float64, re-infer."""
    mapping = {}
    first = ir.nodes[0]
    for v in ir.inputs:
        if v.dtype is flow.float32:
            mapping[v.id] = ir.emit("cast", [v], {"dtype": "float64"}, before=first).outputs[0]
    casts = {m.producer.id for m in mapping.values()}
    for n in ir.nodes:
        if n.id not in casts:
            n.map_inputs(lambda v: mapping.get(v.id, v))
    ir.outputs = [mapping.get(v.id, v) if isinstance(v, Value) else v for v in ir.outputs]
    ir.meta["tests_changed"] = ir.infer_metas()
    return ir


def test_infer_metas_propagates_a_dtype_change_through_the_graph():
    def fn(x, y):
        return (flow.tanh(x * y) + 1.0).sum(0), flow.matmul(x, y.T)

    ir = _ir(fn, _x(4, 6), _x(4, 6, seed=1))
    with pytest.raises(FlowError):  # rewired without re-inference: the metas are stale
        n = ir.nodes[0]
        c = ir.emit("cast", [ir.inputs[0]], {"dtype": "float64"}, before=n)
        n.map_inputs(lambda v: c.outputs[0] if v is ir.inputs[0] else v)
        ir.verify()
    ir = _ir(fn, _x(4, 6), _x(4, 6, seed=1))
    _to_float64(ir, None)
    ir.verify()
    assert ir.meta["tests_changed"] == len(ir.nodes) - 2  # every node but the two casts
    assert all(o.dtype is flow.float64 for n in ir.nodes for o in n.outputs)
    assert ir.outputs[0].shape == (6,) and ir.outputs[1].shape == (4, 4)
    assert ir.infer_metas() == 0  # nothing left to change


def test_a_dtype_pass_in_the_pipeline_compiles_and_runs_in_the_new_dtype():
    def fn(x, y):
        return flow.exp(x * y - 1.0) * x + flow.matmul(x, y.T).sum()

    x, y = _x(64, 64), _x(64, 64, seed=1)
    with _registered("tests_to_f64", _to_float64, after="dce", before="fusion"):
        c = flow.compile(fn)
        out = c(x, y)
    assert out.dtype is flow.float64
    ref = fn(x.double(), y.double())
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-12)


# -- Value.attrs through the pipeline --------------------------------------------------------------


def _tag_all(ir, config):
    for v in ir.inputs:
        v.attrs["tests_tag"] = f"in{v.id}"
    for n in ir.nodes:
        for o in n.outputs:
            o.attrs["tests_tag"] = f"v{o.id}"
    return ir


def test_value_attrs_are_printed_and_in_json():
    ir = _ir(lambda x: flow.exp(x), _x(3))
    ir.nodes[0].outputs[0].attrs["sbp"] = "S(0)"
    text = str(ir)
    assert "= exp(" in text and "{sbp='S(0)'}" in text
    assert "{" not in text.split("\n")[1]  # a value without attributes prints as before
    import json

    from flow.graph.debug import to_json

    node = json.loads(to_json(ir))["nodes"][0]
    assert node["outputs"][0]["attrs"] == {"sbp": "S(0)"}


def test_simplify_cse_and_folding_carry_attrs_to_the_surviving_value():
    def fn(x):
        a = flow.exp(x) * 1.0  # simplify: the product becomes exp(x)
        b = flow.exp(x) * 1.0  # CSE: the second exp is the first one
        return a + b

    ir = _ir(fn, _x(3))
    muls = [n for n in ir.nodes if n.name == "mul"]
    muls[0].outputs[0].attrs["amp_dtype"] = "float16"
    muls[1].outputs[0].attrs["sbp"] = "B"
    from flow.graph.passes.pipeline import run_pipeline

    ir = run_pipeline(ir, flow.graph.config.GraphConfig(), [])
    (add,) = [n for n in ir.nodes if n.name == "add"]
    (e,) = [n for n in ir.nodes if n.name == "exp"]
    assert add.inputs[0] is e.outputs[0] and add.inputs[1] is e.outputs[0]
    assert e.outputs[0].attrs == {"amp_dtype": "float16", "sbp": "B"}


def test_constant_folding_gives_the_folded_constant_the_attrs():
    c = flow.tensor(np.arange(3, dtype=np.float32))

    def fn(x):
        return x + flow.exp(c)

    def tag(ir, config):
        for n in ir.nodes:
            if n.name == "exp":
                n.outputs[0].attrs["sbp"] = "B"
        return ir

    with _registered("tests_tag_exp", tag, before="constant_folding"):
        g = flow.compile(fn)
        g(_x(3))
    (add,) = [n for n in g.ir.nodes if n.name == "add"]
    folded = add.inputs[1]
    assert folded.kind == "const" and folded.attrs == {"sbp": "B"}


def test_fusion_and_memory_planning_keep_attrs_on_fused_outputs():
    def fn(x, y):
        return flow.matmul(flow.tanh(x * y + 1.0) * x, y)

    with _registered("tests_tag_all", _tag_all, before="constant_folding"):
        g = flow.compile(fn)
        g(_x(64, 64), _x(64, 64, seed=1))
    fused = [n for n in g.ir.nodes if n.name == "fused_elementwise"]
    if not fused:
        pytest.skip("no C compiler: nothing fused")
    (f,) = fused
    # the fused node's output replaces the group's last member (the second mul)
    assert f.outputs[0].attrs["tests_tag"].startswith("v")
    assert all("tests_tag" in o.attrs for n in g.ir.nodes for o in n.outputs)
    assert "{tests_tag=" in str(g.ir)


def test_recomputed_values_keep_the_attrs_of_the_originals():
    flow.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    opt = flow.optim.SGD(m.parameters(), lr=0.1)

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = F.mse_loss(self.m(x), y)
            loss.backward()
            return loss

    g = G()
    g.config.enable_fusion(False)
    g.m.activation_checkpointing = True
    with _registered("tests_tag_all", _tag_all, before="constant_folding"):
        g(_x(8, 16), _x(8, 4, seed=1))
    clones = [n for n in g.ir.nodes if "recompute_of" in n.tags]
    assert clones, g.ir
    # the tags were set before checkpointing ran: a clone has them only by inheritance
    originals = {o.attrs["tests_tag"] for n in g.ir.nodes if "recompute_of" not in n.tags for o in n.outputs}
    for n in clones:
        for o in n.outputs:
            assert o.attrs["tests_tag"] != f"v{o.id}"  # the original's tag, not one of its own
    assert any(o.attrs["tests_tag"] in originals for n in clones for o in n.outputs)
