"""Turn a :class:`TrainConfig` into the pieces of a run: feature checks, data, model, optimizer, scheduler."""

from __future__ import annotations

import dataclasses
import inspect
import math

import flow
from flow_models import registry as zoo
from flow_models.data.base import DatasetSplits
from flow_models.train.amp import check_amp
from flow_models.train.config import TrainConfig, TrainError

__all__ = [
    "limit_threads",
    "check_features",
    "load_data",
    "build_model",
    "build_optimizer",
    "build_scheduler",
    "WarmupCosine",
    "model_config_dict",
    "MODEL_ARG_SYNONYMS",
    "dataset_kwargs",
    "model_overrides",
    "fit_fields",
]

# A dataset's model_args under the names zoo configs may use for the same thing.
MODEL_ARG_SYNONYMS = {
    "num_classes": ("num_classes", "n_classes", "num_labels", "classes", "n_outputs"),
    "in_channels": ("in_channels", "input_channels", "channels_in", "n_input"),
    "image_size": ("image_size", "input_size", "img_size"),
    "vocab_size": ("vocab_size", "n_vocab", "num_tokens", "num_classes"),
    "block_size": ("block_size", "n_positions", "max_seq_len", "context_length", "n_ctx", "max_len"),
    "num_dense": ("num_dense", "dense_features", "num_dense_features", "n_dense", "dense_in"),
    "table_sizes": ("table_sizes", "embedding_sizes", "num_embeddings", "vocab_sizes", "cardinalities"),
    "n_features": ("n_features", "in_features", "input_dim", "feature_dim", "n_mels", "n_freq"),
    "sample_rate": ("sample_rate",),
}


def limit_threads(threads: int):
    """Cap NumPy's BLAS and flow's OpenMP thread pools at ``threads`` (0: leave them alone).

    One thread is flow-train's default: the small matrices of CPU training gain little from
    more, and on a machine whose cores are busy (or with BLAS and OpenMP both spinning up a
    thread per core) oversubscription makes steps several times slower.
    """
    if not threads:
        return None
    if threads < 0:
        raise TrainError(f"threads must be >= 0, got {threads}")
    from threadpoolctl import threadpool_limits

    flow.zeros(1).exp()  # load flow's native kernels (and their OpenMP runtime) so that the limit reaches them
    return threadpool_limits(limits=threads)


def check_features(cfg: TrainConfig) -> None:
    """Fail early, with one line naming what is missing, for --device, --graph and --amp."""
    dev = cfg.device.split(":")[0]
    if dev != "cpu":
        from flow.registry import get_device_type

        try:
            get_device_type(dev)
        except Exception as e:
            raise TrainError(f"--device {cfg.device} is not available: {e}") from None
    if cfg.dump_graph and not cfg.graph:
        raise TrainError("--dump-graph draws the compiled training step: add --graph")
    if cfg.graph and not hasattr(flow.nn, "Graph"):
        raise TrainError(
            "--graph needs graph mode (flow.nn.Graph), which this flow-core does not have yet; train with --eager"
        )
    check_amp(cfg)


