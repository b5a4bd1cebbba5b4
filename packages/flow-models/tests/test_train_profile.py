"""flow-train --profile N: a Chrome trace of N steps after a warm-up step, and the top ops printed."""

import json

import pytest

from flow_models.train.cli import main
from flow_models.train.profiling import TRACE_NAME


def _run(tmp_path, *extra: str) -> str:
    out = tmp_path / "run"
    args = ["lenet", "--max-steps", "4", "--epochs", "1", "--eval-batches", "1", "--batch-size", "8"]
    assert main([*args, *extra, "--output", str(out), "--no-progress"]) == 0
    return str(out)


@pytest.mark.parametrize("mode", ["--eager", "--graph"])
def test_profile_writes_trace_of_n_steps_and_prints_top_ops(tmp_path, capsys, mode):
    out = _run(tmp_path, "--profile", "2", mode)
    printed = capsys.readouterr().out
    assert "profile of 2 step(s)" in printed and "Self CPU time total" in printed and "CPU total" in printed
    doc = json.loads(open(f"{out}/{TRACE_NAME}").read())
    steps = sorted(e["name"] for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#1", "ProfilerStep#2"]  # step 0 is the warm-up
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"}
    if mode == "--graph":
        assert any(n.startswith("graph ") for n in names)
    else:
        assert "conv2d" in names or any("Backward" in n for n in names)


def test_profile_cut_short_by_max_steps_still_writes_trace(tmp_path, capsys):
    out = _run(tmp_path, "--profile", "10")
    assert "profile of 10 step(s)" in capsys.readouterr().out
    doc = json.loads(open(f"{out}/{TRACE_NAME}").read())
    steps = [e["name"] for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    assert sorted(steps) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]


def test_profile_flag_is_checked(capsys):
    assert main(["lenet", "--profile", "0"]) == 2
    assert "argument --profile: must be an integer >= 1, got 0" in capsys.readouterr().err
