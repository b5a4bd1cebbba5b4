"""The model zoo's registry: models and datasets by name, filled through flow's plugins.

Every plugin in the entry-point group ``flow.plugins`` that implements the hook
``flow_models_register(registry)`` (declared in :mod:`flow_models.hookspecs`) adds
entries here; flow-models' own plugin is one of them. The registry collects them
lazily, on first use, and again whenever the set of flow plugins changed
(``flow.plugins.register`` / ``unregister`` at run time), so it always agrees with
the plugin manager. The public functions (``list_models``, ``create``, ...) are
re-exported by :mod:`flow_models`.
"""

from __future__ import annotations

import dataclasses
import difflib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import flow
import flow.plugins
from flow import nn
from flow.errors import FlowError, PluginError
from flow_models.dataspec import DataSpec

__all__ = [
    "ZooModel",
    "ZooRegistry",
    "ModelEntry",
    "DatasetEntry",
    "ZooError",
    "UnknownNameError",
    "ConfigError",
    "list_models",
    "list_datasets",
    "create",
    "get_config",
    "get_dataset",
    "model_info",
    "dataset_info",
    "registry",
]

# the name flow-models' own entry point has (pyproject: models = "flow_models.plugin")
BUILTIN_PLUGIN = "models"


class ZooError(FlowError):
    """A model-zoo registration or lookup failed."""


class UnknownNameError(ZooError, LookupError):
    """No model (or dataset) of that name is registered."""


class ConfigError(ZooError, TypeError):
    """A configuration override names a field the model's config does not have."""


class ZooModel(nn.Module):
    """Base class of the zoo's models: holds ``config`` and counts parameters."""

    config: Any = None

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Number of parameter elements; a parameter shared by several modules (tied embeddings) counts once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def loss(self, output, target):
        """The training loss of this model's ``output`` against ``target``: cross-entropy unless a model
        says otherwise (language models flatten the sequence, recommendation models use binary
        cross-entropy on logits, the CTC model takes lengths)."""
        return nn.functional.cross_entropy(output, target)


@dataclass
class ModelEntry:
    """One registered model: ``factory(config) -> Module`` and its config dataclass."""

    name: str
    factory: Callable[[Any], Any]
    config_cls: type
    family: str
    doc: str
    defaults: dict = field(default_factory=dict)
    plugin: str = "<user>"
    consumes: Callable[[Any], DataSpec] | DataSpec | None = None

    def field_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.config_cls)]

    def make_config(self, config: Any = None, overrides: dict | None = None) -> Any:
        """The config of this named variant, ``config`` (if given) in its place, then ``overrides`` applied."""
        overrides = dict(overrides or {})
        valid = self.field_names()
        unknown = sorted(k for k in overrides if k not in valid)
        if unknown:
            raise ConfigError(
                f"model '{self.name}' ({self.config_cls.__name__}) has no config field(s) {unknown}; "
                f"valid fields are: {', '.join(valid)}"
            )
        if config is None:
            config = self.config_cls(**self.defaults)
        elif not isinstance(config, self.config_cls):
            raise ConfigError(f"model '{self.name}' takes a {self.config_cls.__name__}, not a {type(config).__name__}")
        return dataclasses.replace(config, **overrides) if overrides else dataclasses.replace(config)

    def input_spec(self, config: Any = None) -> DataSpec | None:
        """What the model built from ``config`` (default: this variant's) takes; ``None`` if it declares nothing.

        Raises ``ValueError`` when the config cannot take any input (a ViT whose image size is not a
        multiple of its patch size).
        """
        if self.consumes is None or isinstance(self.consumes, DataSpec):
            return self.consumes
        spec = self.consumes(self.make_config(config))
        if not isinstance(spec, DataSpec):
            raise ZooError(f"model '{self.name}': its consumes function returned {type(spec).__name__}, not a DataSpec")
        return spec


@dataclass
class DatasetEntry:
    """One registered dataset: ``factory(**kwargs)`` returns it."""

    name: str
    factory: Callable[..., Any]
    family: str
    doc: str
    plugin: str = "<user>"
    produces: Callable[..., DataSpec] | DataSpec | None = None

    def output_spec(self, **kwargs) -> DataSpec | None:
        """What the dataset built with ``kwargs`` yields, from its declaration alone (no file is read);
        ``None`` if it declares nothing."""
        if self.produces is None or isinstance(self.produces, DataSpec):
            return self.produces
        spec = self.produces(**kwargs)
        if not isinstance(spec, DataSpec):
            raise ZooError(
                f"dataset '{self.name}': its produces function returned {type(spec).__name__}, not a DataSpec"
            )
        return spec


