"""flow-train end to end: the quality bars of each task, checkpoints, exact resumption, Ctrl-C, sampling."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import flow
from flow_models.data import load_cpython_docs
from flow_models.train.cli import main
from flow_models.train.generate import main as generate_main
from flow_models.train.metrics import unigram_entropy


def train(tmp_path, *args: str, name: str = "run") -> dict:
    """Run flow-train in this process; returns summary.json of the run."""
    out = tmp_path / name
    assert main([*args, "--output", str(out), "--no-progress"]) == 0
    return json.loads((out / "summary.json").read_text())


def weights(path) -> dict:
    return {k: v.numpy() for k, v in flow.load(str(path))["model"].items()}


def test_lenet_on_digits_readme_command(tmp_path):
    """`flow-train lenet --dataset digits`: >= 95% test accuracy printed, a checkpoint and a plot left behind."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "flow_models.train", "lenet", "--dataset", "digits", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    acc = float(re.search(r"test accuracy: ([\d.]+)%", proc.stdout).group(1))
    print(f"lenet/digits: test accuracy {acc:.2f}% in {seconds:.1f} s wall")
    assert acc >= 95.0, proc.stdout
    run = tmp_path / "runs" / "lenet-digits"
    assert (run / "checkpoint.safetensors").is_file()
    assert (run / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if r["kind"] == "eval"]
    assert len(evals) == 15 and evals[-1]["accuracy"] == pytest.approx(acc / 100, abs=1e-4)
    ckpt = flow.load(str(run / "checkpoint.safetensors"))
    assert ckpt["epoch"] == 15 and ckpt["global_step"] == 675 and ckpt["model_name"] == "lenet"
    assert {"model", "optimizer", "scheduler", "rng", "step_in_epoch", "config"} <= set(ckpt)


@pytest.mark.parametrize("stop_at", [60, 45], ids=["mid-epoch", "epoch-boundary"])
def test_resume_continues_identically(tmp_path, stop_at):
    common = ["lenet", "--epochs", "2", "--model-arg", "hidden=[32,16]", "--log-every", "5"]
    straight = train(tmp_path, *common, name="straight")
    stopped = train(tmp_path, *common, "--max-steps", str(stop_at), name="resumed")
    assert stopped["steps"] == stop_at
    ckpt = tmp_path / "resumed" / "checkpoint.safetensors"
    assert flow.load(str(ckpt))["global_step"] == stop_at
    resumed = train(tmp_path, "--resume", str(ckpt), name="resumed")
    assert resumed["steps"] == straight["steps"] == 90
    assert resumed["test"] == straight["test"]
    a, b = weights(tmp_path / "straight" / "checkpoint.safetensors"), weights(ckpt)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)

    # the resumed run's metrics continue the interrupted ones, as if it never stopped
    def steps(name):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [(r["kind"], r["step"], round(r["loss"], 6)) for r in map(json.loads, lines) if r["kind"] == "train"]

    assert steps("resumed") == steps("straight")


