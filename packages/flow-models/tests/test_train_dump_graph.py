"""flow-train --graph --dump-graph DIR: the compiled training step as graph.svg, graph.dot and graph.txt."""

import shutil
import xml.etree.ElementTree as ET

import pytest

from flow_models.train.cli import main

_ARGS = ["lenet", "--max-steps", "2", "--epochs", "1", "--eval-batches", "1", "--batch-size", "8", "--no-progress"]


def _run(tmp_path, *extra: str) -> int:
    return main([*_ARGS, *extra, "--output", str(tmp_path / "run")])


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (apt graphviz)")
def test_dump_graph_writes_svg_dot_and_text(tmp_path, capsys):
    folder = tmp_path / "graphs"
    assert _run(tmp_path, "--graph", "--dump-graph", str(folder)) == 0
    printed = capsys.readouterr().out
    assert f"{folder / 'graph.svg'}" in printed and "graph of the training step" in printed
    root = ET.parse(folder / "graph.svg").getroot()
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {"conv2d", "forward", "backward", "optimizer"} <= texts
    dot = (folder / "graph.dot").read_text()
    assert dot.startswith('digraph "TrainStep" {') and "state (param)" in dot
    assert "= conv2d(" in (folder / "graph.txt").read_text()


def test_without_dot_the_run_goes_on_with_a_note(tmp_path, capsys, monkeypatch):
    import flow.graph.render as R

    monkeypatch.setattr(R.shutil, "which", lambda name: None)
    folder = tmp_path / "graphs"
    assert _run(tmp_path, "--graph", "--dump-graph", str(folder)) == 0
    assert "Graphviz's dot is not installed (apt-get install graphviz" in capsys.readouterr().out
    assert (folder / "graph.dot").is_file() and not (folder / "graph.svg").exists()


def test_dump_graph_needs_graph_mode(tmp_path, capsys):
    assert _run(tmp_path, "--dump-graph", str(tmp_path / "g")) == 2
    err = capsys.readouterr().err
    assert err.strip() == "flow-train: error: --dump-graph draws the compiled training step: add --graph"
    assert not (tmp_path / "g").exists()
