"""graph.render: the IR drawn by Graphviz's dot, with phases, fused groups and value annotations."""

from __future__ import annotations

import re
import shutil
import types
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import flow
import flow.nn as nn
from flow.errors import FlowError
from flow.graph import render as R
from flow.plugins import hookimpl

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (apt graphviz)")
_SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flow-cache"))


def _x(*shape, seed=0):
    return flow.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _train_graph():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    opt = flow.optim.SGD(model.parameters(), lr=0.1)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, x):
            loss = self.model(x).square().mean()
            loss.backward()
            return loss

    g = Step()
    g(_x(5, 4))
    return g


def _svg_texts(path) -> list[str]:
    root = ET.parse(path).getroot()  # raises on malformed XML
    assert root.tag == _SVG + "svg"
    return [t.text for t in root.iter(_SVG + "text") if t.text]


def _node_fill(path, label: str) -> str:
    """The fill colour of the SVG node whose first text line is ``label``."""
    root = ET.parse(path).getroot()
    for g in root.iter(_SVG + "g"):
        if g.get("class") != "node":
            continue
        texts = [t.text for t in g.iter(_SVG + "text")]
        if texts and texts[0] == label:
            return next(p.get("fill") for p in g.iter(_SVG + "polygon"))
    raise AssertionError(f"no node labelled {label!r}")


@needs_dot
def test_training_graph_renders_valid_svg_with_phases_and_values(tmp_path):
    g = _train_graph()
    out = tmp_path / "sub" / "step.svg"
    assert g.render(str(out)) == str(out)
    texts = _svg_texts(out)
    for label in ("linear", "relu", "sgd_update", "model.0.weight", "input0", "f32[5,4]", "f32[3,4]", "state (param)"):
        assert label in texts, label
    for phase in ("forward", "backward", "optimizer"):
        assert phase in texts, phase
    assert _node_fill(out, "relu") == R._PHASE_COLOR["forward"]
    assert _node_fill(out, "sgd_update") == R._PHASE_COLOR["optimizer"]
    backward = [n for n in g.ir.nodes if n.tags.get("phase") == "backward"]
    assert _node_fill(out, backward[0].name) == R._PHASE_COLOR["backward"]


@needs_dot
def test_png_and_pdf_from_the_extension_or_format(tmp_path):
    g = _train_graph()
    g.render(str(tmp_path / "a.png"))
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    g.render(tmp_path / "a.pdf")
    assert (tmp_path / "a.pdf").read_bytes()[:5] == b"%PDF-"
    g.render(str(tmp_path / "picture"), format="SVG")
    assert _svg_texts(tmp_path / "picture")


def test_dot_format_writes_the_detailed_text(tmp_path):
    g = _train_graph()
    p = g.render(str(tmp_path / "g.dot"))
    text = open(p).read()
    assert text == R.to_dot_detailed(g.ir) and text.startswith('digraph "Step" {')
    assert 'label="update"' in text and "cluster_legend" in text


def test_fused_groups_are_clusters_titled_by_their_members(tmp_path):
    def fn(x, y):
        return flow.matmul(flow.tanh(x * y + 1.0) * x, y)

    g = flow.compile(fn)
    g(_x(64, 64), _x(64, 64, seed=1))
    fused = [n for n in g.ir.nodes if n.name == "fused_elementwise"]
    if not fused:
        pytest.skip("no C compiler: nothing fused")
    text = R.to_dot_detailed(g.ir)
    assert f"subgraph cluster_fused{fused[0].id}" in text
    assert 'label="fused: mul + add + tanh + mul"' in text
    if shutil.which("dot"):
        g.render(str(tmp_path / "f.svg"))
        texts = _svg_texts(tmp_path / "f.svg")
        assert "fused: mul + add + tanh + mul" in texts and "4 ops" in texts


def _tag_sbp(ir, config):
    for n in ir.nodes:
        if n.name == "exp":
            n.outputs[0].attrs["sbp"] = "S(0)"
            n.outputs[0].attrs["placement"] = "ranks 0-1"
    return ir


def test_value_attributes_such_as_sbp_annotate_the_edges(tmp_path):
    mod = types.ModuleType("tests_render_sbp")
    mod.flow_register_passes = hookimpl(
        lambda registry: registry.register_pass("tests_render_sbp", _tag_sbp, before="constant_folding")
    )
    flow.plugins.register(mod, name="tests.render_sbp")
    try:
        g = flow.compile(lambda x: flow.exp(x).sum(0))
        g(_x(4, 3))
    finally:
        flow.plugins.unregister("tests.render_sbp")
    text = R.to_dot_detailed(g.ir)
    assert re.search(r'-> n\d+ \[label="f32\[4,3\]\\nsbp=\'S\(0\)\'\\nplacement=\'ranks 0-1\'"\]', text), text
    if shutil.which("dot"):
        g.render(str(tmp_path / "s.svg"))
        assert "sbp='S(0)'" in _svg_texts(tmp_path / "s.svg")


def test_without_dot_the_error_names_the_package(tmp_path, monkeypatch):
    g = _train_graph()
    monkeypatch.setattr(R.shutil, "which", lambda name: None)
    with pytest.raises(R.GraphvizNotFoundError, match="apt-get install graphviz"):
        g.render(str(tmp_path / "g.svg"))
    assert not (tmp_path / "g.svg").exists()


def test_bad_arguments(tmp_path):
    g = _train_graph()
    with pytest.raises(ValueError, match=r"extension of '.*g\.gif' is not one of svg, png, pdf"):
        g.render(str(tmp_path / "g.gif"))
    with pytest.raises(ValueError, match="format='jpeg'"):
        g.render(str(tmp_path / "g.svg"), format="jpeg")
    with pytest.raises(TypeError, match="path must be a str"):
        g.render(3)
    fresh = flow.compile(lambda x: x + 1)
    with pytest.raises(FlowError, match="has not been compiled yet"):
        fresh.render(str(tmp_path / "h.svg"))
