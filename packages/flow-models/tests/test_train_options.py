"""Every flow-train / flow-generate option and config key with a wrong value: a one-line error naming it, exit 2.

The tables below are checked against the parsers' own lists of options and TrainConfig's fields, so
an option added without a validation case here fails the suite. Every case runs in this process
with data loading and model building replaced by a failure: the errors must come from argument
parsing and the pre-flight checks, before any data is read or any model built.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import flow_models
from flow_models.train import build
from flow_models.train.cli import build_parser, main
from flow_models.train.config import TrainConfig
from flow_models.train.generate import build_parser as generate_parser
from flow_models.train.generate import main as generate_main
from flow_models.train.loop import EpochSampler
from flow_models.train.options import MAX_SEED, SETTINGS


def _garbage(p):
    (p / "garbage.safetensors").write_bytes(b"not a checkpoint" * 8)
    return str(p / "garbage.safetensors")


def _a_file(p, name="settings.json", text="{}"):
    (p / name).write_text(text)
    return str(p / name)


# option string -> cases: (extra argv, a fragment the error line must hold besides the option's name)
# (the model is lenet unless a case names another first)
BAD_FLAGS = {
    "model": [(lambda p: ["no-such-model"], "no model named 'no-such-model'")],
    "--list": [(lambda p: ["--list=yes"], "ignored explicit argument")],
    "--dataset": [
        (lambda p: ["--dataset", "nope"], "no dataset named 'nope'"),
        (lambda p: ["--dataset", "cpython-docs"], "cannot train on dataset 'cpython-docs'"),
        (lambda p: ["--dataset", " "], "must not be empty"),
    ],
    "--data-path": [
        (lambda p: ["--data-path", str(p / "missing")], "not found"),
        (lambda p: ["--data-path", str(p)], "reads no files"),
    ],
    "--data-arg": [
        (lambda p: ["--data-arg", "colour"], "expects KEY=VALUE"),
        (lambda p: ["--data-arg", "colour=red"], "has no option(s) colour"),
        (lambda p: ["--data-arg", "test_fraction=abc"], "'test_fraction' expects a number"),
    ],
    "--model-arg": [
        (lambda p: ["--model-arg", "=3"], "expects KEY=VALUE"),
        (lambda p: ["--model-arg", "depth=3"], "no config field(s) ['depth']"),
        (lambda p: ["--model-arg", "kernel_size=big"], "'kernel_size' expects an integer"),
    ],
    "--config": [
        (lambda p: ["--config", str(p / "missing.yaml")], "file not found"),
        (lambda p: ["--config", _a_file(p)], "must end in .yaml, .yml or .toml"),
    ],
    "--epochs": [
        (lambda p: ["--epochs", "0"], "must be an integer >= 1, got 0"),
        (lambda p: ["--epochs", "-3"], "got -3"),
        (lambda p: ["--epochs", "1.5"], "got 1.5"),
    ],
    "--batch-size": [(lambda p: ["--batch-size", "0"], "must be an integer >= 1")],
    "--eval-batch-size": [(lambda p: ["--eval-batch-size", "0"], "must be an integer >= 1")],
    "--lr": [
        (lambda p: ["--lr", "0"], "must be a number > 0"),
        (lambda p: ["--lr=-1e-3"], "> 0"),
        (lambda p: ["--lr", "nan"], "got nan"),
        (lambda p: ["--lr", "inf"], "got inf"),
    ],
    "--optimizer": [(lambda p: ["--optimizer", "rmsprop"], "one of sgd, adam, adamw")],
    "--weight-decay": [(lambda p: ["--weight-decay", "-1"], "must be a number >= 0, got -1")],
    "--momentum": [(lambda p: ["--momentum", "-0.1"], ">= 0 and < 1"), (lambda p: ["--momentum", "1"], "< 1")],
    "--scheduler": [(lambda p: ["--scheduler", "step"], "one of constant, cosine")],
    "--warmup-steps": [(lambda p: ["--warmup-steps", "-5"], "must be an integer >= 0, got -5")],
    "--grad-clip": [
        (lambda p: ["--grad-clip", "-1"], "must be a number > 0, got -1"),
        (lambda p: ["--grad-clip", "0"], "> 0"),
    ],
    "--max-steps": [(lambda p: ["--max-steps", "0"], "must be an integer >= 1")],
    "--profile": [(lambda p: ["--profile", "0"], "must be an integer >= 1")],
    "--eval-batches": [(lambda p: ["--eval-batches", "0"], "must be an integer >= 1, got 0")],
    "--seed": [
        (lambda p: ["--seed", "-1"], "must be an integer >= 0 and <= 2**64 - 1, got -1"),
        (lambda p: ["--seed", str(2**64)], "<= 2**64 - 1"),
    ],
    "--graph": [
        (lambda p: ["--graph=yes"], "ignored explicit argument"),
        (lambda p: ["--graph", "--eager"], "not allowed with argument"),
    ],
    "--eager": [(lambda p: ["--eager=no"], "ignored explicit argument")],
    "--dump-graph": [
        (lambda p: ["--dump-graph="], "must not be empty"),
        (lambda p: ["--dump-graph", str(p / "g")], "--dump-graph draws the compiled training step: add --graph"),
    ],
    "--amp": [(lambda p: ["--amp", "int8"], "one of bf16, fp16")],
    "--device": [
        (lambda p: ["--device", "cu:da"], "must be a device such as cpu"),
        (lambda p: ["--device", "tpu"], "is not available"),
    ],
    "--num-workers": [
        (lambda p: ["--num-workers", "-1"], "must be an integer >= 0 and <= 256, got -1"),
        (lambda p: ["--num-workers", "100000"], "<= 256"),
    ],
    "--threads": [(lambda p: ["--threads", "-1"], "must be an integer >= 0")],
    "--nproc": [(lambda p: ["--nproc", "0"], "must be an integer >= 1")],
    "--output": [
        (lambda p: ["--output", str(p / "{foo}")], "may only use the fields {model} and {dataset}"),
        (lambda p: ["--output", _a_file(p)], "is a file, not a folder"),
    ],
    "--resume": [
        (lambda p: ["--resume", str(p / "none.safetensors")], "file not found"),
        (lambda p: ["--resume", _garbage(p)], "garbage.safetensors"),
    ],
    "--log-every": [(lambda p: ["--log-every", "0"], "must be an integer >= 1, got 0")],
    "--tensorboard": [(lambda p: ["--tensorboard", "tb/{run}"], "may only use the fields")],
    "--no-progress": [(lambda p: ["--no-progress=1"], "ignored explicit argument")],
    "--sample": [(lambda p: ["--sample=1"], "ignored explicit argument")],
    "--prompt": [(lambda p: ["--prompt="], "must not be empty")],
    "--sample-length": [(lambda p: ["--sample-length", "0"], "must be an integer >= 1")],
    "--temperature": [
        (lambda p: ["--temperature", "-0.5"], "must be a number >= 0"),
        (lambda p: ["--temperature", "nan"], "got nan"),
    ],
    "--top-k": [(lambda p: ["--top-k", "0"], "must be an integer >= 1")],
}

# TrainConfig field -> a wrong value in a config file
BAD_CONFIG = {
    "model": 3,
    "dataset": ["digits"],
    "data_path": "/no/such/file",
    "epochs": 0,
    "batch_size": "many",
    "eval_batch_size": -2,
    "lr": -0.1,
    "optimizer": "rmsprop",
    "weight_decay": -1,
    "momentum": 1.5,
    "scheduler": "step",
    "warmup_steps": -5,
    "grad_clip": -1,
    "max_steps": 0,
    "profile": 0,
    "eval_batches": 0,
    "seed": -7,
    "graph": "maybe",
    "dump_graph": 5,
    "amp": "int8",
    "device": 0,
    "num_workers": -1,
    "threads": 2.5,
    "nproc": 0,
    "output": 5,
    "resume": "/no/such/checkpoint.safetensors",
    "log_every": 0,
    "tensorboard": 3,
    "progress": "sometimes",
    "sample": 2,
    "prompt": 7,
    "sample_length": 0,
    "temperature": float("nan"),
    "top_k": 0,
    "model_args": "wide",
    "data_args": [1, 2],
}

BAD_GENERATE = {
    "checkpoint": [
        (lambda p: [str(p / "none.safetensors")], "file not found"),
        (lambda p: [_garbage(p)], "garbage.safetensors"),
    ],
    "--prompt": [(lambda p: [_garbage(p), "--prompt="], "must not be empty")],
    "--length": [(lambda p: [_garbage(p), "--length", "0"], "must be an integer >= 1, got 0")],
    "--temperature": [(lambda p: [_garbage(p), "--temperature", "-1"], "must be a number >= 0")],
    "--top-k": [(lambda p: [_garbage(p), "--top-k", "0"], "must be an integer >= 1")],
    "--seed": [(lambda p: [_garbage(p), "--seed", "-1"], "must be an integer >= 0")],
    "--threads": [(lambda p: [_garbage(p), "--threads", "-2"], "must be an integer >= 0")],
}


def _options(parser) -> set[str]:
    names = set()
    for action in parser._actions:
        if "-h" in action.option_strings:
            continue
        names.update(action.option_strings or [action.dest])
    return names


def _cases(table):
    return [(opt, k) for opt, cases in table.items() for k in range(len(cases))]


@pytest.fixture
def nothing_is_built(monkeypatch):
    """Fail loudly if a case gets as far as reading data or building a model."""

    def refuse(*a, **k):
        raise AssertionError("an option error was only found after loading data / building the model")

    monkeypatch.setattr(build, "load_data", refuse)
    monkeypatch.setattr(build, "build_model", refuse)
    monkeypatch.setattr(flow_models.registry, "create", refuse)


def _one_line(capsys, code: int, prog: str) -> str:
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and not out, err + out
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, lines[0]
    return lines[0]


def test_every_flow_train_option_has_a_validation_case():
    assert _options(build_parser()) == set(BAD_FLAGS), "add a wrong-value case for each new flow-train option"


def test_every_setting_is_declared_and_has_a_config_case():
    assert set(SETTINGS) == set(TrainConfig.field_names())
    assert set(BAD_CONFIG) == set(TrainConfig.field_names()), "add a wrong-value case for each new setting"


def test_the_readme_lists_every_setting():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    missing = [name for name in SETTINGS if f"| `{name}` |" not in readme]
    assert not missing, f"document the range of {missing} in packages/flow-models/README.md"


def test_every_flow_generate_option_has_a_validation_case():
    assert _options(generate_parser()) == set(BAD_GENERATE)


@pytest.mark.parametrize("option,k", _cases(BAD_FLAGS), ids=[f"{o}-{k}" for o, k in _cases(BAD_FLAGS)])
def test_a_wrong_flag_is_a_one_line_usage_error(tmp_path, capsys, monkeypatch, nothing_is_built, option, k):
    monkeypatch.chdir(tmp_path)
    make_args, fragment = BAD_FLAGS[option][k]
    args = make_args(tmp_path)
    if option != "model":
        args = ["lenet", *args]
    line = _one_line(capsys, main([*args, "--no-progress"] if "--no-progress" not in option else args), "flow-train")
    if option != "model":
        assert option in line, line
    assert fragment in line, line


@pytest.mark.parametrize("key", sorted(BAD_CONFIG))
def test_a_wrong_config_value_is_a_one_line_usage_error(tmp_path, capsys, monkeypatch, nothing_is_built, key):
    monkeypatch.chdir(tmp_path)
    values = {"model": "lenet", "output": str(tmp_path / "run"), "progress": False, key: BAD_CONFIG[key]}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(values))
    line = _one_line(capsys, main(["--config", str(path)]), "flow-train")
    assert f"config file '{path}'" in line and f"setting '{key}'" in line, line


@pytest.mark.parametrize("option,k", _cases(BAD_GENERATE), ids=[f"{o}-{k}" for o, k in _cases(BAD_GENERATE)])
def test_a_wrong_flow_generate_option_is_a_one_line_usage_error(tmp_path, capsys, nothing_is_built, option, k):
    make_args, fragment = BAD_GENERATE[option][k]
    line = _one_line(capsys, generate_main(make_args(tmp_path)), "flow-generate")
    assert fragment in line and (option == "checkpoint" or option in line), line


def test_boundary_values_are_accepted():
    args = build_parser().parse_args(
        [
            "lenet",
            "--momentum",
            "0",
            "--temperature",
            "0",
            "--warmup-steps",
            "0",
            "--seed",
            str(MAX_SEED),
            "--num-workers",
            "0",
            "--threads",
            "0",
            "--weight-decay",
            "0",
            "--lr",
            "1e-9",
        ]
    )
    assert (args.momentum, args.temperature, args.warmup_steps, args.seed) == (0.0, 0.0, 0, MAX_SEED)
    assert build_parser().parse_args(["lenet", "--seed", "0", "--epochs", "1"]).epochs == 1


def test_help_shows_the_ranges(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "clip the gradients' global norm to this (a number > 0)" in text
    assert "(an integer >= 1)" in text and "one of sgd, adam, adamw" in text


def test_every_seed_gives_its_own_order():
    """Negative seeds used to collapse onto one order; seeds are now 0 .. 2**64 - 1, each its own."""
    seeds = [0, 1, 2, 2**63 - 1, 2**63, MAX_SEED]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "invalid value encountered in cast"
        orders = {tuple(EpochSampler(50, s).order()) for s in seeds}
    assert len(orders) == len(seeds)
    assert sorted(EpochSampler(50, MAX_SEED).order()) == list(range(50))
    for bad in (-1, MAX_SEED + 1, 1.5, True):
        with pytest.raises(ValueError, match="seed must be an integer"):
            EpochSampler(10, bad)


def test_a_prompt_outside_the_vocabulary_is_refused_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(build, "build_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("built")))
    code = main(
        [
            "gpt2-char",
            "--sample",
            "--prompt",
            "naïve ☃",
            "--data-arg",
            "max_chars=20000",
            "--output",
            str(tmp_path),
            "--no-progress",
        ]
    )
    line = _one_line(capsys, code, "flow-train")
    assert "--prompt" in line and "☃" in line and "vocabulary of dataset 'cpython-docs'" in line


def test_evaluation_of_nothing_is_nan_not_zero():
    from flow_models.train.tasks import make_task

    for task in ("classification", "lm", "ctc"):
        result = make_task(task).result(make_task(task).new_state())
        assert all(np.isnan(v) for v in result.values()), (task, result)
