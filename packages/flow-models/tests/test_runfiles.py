"""The run folder's own files: written atomically, temporaries of killed runs cleaned, metrics resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from flow_models.train import runfiles
from flow_models.train.cli import main
from flow_models.train.runfiles import MetricsLog, atomic_write, remove_stale_temps


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_atomic_write_replaces_or_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    atomic_write(str(path), "old")
    atomic_write(str(path), "new")
    assert path.read_text() == "new"

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runfiles.os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(str(path), "newer")
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["summary.json"]


def test_stale_temporaries_of_dead_runs_are_removed_and_nothing_else(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    names = [
        f"plot.png.{dead}.tmp",
        f"summary.json.{dead}.tmp",
        f"metrics.jsonl.{alive}.tmp",
        f"checkpoint.safetensors.{dead}.tmp",
        "notes.txt",
    ]
    for n in names:
        (tmp_path / n).write_text("x")
    removed = remove_stale_temps(str(tmp_path))
    assert sorted(removed) == sorted(names[:2])
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:])  # ours, another owner's kind, the user's


def test_metrics_resume_drops_a_line_cut_short_and_later_steps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"kind": "train", "step": 1}\n{"kind": "train", "step": 2}\n{"kind": "eval", "step": 3}\n{"kind": "train", "st'
    )
    log = MetricsLog(str(path), resume_step=2)
    log.append({"kind": "train", "step": 3})
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_a_run_cleans_up_after_a_killed_one(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    stale = out / f"plot.png.{_dead_pid()}.tmp"
    stale.write_bytes(b"half a png")
    assert main(["lenet", "--max-steps", "2", "--output", str(out), "--no-progress"]) == 0
    assert not stale.exists()
    assert sorted(f for f in os.listdir(out) if not f.startswith("checkpoint")) == [
        "metrics.jsonl",
        "plot.png",
        "summary.json",
    ]