def test_ctrl_c_saves_a_checkpoint_and_resumes(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "flow_models.train", "lenet", "--epochs", "500", "--no-progress", "--output", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        for line in proc.stdout:
            if line.startswith("epoch 1/"):
                break
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stdout + stderr and "interrupted" in stderr
    assert "--resume" in stdout
    ckpt = flow.load(str(out / "checkpoint.safetensors"))
    step = ckpt["global_step"]
    assert step >= 45 and ckpt["config"]["epochs"] == 500
    summary = train(tmp_path, "--resume", str(out / "checkpoint.safetensors"), "--max-steps", str(step + 5))
    assert summary["steps"] == step + 5


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize(
    "sig,to_group,workers",
    [(signal.SIGTERM, False, 0), (signal.SIGINT, True, 2), (signal.SIGTERM, True, 2)],
    ids=["sigterm", "ctrl-c-with-workers", "sigterm-to-the-group-with-workers"],
)
def test_a_signal_saves_one_checkpoint_and_exits_128_plus_its_number(tmp_path, sig, to_group, workers):
    """What a scheduler or container runtime sends (SIGTERM), or Ctrl-C in a terminal (SIGINT to the whole
    process group, DataLoader workers included): one checkpoint, one message, exit 143 / 130."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flow_models.train",
            "lenet",
            "--epochs",
            "500",
            "--no-progress",
            "--num-workers",
            str(workers),
            "--output",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        for line in proc.stdout:
            if line.startswith("epoch 1/"):
                break
        time.sleep(0.3)
        if to_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + int(sig), stderr
    assert stderr.count("saving a checkpoint") == 1, stderr
    assert "Traceback" not in stdout + stderr and "--resume" in stdout
    ckpt = flow.load(str(out / "checkpoint.safetensors"))
    assert ckpt["global_step"] >= 45 and ckpt["config"]["epochs"] == 500
    assert not [f for f in os.listdir(out) if ".tmp" in f]
    summary = train(
        tmp_path, "--resume", str(out / "checkpoint.safetensors"), "--max-steps", str(ckpt["global_step"] + 3)
    )
    assert summary["steps"] == ckpt["global_step"] + 3


def test_char_gpt_learns_below_the_unigram_entropy(tmp_path, capsys):
    """A short run of the character GPT on the CPython docs beats a model without context by far."""
    h = unigram_entropy(load_cpython_docs().train.ids)
    summary = train(
        tmp_path,
        "gpt2-char",
        "--dataset",
        "cpython-docs",
        "--max-steps",
        "120",
        "--model-arg",
        "n_layer=2",
        "--model-arg",
        "n_embd=64",
        "--model-arg",
        "block_size=64",
        "--sample",
        "--sample-length",
        "40",
        "--prompt",
        "The ",
    )
    loss = summary["test"]["loss"]
    print(f"char-gpt: test loss {loss:.3f} nats/char vs unigram entropy {h:.3f}")
    assert loss < h - 0.5
    assert summary["test"]["perplexity"] == pytest.approx(np.exp(loss), rel=1e-6)
    out = capsys.readouterr().out
    sample = out.split("-- sample --\n", 1)[1]
    assert sample.startswith("The ") and len(sample.rstrip("\n")) >= 40
    # flow-generate samples from the checkpoint alone, reproducibly
    ckpt = str(tmp_path / "run" / "checkpoint.safetensors")
    assert generate_main([ckpt, "--prompt", "def ", "--length", "30", "--seed", "1"]) == 0
    first = capsys.readouterr().out
    assert generate_main([ckpt, "--prompt", "def ", "--length", "30", "--seed", "1"]) == 0
    assert first == capsys.readouterr().out and first.startswith("def ") and len(first) >= 34


@pytest.mark.parametrize("model", ["dlrm-small", "wide-deep"])
def test_recommender_auc_on_the_planted_signal(tmp_path, model):
    summary = train(tmp_path, model, "--dataset", "synthetic-recsys", "--epochs", "1")
    print(f"{model}: test AUC {summary['test']['auc']:.3f}")
    assert summary["test"]["auc"] >= 0.75


def test_keyword_cnn_on_synthetic_speech(tmp_path):
    summary = train(tmp_path, "m5", "--dataset", "synthetic-speech", "--epochs", "2")
    assert summary["test"]["accuracy"] >= 0.90


def test_ctc_model_on_synthetic_speech(tmp_path):
    summary = train(tmp_path, "crnn-ctc", "--epochs", "1", "--data-arg", "utterances=600")
    assert summary["task"] == "ctc" and summary["test"]["token_error_rate"] < 0.5


def test_generate_refuses_a_classifier_checkpoint(tmp_path, capsys):
    train(tmp_path, "lenet", "--max-steps", "2")
    assert generate_main([str(tmp_path / "run" / "checkpoint.safetensors")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "language models" in err[0]


def test_graph_mode_trains_like_eager(tmp_path):
    if not hasattr(flow.nn, "Graph"):
        pytest.skip("this flow-core has no graph mode (flow.nn.Graph)")
    eager = train(tmp_path, "lenet", "--max-steps", "30", "--eager", name="eager")
    graph = train(tmp_path, "lenet", "--max-steps", "30", "--graph", name="graph")
    assert graph["steps"] == eager["steps"] == 30
    assert graph["test"]["loss"] == pytest.approx(eager["test"]["loss"], rel=1e-4, abs=1e-5)
    a, b = (weights(tmp_path / name / "checkpoint.safetensors") for name in ("eager", "graph"))
    assert all(np.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a)
