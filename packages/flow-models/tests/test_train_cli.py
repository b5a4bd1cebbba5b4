"""flow-train's command line: --list, settings from files and flags, and one-line errors (never a traceback)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

import flow
from flow_models.train.cli import main
from flow_models.train.config import TrainError, load_config_file, resolve_config


def run_cli(*args: str, cwd=None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("FLOW_TRAIN_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "flow_models.train", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("flow-train: "), lines[0]
    for frag in fragments:
        assert frag in lines[0], lines[0]
    return lines[0]


def test_console_scripts_are_installed():
    assert shutil.which("flow-train") and shutil.which("flow-generate")


def test_list_shows_models_and_datasets_one_line_each():
    proc = run_cli("--list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    names = {line.split()[0] for line in lines if line.startswith("  ")}
    assert {
        "lenet",
        "gpt2-char",
        "dlrm",
        "m5",
        "digits",
        "cpython-docs",
        "synthetic-recsys",
        "synthetic-speech",
        "mnist",
        "criteo",
    } <= names
    assert "models:" in lines and "datasets:" in lines
    digits = next(line for line in lines if line.split()[:1] == ["digits"])
    assert "vision" in digits and "8x8" in digits


def _bad_text(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\xfa not utf-8")
    return str(tmp_path / "bad.txt")


def _bad_yaml(tmp_path):
    (tmp_path / "c.yaml").write_text("epochs: [1, 2\n")
    return str(tmp_path / "c.yaml")


def _unknown_key(tmp_path):
    (tmp_path / "c.toml").write_text("epochs = 1\nlearning_rate = 0.1\n")
    return str(tmp_path / "c.toml")


def _not_a_checkpoint(tmp_path):
    (tmp_path / "ckpt.safetensors").write_bytes(b"garbage" * 10)
    return str(tmp_path / "ckpt.safetensors")


ERRORS = [
    (lambda p: ["lenet", "--bogus"], ["unrecognized arguments: --bogus"]),
    (lambda p: ["no-such-model"], ["no model named 'no-such-model'"]),
    (lambda p: ["lenet", "--dataset", "digitz"], ["no dataset named 'digitz'", "digits"]),
    (lambda p: ["lenet", "--epochs", "two"], ["argument --epochs", "must be an integer >= 1, got two"]),
    (lambda p: ["lenet", "--epochs", "0"], ["argument --epochs", "must be an integer >= 1, got 0"]),
    (lambda p: ["lenet", "--optimizer", "rmsprop"], ["--optimizer", "one of sgd, adam, adamw, got rmsprop"]),
    (lambda p: [], ["no model given"]),
    (lambda p: ["lenet-mnist", "--data-path", str(p)], ["train-images-idx3-ubyte", "not found"]),
    (lambda p: ["gpt2-char", "--dataset", "text-file", "--data-path", _bad_text(p)], ["bad.txt", "not utf-8"]),
    (lambda p: ["gpt2-char", "--dataset", "text-file"], ["needs 'path'", "--data-path"]),
    (lambda p: ["lenet", "--data-arg", "colour=red"], ["has no option(s) colour"]),
    (lambda p: ["lenet", "--model-arg", "depth=3"], ["no config field(s) ['depth']"]),
    (lambda p: ["lenet", "--config", _bad_yaml(p)], ["c.yaml", "not valid YAML"]),
    (lambda p: ["lenet", "--config", _unknown_key(p)], ["unknown setting(s) learning_rate"]),
    (lambda p: ["lenet", "--config", str(p / "missing.yaml")], ["argument --config", "file not found"]),
    (lambda p: ["lenet", "--resume", _not_a_checkpoint(p)], ["ckpt.safetensors"]),
    (lambda p: ["lenet", "--resume", str(p / "none.safetensors")], ["argument --resume", "file not found"]),
]


# a few through a real process (nothing escapes as a traceback at the interpreter's level), the rest in-process
IN_SUBPROCESS = {0, 1, 8, 15}


@pytest.mark.parametrize("case", range(len(ERRORS)), ids=[" ".join(e[1])[:40] for e in ERRORS])
def test_user_errors_are_one_line_and_non_zero(tmp_path, capsys, case):
    make_args, fragments = ERRORS[case]
    args = [*make_args(tmp_path), "--output", str(tmp_path / "run"), "--no-progress"]
    if case in IN_SUBPROCESS:
        assert_one_line_error(run_cli(*args), *fragments)
        return
    code = main(args)
    out, err = capsys.readouterr()
    assert_one_line_error(subprocess.CompletedProcess(args, code, out, err), *fragments)


def test_graph_mode_when_missing(tmp_path):
    if hasattr(flow.nn, "Graph"):
        pytest.skip("this flow-core has graph mode")
    line = assert_one_line_error(run_cli("lenet", "--graph", "--output", str(tmp_path)), "flow.nn.Graph")
    assert "--eager" in line


def test_amp_when_flow_amp_is_missing(tmp_path):
    if importlib.util.find_spec("flow_amp") is not None:
        spec_ok = hasattr(importlib.import_module("flow_amp"), "autocast")
        if spec_ok:
            pytest.skip("flow-amp with autocast is installed")
    assert_one_line_error(run_cli("lenet", "--amp", "bf16", "--output", str(tmp_path)), "--amp", "flow-amp")


def test_cuda_when_flow_cuda_is_missing(tmp_path):
    from flow.registry import get_device_type

    try:
        get_device_type("cuda")
        pytest.skip("a cuda device is registered")
    except Exception:
        pass
    assert_one_line_error(run_cli("lenet", "--device", "cuda", "--output", str(tmp_path)), "--device cuda", "flow-cuda")


def test_help_and_console_script_exit_zero():
    proc = subprocess.run(["flow-train", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--dataset" in proc.stdout and "--resume" in proc.stdout


# -- settings -------------------------------------------------------------------------------------------
def test_layers_of_settings(tmp_path):
    (tmp_path / "c.yaml").write_text("epochs: 3\nbatch-size: 16\nlr: '0.05'\nmodel_args: {activation: relu}\n")
    values = load_config_file(str(tmp_path / "c.yaml"))
    cfg = resolve_config("lenet", "vision", values, {"batch_size": 8, "model_args": {"pool": "max"}})
    assert (cfg.epochs, cfg.batch_size, cfg.lr) == (3, 8, 0.05)  # file over model defaults, flags over file
    assert cfg.optimizer == "adam" and cfg.dataset == "digits"  # lenet's own defaults
    assert cfg.model_args == {"activation": "relu", "pool": "max"}
    (tmp_path / "c.toml").write_text("[train]\nepochs = 2\noptimizer = 'sgd'\n")
    cfg = resolve_config("gpt2-char", "nlp", load_config_file(str(tmp_path / "c.toml")), {})
    assert (cfg.epochs, cfg.optimizer, cfg.dataset) == (2, "sgd", "cpython-docs")
    with pytest.raises(TrainError, match=r"setting 'epochs' \(--epochs\) must be an integer >= 1, got many"):
        resolve_config("lenet", "vision", {"epochs": "many"}, {})


def test_config_file_run_with_flag_override(tmp_path, capsys):
    (tmp_path / "run.toml").write_text(
        f"model = 'lenet'\nmax_steps = 5\nepochs = 1\noutput = '{tmp_path / 'out'}'\nprogress = false\nlog_every = 1\n"
    )
    assert main(["--config", str(tmp_path / "run.toml"), "--max-steps", "3"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["model"] == "lenet"
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3]
    assert "test accuracy:" in capsys.readouterr().out
