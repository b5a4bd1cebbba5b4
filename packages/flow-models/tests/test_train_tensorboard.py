"""flow-train --tensorboard DIR: a 3-step run's event files, read back with TensorBoard's own reader."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from flow_models.train.cli import main  # noqa: E402


def _run(tmp_path, *args: str) -> tuple[EventAccumulator, list[dict]]:
    out, tb = tmp_path / "run", tmp_path / "tb"
    argv = ["lenet", "--dataset", "digits", "--max-steps", "3", "--log-every", "1", "--batch-size", "8"]
    argv += ["--eval-batches", "1", "--output", str(out), "--tensorboard", str(tb), "--no-progress", *args]
    assert main(argv) == 0
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    acc.Reload()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return acc, records


@pytest.mark.parametrize("mode", ["--eager", "--graph"])
def test_tensorboard_events_of_a_short_run(tmp_path, mode):
    acc, records = _run(tmp_path, mode)
    scalars = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/samples_per_s", "eval/loss", "eval/accuracy"} <= scalars
    train = [r for r in records if r["kind"] == "train"]
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [1, 2, 3] == [r["step"] for r in train]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in train], rel=1e-6)
    assert [e.value for e in acc.Scalars("train/lr")] == pytest.approx([r["lr"] for r in train], rel=1e-6)
    assert all(e.value > 0 for e in acc.Scalars("train/samples_per_s"))
    (ev,) = [r for r in records if r["kind"] == "eval"]
    (acc_ev,) = acc.Scalars("eval/accuracy")
    assert acc_ev.step == 3 and acc_ev.value == pytest.approx(ev["accuracy"], rel=1e-6)
    nodes = acc.Graph().node
    names = {n.name for n in nodes}
    assert "input/input0" in names and any(n.startswith("model/") and n.endswith("weight") for n in names)
    ops = {n.op for n in nodes}
    assert {"conv2d", "linear", "cross_entropy"} <= ops
    if mode == "--graph":  # the compiled step: backward and the optimizer's parameter updates too
        assert {"conv2d_backward_weight", "adam_update", "StateUpdate"} <= ops


def test_tensorboard_dir_is_checked(tmp_path, capsys):
    assert main(["lenet", "--tensorboard", "{bad}", "--output", str(tmp_path / "r")]) == 2
    assert "--tensorboard" in capsys.readouterr().err


def test_missing_tensorboard_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard now raises ImportError
    argv = ["lenet", "--dataset", "digits", "--max-steps", "1", "--output", str(tmp_path / "r")]
    assert main([*argv, "--tensorboard", str(tmp_path / "tb"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--tensorboard needs the 'tensorboard' package" in err and "flow-core[tensorboard]" in err
