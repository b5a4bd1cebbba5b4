"""flow-train's settings: built-in defaults < per-model defaults < config file (YAML/TOML) < command-line flags.

Every value, wherever it comes from, is checked against its declaration in
:mod:`flow_models.train.options` (type and range); a wrong one is a :class:`TrainError` naming the
setting and where it came from.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from flow.errors import FlowError
from flow_models.train.options import SETTINGS, SettingError

__all__ = [
    "TrainConfig",
    "TrainError",
    "MODEL_DEFAULTS",
    "FAMILY_DEFAULTS",
    "load_config_file",
    "resolve_config",
    "parse_assignments",
    "check_settings",
]


class TrainError(FlowError):
    """A user error of flow-train (bad setting, missing feature); its message is the one line printed."""


@dataclass
class TrainConfig:
    """Everything one training run needs; ``flow-train --help`` documents each field's flag."""

    model: str = ""
    dataset: str | None = None
    epochs: int = 10
    batch_size: int = 64
    eval_batch_size: int | None = None
    lr: float = 1e-3
    optimizer: str = "adam"
    weight_decay: float = 0.0
    momentum: float = 0.9
    scheduler: str = "constant"
    warmup_steps: int = 0
    grad_clip: float | None = None
    max_steps: int | None = None  # stop after this many optimizer steps in total (short runs, smoke tests)
    profile: int | None = None  # profile this many steps after a warm-up one (flow_models.train.profiling)
    eval_batches: int | None = None  # evaluate on at most this many test batches
    graph: bool = False
    dump_graph: str | None = None  # with --graph: the folder the compiled step's picture goes to
    amp: str = "none"  # "bf16" / "fp16": mixed precision through flow-amp (flow_models.train.amp)
    device: str = "cpu"
    output: str = "runs/{model}-{dataset}"
    resume: str | None = None
    seed: int = 0
    num_workers: int = 0
    threads: int = 1  # BLAS / OpenMP threads; 0 keeps the libraries' own default (see limit_threads)
    nproc: int = 1  # data-parallel processes (flow_models.train.parallel)
    log_every: int = 10
    tensorboard: str | None = None  # TensorBoard event files folder (flow_models.train.tensorboard)
    progress: bool = True
    sample: bool = False
    prompt: str = "\n"
    sample_length: int = 300
    temperature: float = 0.8
    top_k: int | None = None
    data_path: str | None = None  # the file or folder of file-based datasets (mnist, criteo, text-file...)
    model_args: dict = field(default_factory=dict)
    data_args: dict = field(default_factory=dict)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def validate(self) -> None:
        """Check (and normalise: ``"0.1"`` -> 0.1) every field against its declared type and range."""
        for name, value in check_settings(self.to_dict(), "").items():
            setattr(self, name, value)

    def output_dir(self) -> str:
        return self.output.format(model=self.model, dataset=self.dataset or "data")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Per-model training defaults, so that `flow-train MODEL` alone trains well on the model's usual data.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "lenet": {
        "dataset": "digits",
        "epochs": 15,
        "batch_size": 32,
        "lr": 1e-2,
        "optimizer": "adam",
        "scheduler": "cosine",
    },
    "lenet-mnist": {"dataset": "mnist", "epochs": 5, "batch_size": 64, "lr": 1e-3, "optimizer": "adam"},
    # about 5 minutes on two cores to a test loss near 1.75 nats/char (unigram entropy: 3.25)
    "gpt2-char": {
        "dataset": "cpython-docs",
        "epochs": 3,
        "batch_size": 16,
        "lr": 3e-3,
        "optimizer": "adamw",
        "weight_decay": 0.01,
        "scheduler": "cosine",
        "warmup_steps": 20,
        "grad_clip": 1.0,
        "eval_batches": 8,
    },
    "dlrm": {"dataset": "synthetic-recsys", "epochs": 3, "batch_size": 128, "lr": 3e-3, "optimizer": "adam"},
    "dlrm-small": {"dataset": "synthetic-recsys", "epochs": 3, "batch_size": 128, "lr": 3e-3, "optimizer": "adam"},
    "wide-deep": {"dataset": "synthetic-recsys", "epochs": 3, "batch_size": 128, "lr": 3e-3, "optimizer": "adam"},
    # a CPU-sized variant of the acoustic model (64-channel front-end, 2 x 64 BiGRU); --model-arg changes it
    "crnn-ctc": {
        "dataset": "synthetic-speech-ctc",
        "epochs": 5,
        "batch_size": 32,
        "lr": 3e-3,
        "optimizer": "adam",
        "grad_clip": 5.0,
        "model_args": {"conv_channels": [64, 64], "rnn_hidden": 64, "rnn_layers": 2},
    },
    "m5": {
        "dataset": "synthetic-speech",
        "epochs": 4,
        "batch_size": 32,
        "lr": 3e-3,
        "optimizer": "adam",
        "scheduler": "cosine",
    },
}
# ... and per family, for models without their own line.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "vision": {"dataset": "digits", "epochs": 10, "batch_size": 64, "lr": 1e-3, "optimizer": "adam"},
    "nlp": {
        "dataset": "cpython-docs",
        "epochs": 1,
        "batch_size": 32,
        "lr": 1e-3,
        "optimizer": "adamw",
        "grad_clip": 1.0,
        "eval_batches": 8,
    },
    "recsys": {"dataset": "synthetic-recsys", "epochs": 3, "batch_size": 128, "lr": 3e-3, "optimizer": "adam"},
    "speech": {"dataset": "synthetic-speech", "epochs": 10, "batch_size": 32, "lr": 3e-3, "optimizer": "adam"},
}