def _check_spec(kind: str, name: str, what: str, spec) -> None:
    if spec is not None and not isinstance(spec, DataSpec) and not callable(spec):
        raise ZooError(f"{kind} '{name}': {what} must be a DataSpec or a function returning one, got {spec!r}")


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


class ZooRegistry:
    """Models and datasets by name. Plugins fill it through the hook ``flow_models_register``."""

    def __init__(self) -> None:
        self._models: dict[str, ModelEntry] = {}
        self._datasets: dict[str, DatasetEntry] = {}
        self.current_plugin = "<user>"
        self._collected: set[str] = set()
        self._pm_id: int | None = None
        self._lock = threading.RLock()

    # -- registration (called from plugins' hooks) -----------------------------------------------
    def register_model(
        self,
        name: str,
        factory: Callable[[Any], Any],
        config_cls: type,
        family: str,
        doc: str | None = None,
        *,
        defaults: dict | None = None,
        override: bool = False,
        consumes: Callable[[Any], DataSpec] | DataSpec | None = None,
    ) -> None:
        """Register ``factory(config) -> Module`` under ``name``; see :mod:`flow_models.hookspecs`.

        ``consumes`` declares what the model takes (a :class:`~flow_models.dataspec.DataSpec`, or a
        function of the config returning one), which flow-train checks against the dataset's.
        """
        if not dataclasses.is_dataclass(config_cls) or not isinstance(config_cls, type):
            raise ZooError(f"model '{name}': config_cls must be a dataclass type, got {config_cls!r}")
        if not callable(factory):
            raise ZooError(f"model '{name}': factory must be callable, got {factory!r}")
        doc = doc or getattr(factory, "__doc__", None) or ""
        if not doc.strip():
            raise ZooError(f"model '{name}': give a doc string saying what the model is for")
        self._check_new(self._models, "model", name, override)
        _check_spec("model", name, "consumes", consumes)
        entry = ModelEntry(
            name, factory, config_cls, family, doc.strip(), dict(defaults or {}), self.current_plugin, consumes
        )
        bad = sorted(k for k in entry.defaults if k not in entry.field_names())
        if bad:
            raise ConfigError(
                f"model '{name}': defaults name no field(s) {bad} of {config_cls.__name__}; "
                f"valid fields are: {', '.join(entry.field_names())}"
            )
        self._models[name] = entry

    def register_dataset(
        self,
        name: str,
        factory: Callable[..., Any],
        family: str,
        doc: str | None = None,
        *,
        override: bool = False,
        produces: Callable[..., DataSpec] | DataSpec | None = None,
    ) -> None:
        """Register ``factory(**kwargs) -> dataset`` under ``name``.

        ``produces`` declares what its samples are (a :class:`~flow_models.dataspec.DataSpec`, or a
        function of the same keyword arguments as ``factory`` returning one).
        """
        if not callable(factory):
            raise ZooError(f"dataset '{name}': factory must be callable, got {factory!r}")
        self._check_new(self._datasets, "dataset", name, override)
        _check_spec("dataset", name, "produces", produces)
        doc = (doc or getattr(factory, "__doc__", None) or "").strip()
        self._datasets[name] = DatasetEntry(name, factory, family, doc, self.current_plugin, produces)

    def _check_new(self, table: dict, kind: str, name: str, override: bool) -> None:
        if not isinstance(name, str) or not name:
            raise ZooError(f"a {kind} name must be a non-empty string, got {name!r}")
        if name in table and not override:
            raise ZooError(
                f"{kind} '{name}' is already registered by plugin '{table[name].plugin}'; "
                "pass override=True to replace it"
            )

    # -- collection from flow's plugin manager -----------------------------------------------------
    def sync(self) -> None:
        """Bring the registry in line with flow's plugins (cheap when nothing changed)."""
        with self._lock:
            flow.plugins.ensure_loaded()
            pm = flow.plugins.get_plugin_manager()
            if self._pm_id != id(pm):  # a fresh plugin manager (a failed load was retried): start over
                self._models.clear()
                self._datasets.clear()
                self._collected.clear()
                self._pm_id = id(pm)
            _ensure_hookspec(pm)
            impls = {i.plugin_name: i.function for i in pm.hook.flow_models_register.get_hookimpls()}
            from flow_models import plugin as own

            if pm.get_name(own) is None:  # flow-models' plugin was not loaded (FLOW_PLUGINS, autoload off)
                impls.setdefault(BUILTIN_PLUGIN, own.flow_models_register)
            if self._collected - set(impls):  # a plugin went away: collect again, so overridden entries come back
                self._models.clear()
                self._datasets.clear()
                self._collected.clear()
            # flow-models' own entries first, so that other plugins may override them
            for name in sorted(set(impls) - self._collected, key=lambda n: (n != BUILTIN_PLUGIN, n)):
                self._collect(name, impls[name])

    def _collect(self, name: str, fn: Callable) -> None:
        saved = dict(self._models), dict(self._datasets)
        self.current_plugin = name
        try:
            fn(registry=self)
        except Exception as e:  # leave the registry as it was before this plugin's hook
            self._models, self._datasets = saved
            raise PluginError(f"flow plugin '{name}' failed in flow_models_register: {type(e).__name__}: {e}") from e
        finally:
            self.current_plugin = "<user>"
        self._collected.add(name)

    # -- lookup ------------------------------------------------------------------------------------
    def model(self, name: str) -> ModelEntry:
        self.sync()
        return self._lookup(self._models, "model", name)

    def dataset(self, name: str) -> DatasetEntry:
        self.sync()
        return self._lookup(self._datasets, "dataset", name)

    @staticmethod
    def _lookup(table: dict, kind: str, name: str):
        try:
            return table[name]
        except KeyError:
            close = difflib.get_close_matches(str(name), list(table), n=3)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise UnknownNameError(
                f"no {kind} named '{name}' is registered.{hint} Registered {kind}s: "
                f"{', '.join(sorted(table)) or '(none)'}"
            ) from None

    def models(self, family: str | None = None) -> list[str]:
        self.sync()
        return sorted(n for n, e in self._models.items() if family is None or e.family == family)

    def datasets(self, family: str | None = None) -> list[str]:
        self.sync()
        return sorted(n for n, e in self._datasets.items() if family is None or e.family == family)


