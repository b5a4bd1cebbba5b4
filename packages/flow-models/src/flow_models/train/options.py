"""flow-train's settings, each declared once with its type and valid range.

The command line converts every flag through its :class:`Setting` (a value out of range is a
one-line ``flow-train: error: argument --grad-clip: must be a number > 0, got -1``, exit status 2),
and :meth:`TrainConfig.validate` applies the same declarations to values from config files,
resumed checkpoints and code. ``flow-train --help`` and the README show the ranges.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Setting",
    "SETTINGS",
    "OPTIMIZERS",
    "SCHEDULERS",
    "AMP_DTYPES",
    "AMP_CHOICES",
    "MAX_SEED",
    "parse_assignment",
    "SettingError",
    "existing_file",
]

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULERS = ("constant", "cosine")
AMP_DTYPES = ("bf16", "fp16")  # the low-precision dtypes of --amp
AMP_CHOICES = (*AMP_DTYPES, "none")  # "none" (also "off"): float32 throughout, the default
MAX_SEED = 2**64 - 1  # seeds are 64-bit keys of the Philox generator that orders the samples
MAX_WORKERS = 256  # more DataLoader processes than any machine gains from; a typo (-n 1000) would fork-bomb
OUTPUT_FIELDS = ("model", "dataset")
_DEVICE = re.compile(r"[a-z][a-z0-9_]*(:[0-9]+)?")


class SettingError(ValueError):
    """A value a setting does not accept; the message says what it expects (``must be ..., got ...``)."""


@dataclass(frozen=True)
class Setting:
    """One setting of flow-train: the TrainConfig field ``name`` and the flag ``--name-with-dashes``.

    ``kind`` is int, float, str, bool or dict; ``low`` / ``high`` bound numbers (``*_open``: the bound
    itself excluded); ``choices`` lists the values of a str, ``aliases`` pairs other spellings with one
    of them (``("off", "none")``); ``optional``: ``None`` means unset; ``rule`` is an extra check
    returning what is wrong, value included (or None); ``rule_doc`` says the rule in ``--help``.
    """

    name: str
    kind: type
    help: str = ""
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    aliases: tuple[tuple[str, str], ...] = ()  # pairs, not a dict: a frozen Setting stays hashable
    optional: bool = False
    rule: Callable[[Any], str | None] | None = None
    rule_doc: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def describe(self) -> str:
        """What the setting accepts, in words: ``an integer >= 1``, ``one of sgd, adam, adamw``."""
        if self.choices:
            also = "".join(f"; {a} means {c}" for a, c in self.aliases)
            return f"one of {', '.join(self.choices)}{also}"
        noun = {
            int: "an integer",
            float: "a number",
            str: "text",
            bool: "true or false",
            dict: "a mapping of KEY: VALUE",
        }[self.kind]
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_num(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {_num(self.high)}")
        if self.rule_doc:
            parts.append(self.rule_doc)
        return " ".join([noun, " and ".join(parts)]) if parts else noun

    def convert(self, value: Any) -> Any:
        """``value`` (a flag's text, or any value from a config file or code) as this setting's type,
        checked against its range; raises :class:`SettingError` saying what it expects."""
        if value is None:
            if self.optional:
                return None
            raise SettingError(f"must be {self.describe()}, got nothing")
        converted = _CONVERT[self.kind](value)
        if self.aliases and isinstance(converted, str):
            converted = dict(self.aliases).get(converted, converted)
        if converted is _BAD:
            raise SettingError(f"must be {self.describe()}, got {_show(value)}")
        if self.choices and converted not in self.choices:
            raise SettingError(f"must be {self.describe()}, got {_show(value)}")
        if self.low is not None and (converted <= self.low if self.low_open else converted < self.low):
            raise SettingError(f"must be {self.describe()}, got {_show(value)}")
        if self.high is not None and (converted >= self.high if self.high_open else converted > self.high):
            raise SettingError(f"must be {self.describe()}, got {_show(value)}")
        if self.rule is not None:
            why = self.rule(converted)
            if why:
                raise SettingError(why)
        return converted

    def parse_flag(self, text: str) -> Any:
        """argparse's ``type=``: the flag's text converted, or argparse's one-line error."""
        try:
            return self.convert(text)
        except SettingError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    def flag_help(self) -> str:
        return f"{self.help} ({self.describe()})" if self.help else self.describe()


_BAD = object()


def _num(x: float) -> str:
    if isinstance(x, int) and x > 2**32 and (x + 1) & x == 0:  # 2**64 - 1 rather than its 20 digits
        return f"2**{(x + 1).bit_length() - 1} - 1"
    return str(x) if isinstance(x, int) else f"{x:g}"


def _show(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else (value if value.strip() and " " not in value else repr(value))


def _to_int(v: Any) -> Any:
    if isinstance(v, bool):
        return _BAD
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else _BAD
    if isinstance(v, str):
        try:
            return int(v.strip().replace("_", ""), 10)
        except ValueError:
            return _BAD
    return _BAD


def _to_float(v: Any) -> Any:
    if isinstance(v, bool):
        return _BAD
    if isinstance(v, (int, float)):
        out = float(v)
    elif isinstance(v, str):
        try:
            out = float(v)
        except ValueError:
            return _BAD
    else:
        return _BAD
    return out if math.isfinite(out) else _BAD


def _to_bool(v: Any) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "yes", "no", "1", "0", "on", "off"):
        return v.strip().lower() in ("true", "yes", "1", "on")
    return _BAD


def _to_str(v: Any) -> Any:
    return v if isinstance(v, str) else _BAD


def _to_dict(v: Any) -> Any:
    if isinstance(v, Mapping) and all(isinstance(k, str) and k for k in v):
        return dict(v)
    return _BAD


_CONVERT = {int: _to_int, float: _to_float, bool: _to_bool, str: _to_str, dict: _to_dict}


# -- extra rules ------------------------------------------------------------------------------------------
def _non_empty(v: str) -> str | None:
    return None if v.strip() else "must not be empty"


def _some_text(v: str) -> str | None:
    return None if v else "must not be empty (the default is a newline)"


def _device(v: str) -> str | None:
    return None if _DEVICE.fullmatch(v) else f"must be a device such as cpu, cuda or cuda:1, got {_show(v)}"


def _output(v: str) -> str | None:
    if not v.strip():
        return "must name a folder, got ''"
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(v) if f is not None}
    except ValueError as e:
        return f"is not a valid folder template ({e}): {_show(v)}"
    bad = sorted(f for f in fields if f not in OUTPUT_FIELDS)
    if bad:
        return (
            f"may only use the fields {{model}} and {{dataset}}, not "
            f"{', '.join('{' + f + '}' for f in bad)}: {_show(v)}"
        )
    return None