def _normalise_key(key: str) -> str:
    return key.strip().replace("-", "_")


def load_config_file(path: str) -> dict:
    """A YAML (.yaml/.yml) or TOML (.toml) file of settings, as a dict with underscore keys."""
    ext = os.path.splitext(path)[1].lower()
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TrainError(f"cannot read config file '{path}': {e.strerror or e}") from None
    try:
        if ext in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw.decode("utf-8")) or {}
        elif ext == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            raise TrainError(f"config file '{path}' must end in .yaml, .yml or .toml")
    except TrainError:
        raise
    except Exception as e:  # yaml.YAMLError, tomllib.TOMLDecodeError, UnicodeDecodeError
        msg = " ".join(str(e).split())
        raise TrainError(f"config file '{path}' is not valid {ext[1:].upper()}: {msg}") from None
    if not isinstance(data, dict):
        raise TrainError(f"config file '{path}' must hold a mapping of settings, not {type(data).__name__}")
    if isinstance(data.get("train"), dict):  # a [train] table / train: section is accepted too
        data = {**{k: v for k, v in data.items() if k != "train"}, **data["train"]}
    out = {_normalise_key(k): v for k, v in data.items()}
    valid = TrainConfig.field_names()
    unknown = sorted(k for k in out if k not in valid)
    if unknown:
        raise TrainError(
            f"config file '{path}': unknown setting(s) {', '.join(unknown)}; valid settings: {', '.join(valid)}"
        )
    return check_settings(out, f"config file '{path}': ")


def check_settings(values: dict, where: str) -> dict:
    """``values`` (setting name -> value) converted by their declarations; a wrong one raises a TrainError
    that starts with ``where`` and names the setting (its flag too)."""
    out = {}
    for name, value in values.items():
        setting = SETTINGS[name]
        try:
            out[name] = setting.convert(value)
        except SettingError as e:
            flag = f" ({setting.flag})" if setting.kind is not dict and name != "model" else ""
            raise TrainError(f"{where}setting '{name}'{flag} {e}") from None
    return out


def parse_assignments(items: list | None, what: str) -> dict:
    """``["k=v", ...]`` or ``[("k", "v"), ...]`` -> ``{k: v}`` with values read as YAML scalars (numbers,
    booleans, lists)."""
    import yaml

    from flow_models.train.options import parse_assignment

    out = {}
    for item in items or []:
        if isinstance(item, str):
            try:
                item = parse_assignment(item)
            except Exception as e:
                raise TrainError(f"{what} {e}") from None
        key, value = item
        try:
            out[key] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key] = value
    return out


def resolve_config(model: str, family: str | None, file_values: dict, flag_values: dict) -> TrainConfig:
    """Merge the layers of settings into a validated :class:`TrainConfig`."""
    merged: dict[str, Any] = {}
    merged.update(FAMILY_DEFAULTS.get(family or "", {}))
    merged.update(MODEL_DEFAULTS.get(model, {}))
    for layer in (file_values, flag_values):
        for k, v in layer.items():
            if k in ("model_args", "data_args"):
                merged[k] = {**merged.get(k, {}), **v}
            elif v is not None:
                merged[k] = v
    merged["model"] = model
    cfg = TrainConfig(**merged)
    cfg.validate()
    return cfg