_REGISTRY = ZooRegistry()


def _ensure_hookspec(pm) -> None:
    hook = getattr(pm.hook, "flow_models_register", None)
    if hook is None or not hook.has_spec():
        from flow_models import hookspecs

        pm.add_hookspecs(hookspecs)


def registry() -> ZooRegistry:
    """The process's zoo registry, synchronised with flow's plugins."""
    _REGISTRY.sync()
    return _REGISTRY


def list_models(family: str | None = None) -> list[str]:
    """Names of the registered models (of one ``family``: vision, nlp, recsys, speech), sorted."""
    return _REGISTRY.models(family)


def list_datasets(family: str | None = None) -> list[str]:
    """Names of the registered datasets (of one ``family``), sorted."""
    return _REGISTRY.datasets(family)


def model_info(name: str) -> ModelEntry:
    """The registry entry of a model: factory, config class, family, doc and the plugin that registered it."""
    return _REGISTRY.model(name)


def dataset_info(name: str) -> DatasetEntry:
    """The registry entry of a dataset."""
    return _REGISTRY.dataset(name)


def get_config(name: str, **overrides) -> Any:
    """A fresh config dataclass of model ``name``, with ``overrides`` applied (unknown keys raise ConfigError)."""
    return _REGISTRY.model(name).make_config(None, overrides)


def create(name: str, config: Any = None, **overrides) -> nn.Module:
    """Build model ``name``: its config (or ``config``), updated with ``overrides``, passed to its factory.

    >>> model = flow_models.create("resnet18", num_classes=10, stem="cifar")
    """
    entry = _REGISTRY.model(name)
    cfg = entry.make_config(config, overrides)
    model = entry.factory(cfg)
    if getattr(model, "config", None) is None:
        try:
            model.config = cfg
        except (AttributeError, TypeError):
            pass
    return model


def get_dataset(name: str, **kwargs) -> Any:
    """The dataset ``name``, built by its factory with ``kwargs``."""
    return _REGISTRY.dataset(name).factory(**kwargs)


def _short(get) -> str:
    """``task/kind`` of a declaration, for listings ('' when there is none or it needs options)."""
    try:
        spec = get()
    except Exception:  # a declaration that needs the dataset's options (a path) or a config it cannot take
        return ""
    return f"{spec.task}/{'|'.join(spec.kinds)}" if spec is not None else ""


def describe() -> list[dict]:
    """Every model and dataset as plain data (name, kind, family, plugin, first line of its doc, and ``io``:
    the ``task/input`` it takes or gives, '' when undeclared)."""
    _REGISTRY.sync()
    rows = [
        {
            "name": e.name,
            "kind": "model",
            "family": e.family,
            "plugin": e.plugin,
            "doc": _first_line(e.doc),
            "io": _short(e.input_spec),
        }
        for e in _REGISTRY._models.values()
    ]
    rows += [
        {
            "name": e.name,
            "kind": "dataset",
            "family": e.family,
            "plugin": e.plugin,
            "doc": _first_line(e.doc),
            "io": _short(e.output_spec),
        }
        for e in _REGISTRY._datasets.values()
    ]
    return sorted(rows, key=lambda r: (r["kind"], r["family"], r["name"]))