def existing_file(v: str) -> str | None:
    """A rule: ``v`` names an existing file."""
    if os.path.isdir(v):
        return f"must be a file, not a folder: {_show(v)}"
    return None if os.path.isfile(v) else f"file not found: {_show(v)}"


def _existing_path(v: str) -> str | None:
    return None if os.path.exists(v) else f"file or folder not found: {_show(v)}"


def parse_assignment(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of --data-arg / --model-arg, as argparse's ``type=`` (the value is read later, as YAML)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expects KEY=VALUE, got {_show(text)}")
    return key.strip().replace("-", "_"), value


_S = Setting
SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        _S("model", str, "model name (see --list)", rule=_non_empty, rule_doc="naming a registered model"),
        _S(
            "dataset",
            str,
            "dataset name (default: the model's usual dataset)",
            optional=True,
            rule=_non_empty,
            rule_doc="naming a registered dataset the model can train on",
        ),
        _S(
            "data_path",
            str,
            "file or folder of a file-based dataset (mnist, cifar10, text-file, criteo...)",
            optional=True,
            rule=_existing_path,
            rule_doc="naming an existing file or folder",
        ),
        _S("epochs", int, "passes over the training set", low=1),
        _S("batch_size", int, "samples per optimizer step", low=1),
        _S("eval_batch_size", int, "samples per evaluation batch (default: twice --batch-size)", low=1, optional=True),
        _S("lr", float, "learning rate", low=0, low_open=True),
        _S("optimizer", str, "optimizer", choices=OPTIMIZERS),
        _S("weight_decay", float, "weight decay (decoupled for adamw)", low=0),
        _S("momentum", float, "SGD momentum", low=0, high=1, high_open=True),
        _S("scheduler", str, "learning-rate schedule after the warm-up", choices=SCHEDULERS),
        _S("warmup_steps", int, "steps of linear learning-rate warm-up", low=0),
        _S("grad_clip", float, "clip the gradients' global norm to this", low=0, low_open=True, optional=True),
        _S("max_steps", int, "stop (with a checkpoint) after this many steps in total", low=1, optional=True),
        _S("profile", int, "profile this many steps after a warm-up step (trace in the run dir)", low=1, optional=True),
        _S("eval_batches", int, "evaluate on at most this many test batches", low=1, optional=True),
        _S("seed", int, "seed of the initial weights and of the sample order", low=0, high=MAX_SEED),
        _S("graph", bool, "compile the training step with flow.nn.Graph"),
        _S(
            "dump_graph",
            str,
            "write the compiled step's graph to this folder: graph.svg (needs Graphviz's dot), graph.dot, graph.txt",
            optional=True,
            rule=_non_empty,
            rule_doc="naming a folder",
        ),
        _S(
            "amp",
            str,
            "mixed precision: the forward pass in bfloat16 or float16, float32 master weights (needs flow-amp)",
            choices=AMP_CHOICES,
            aliases=(("off", "none"),),
        ),
        _S(
            "device",
            str,
            "cpu (default), cuda, cuda:1... (cuda needs the flow-cuda plugin)",
            rule=_device,
            rule_doc="such as cpu or cuda:1",
        ),
        _S("num_workers", int, "DataLoader worker processes", low=0, high=MAX_WORKERS),
        _S("threads", int, "BLAS/OpenMP threads (0 leaves the libraries' default)", low=0, high=1024),
        _S("nproc", int, "processes to train on, data parallel (needs flow-dist with MPI)", low=1, high=1024),
        _S("output", str, "run folder; {model} and {dataset} are filled in", rule=_output, rule_doc="naming a folder"),
        _S(
            "resume",
            str,
            "continue from a checkpoint written by flow-train",
            optional=True,
            rule=existing_file,
            rule_doc="naming an existing checkpoint file",
        ),
        _S("log_every", int, "steps between training-loss records in metrics.jsonl", low=1),
        _S(
            "tensorboard",
            str,
            "also write the metrics and the graph as TensorBoard event files here; {model} and {dataset} are filled in",
            optional=True,
            rule=_output,
            rule_doc="naming a folder",
        ),
        _S("progress", bool, "show a progress bar"),
        _S("sample", bool, "print text sampled from the model at the end (language models)"),
        _S("prompt", str, "text the sample starts from", rule=_some_text, rule_doc="that is not empty"),
        _S("sample_length", int, "tokens to sample", low=1),
        _S("temperature", float, "sampling temperature (0 picks the most likely token)", low=0),
        _S("top_k", int, "sample from the k most likely tokens only", low=1, optional=True),
        _S("model_args", dict, "model config overrides"),
        _S("data_args", dict, "dataset options"),
    )
}
