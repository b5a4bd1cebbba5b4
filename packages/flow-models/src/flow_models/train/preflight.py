"""What flow-train checks before it reads any data or builds any model.

:func:`preflight` validates the settings, finds the model and the dataset, checks the dataset's
options and the model's config overrides (names and types), and checks that the model can consume
what the dataset produces, from their declarations (:mod:`flow_models.dataspec`); every failure is
one :class:`TrainError` naming the flag, the model and the dataset. :func:`check_loaded` then
holds the loaded data to its declaration.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass
from typing import Any

from flow_models import registry as zoo
from flow_models.dataspec import DataSpec, fitted_model_args, mismatch, sample_mismatch
from flow_models.train import build
from flow_models.train.config import TrainConfig, TrainError

__all__ = ["Plan", "preflight", "check_loaded", "fitted_config", "compatible_datasets"]


@dataclass
class Plan:
    """What preflight found: the dataset's keyword arguments, both declarations, the fitted model config."""

    dataset_kwargs: dict
    data_spec: DataSpec | None
    model_spec: DataSpec | None
    model_config: Any


def preflight(cfg: TrainConfig, saved_model_config: dict | None = None) -> Plan:
    """Check ``cfg`` all through, reading no data and building no model (a resumed run passes the
    checkpoint's model config, which the model is rebuilt from)."""
    cfg.validate()
    model = zoo.model_info(cfg.model)
    build.check_features(cfg)
    if not cfg.dataset:
        raise TrainError(f"no dataset given for model '{cfg.model}'; pass --dataset NAME (see flow-train --list)")
    try:
        dataset = zoo.dataset_info(cfg.dataset)
    except zoo.UnknownNameError as e:
        raise TrainError(f"--dataset {cfg.dataset}: {e}") from None
    kwargs = build.dataset_kwargs(cfg, dataset.factory)
    _check_types(kwargs, _hints(dataset.factory), f"--data-arg: dataset '{cfg.dataset}' option")
    try:
        data_spec = dataset.output_spec(**kwargs)
    except (ValueError, TypeError) as e:
        raise TrainError(f"--data-arg: dataset '{cfg.dataset}': {e}") from None
    config = fitted_config(cfg, model, data_spec, saved_model_config)
    try:
        model_spec = model.input_spec(config)
    except (ValueError, TypeError) as e:
        raise TrainError(
            f"--dataset {cfg.dataset}: model '{cfg.model}' cannot train on dataset '{cfg.dataset}': {e}"
        ) from None
    if data_spec is not None and model_spec is not None:
        why = mismatch(data_spec, model_spec)
        if why:
            raise TrainError(_pair_message(cfg, why, model_spec, data_spec))
    _check_output(cfg)
    return Plan(kwargs, data_spec, model_spec, config)


def fitted_config(
    cfg: TrainConfig, model: zoo.ModelEntry, data_spec: DataSpec | None, saved_model_config: dict | None = None
):
    """The model's config as flow-train will build it: fitted to what the data declares, then --model-arg."""
    if saved_model_config is not None:
        overrides = dict(saved_model_config)
    else:
        overrides = build.model_overrides(cfg, fitted_model_args(data_spec) if data_spec else {})
    _check_types(cfg.model_args, _field_hints(model.config_cls), f"--model-arg: model '{cfg.model}' config field")
    try:
        return model.make_config(None, overrides)
    except zoo.ConfigError as e:
        raise TrainError(f"--model-arg: {e}") from None


def compatible_datasets(model_name: str, model_args: dict | None = None) -> list[str]:
    """The registered datasets (with default options) whose declaration the model can consume."""
    model = zoo.model_info(model_name)
    out = []
    for name in zoo.list_datasets():
        try:
            data_spec = zoo.dataset_info(name).output_spec()
            overrides = {**build.fit_fields(model.field_names(), fitted_model_args(data_spec)), **(model_args or {})}
            model_spec = model.input_spec(model.make_config(None, overrides))
        except Exception:  # a declaration that needs options, or a config the data makes impossible
            continue
        if data_spec is not None and model_spec is not None and mismatch(data_spec, model_spec) is None:
            out.append(name)
    return out


def _pair_message(cfg: TrainConfig, why: str, model_spec: DataSpec, data_spec: DataSpec) -> str:
    fits = [d for d in compatible_datasets(cfg.model, cfg.model_args) if d != cfg.dataset]
    hint = f"; datasets '{cfg.model}' can train on: {', '.join(fits)}" if fits else ""
    return (
        f"--dataset {cfg.dataset}: model '{cfg.model}' cannot train on dataset '{cfg.dataset}': {why} "
        f"('{cfg.model}' takes {model_spec.describe()}, '{cfg.dataset}' gives {data_spec.describe()}){hint}"
    )


def _check_output(cfg: TrainConfig) -> None:
    out = cfg.output_dir()
    if os.path.exists(out) and not os.path.isdir(out):
        raise TrainError(f"--output {cfg.output}: '{out}' is a file, not a folder")
    parent = os.path.abspath(out)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise TrainError(f"--output {cfg.output}: cannot create '{out}': '{parent}' is not a writable folder")


def check_loaded(plan: Plan, cfg: TrainConfig, splits) -> None:
    """Hold the loaded data to the declarations: its samples to the dataset's, its task to the model's."""
    if plan.data_spec is not None:
        why = sample_mismatch(plan.data_spec, splits.train[0])
        if why:
            raise TrainError(f"dataset '{cfg.dataset}' declares {plan.data_spec.describe()}, but {why}")
    if plan.model_spec is not None and splits.task != plan.model_spec.task:
        raise TrainError(
            f"--dataset {cfg.dataset}: model '{cfg.model}' cannot train on dataset '{cfg.dataset}': "
            f"the dataset is for {splits.task}, the model for {plan.model_spec.task}"
        )


# -- types of --data-arg / --model-arg values -------------------------------------------------------------
def _hints(fn) -> dict:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # annotations that do not evaluate here: no type check
        return {}


def _field_hints(config_cls) -> dict:
    hints = _hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls) if f.name in hints}


def _check_types(values: dict, hints: dict, what: str) -> None:
    for key, value in values.items():
        hint = hints.get(key)
        if hint is not None and not _type_ok(value, hint):
            raise TrainError(f"{what} '{key}' expects {_type_name(hint)}, got {value!r}")


def _type_ok(value, hint) -> bool:
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (tuple, list) or origin in (tuple, list):
        if not isinstance(value, (tuple, list)):
            return False
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return len(set(args)) != 1 or all(_type_ok(v, args[0]) for v in value)
    return True  # a type this check does not know: the factory decides


def _type_name(hint) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    if hint is type(None):
        return "None"
    return {bool: "true or false", int: "an integer", float: "a number", str: "text"}.get(
        hint, "a list" if hint in (tuple, list) or typing.get_origin(hint) in (tuple, list) else str(hint)
    )
