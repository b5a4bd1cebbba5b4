"""flow-train --nproc N: data-parallel training on N processes (needs flow-dist with MPI; the
`dist` nox session runs it). The run sees the same samples step for step as one process, so
its first step's loss is the single-process one and training stays close to it; only rank 0
writes the run folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

try:
    import mpi4py  # noqa: F401

    import flow_dist  # noqa: F401
except ImportError:
    pytest.skip("needs flow-dist with MPI (pip install flow-dist[mpi])", allow_module_level=True)


def flow_train(out, *extra):
    """flow-train on the digits' LeNet for a few steps."""
    flags = "--dataset digits --epochs 1 --max-steps 12 --log-every 1 --no-progress".split()
    cmd = [sys.executable, "-m", "flow_models.train", "lenet", *flags, "--output", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def train(out, *extra):
    p = flow_train(out, "--batch-size", "32", "--optimizer", "sgd", "--lr", "0.05", *extra)
    assert p.returncode == 0, p.stdout + p.stderr
    return p, [json.loads(line) for line in open(out / "metrics.jsonl")]


def test_two_processes_train_like_one(tmp_path):
    _, one = train(tmp_path / "one")
    p, two = train(tmp_path / "two", "--nproc", "2")
    loss1 = [r["loss"] for r in one if r["kind"] == "train"]
    loss2 = [r["loss"] for r in two if r["kind"] == "train"]
    assert len(loss1) == len(loss2) == 12
    assert loss1[0] == pytest.approx(loss2[0], rel=1e-5)  # the same samples, the same model
    assert loss2[-1] == pytest.approx(loss1[-1], rel=1e-2)
    assert p.stdout.count("training lenet") == 1  # rank 0 alone logs
    assert (tmp_path / "two" / "checkpoint.safetensors").exists()


def test_bad_combinations_are_refused(tmp_path):
    p = flow_train(tmp_path, "--batch-size", "33", "--nproc", "2")
    assert p.returncode != 0 and "must be divisible by --nproc 2" in p.stderr + p.stdout