def dataset_kwargs(cfg: TrainConfig, factory) -> dict:
    """The keyword arguments ``factory`` is called with: --data-arg, --data-path and the model's context length."""
    kwargs = dict(cfg.data_args)
    params = inspect.signature(factory).parameters
    if cfg.data_path is not None:
        for key in ("path", "root"):
            if key in params:
                kwargs[key] = cfg.data_path
                break
        else:
            raise TrainError(f"--data-path: dataset '{cfg.dataset}' reads no files (it takes no --data-path)")
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(k for k in kwargs if k not in params)
        if unknown:
            valid = [n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
            raise TrainError(
                f"--data-arg: dataset '{cfg.dataset}' has no option(s) {', '.join(unknown)}; "
                f"its options: {', '.join(valid) or '(none)'}"
            )
    if "block_size" in params and "block_size" not in kwargs:  # windows as long as the model's context
        ctx = _model_field(cfg, MODEL_ARG_SYNONYMS["block_size"])
        if ctx:
            kwargs["block_size"] = ctx
    missing = [n for n, p in params.items() if p.default is p.empty and p.kind is not p.VAR_KEYWORD and n not in kwargs]
    if missing:
        how = "--data-path PATH" if missing[0] in ("path", "root") else f"--data-arg {missing[0]}=..."
        hint = f" (give it with {how})"
        raise TrainError(f"dataset '{cfg.dataset}' needs '{missing[0]}'{hint}")
    return kwargs


def _model_field(cfg: TrainConfig, names: tuple[str, ...]):
    """The value of the first of ``names`` in the model's config (with --model-arg applied), else None."""
    for name in names:
        if name in cfg.model_args:
            return cfg.model_args[name]
    try:
        mcfg = zoo.get_config(cfg.model)
    except zoo.ZooError:
        return None
    for name in names:
        if hasattr(mcfg, name):
            return getattr(mcfg, name)
    return None


def load_data(cfg: TrainConfig, kwargs: dict | None = None) -> DatasetSplits:
    """Read the dataset (``kwargs``: its keyword arguments as preflight worked them out)."""
    if not cfg.dataset:
        raise TrainError(f"no dataset given for model '{cfg.model}'; pass --dataset NAME (see flow-train --list)")
    entry = zoo.dataset_info(cfg.dataset)
    if kwargs is None:
        kwargs = dataset_kwargs(cfg, entry.factory)
    try:
        splits = entry.factory(**kwargs)
    except (ValueError, TypeError) as e:
        raise TrainError(f"dataset '{cfg.dataset}': {e}") from None
    if not isinstance(splits, DatasetSplits):
        raise TrainError(
            f"dataset '{cfg.dataset}' is not a training dataset (its factory returned "
            f"{type(splits).__name__}, flow-train needs a DatasetSplits)"
        )
    if len(splits.train) == 0 or len(splits.test) == 0:
        raise TrainError(f"dataset '{cfg.dataset}' has an empty split: {splits.describe()}")
    return splits


def fit_fields(field_names, data_args: dict) -> dict:
    """A dataset's ``model_args`` under the names of a model's config fields (those it has)."""
    fields = set(field_names)
    out = {}
    for key, value in data_args.items():
        for name in MODEL_ARG_SYNONYMS.get(key, (key,)):
            if name in fields:
                out[name] = value
                break
    return out


def model_overrides(cfg: TrainConfig, data_args: dict | None) -> dict:
    """The config fields that fit the model to the data (under the model's own field names), then --model-arg."""
    out = fit_fields(zoo.model_info(cfg.model).field_names(), data_args or {})
    out.update(cfg.model_args)
    return out


def build_model(cfg: TrainConfig, splits: DatasetSplits | None, saved_config: dict | None = None):
    """The zoo model ``cfg.model`` fitted to the data (or rebuilt from a checkpoint's ``saved_config``)."""
    overrides = (
        dict(saved_config) if saved_config is not None else model_overrides(cfg, splits.model_args if splits else None)
    )
    try:
        return zoo.create(cfg.model, **overrides)
    except zoo.ConfigError as e:
        raise TrainError(str(e)) from None
    except (ValueError, TypeError) as e:
        raise TrainError(f"model '{cfg.model}' cannot be built with {overrides}: {e}") from None


def model_config_dict(model) -> dict:
    cfg = getattr(model, "config", None)
    return dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else {}


def build_optimizer(cfg: TrainConfig, model) -> flow.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        return flow.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return flow.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return flow.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


class WarmupCosine:
    """Learning-rate factor: linear warm-up over ``warmup`` steps, then (if ``cosine``) cosine decay to 5%."""

    def __init__(self, total: int, warmup: int = 0, cosine: bool = True) -> None:
        self.total, self.warmup, self.cosine = int(total), int(warmup), bool(cosine)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        if not self.cosine:
            return 1.0
        t = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return 0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * t))


def build_scheduler(cfg: TrainConfig, optimizer, total_steps: int):
    """A per-step LambdaLR (its state, factor included, goes into checkpoints)."""
    fn = WarmupCosine(total_steps, cfg.warmup_steps, cfg.scheduler == "cosine")
    return flow.optim.lr_scheduler.LambdaLR(optimizer, fn)
