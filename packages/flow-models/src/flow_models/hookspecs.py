"""The hook flow-models adds to flow's plugin manager (pluggy project name ``flow``).

flow-models' own plugin (:mod:`flow_models.plugin`) adds this module in
``flow_add_hookspecs``, so any package in the entry-point group ``flow.plugins``
can fill the model zoo the way flow-models itself does::

    # my_zoo/plugin.py, named by an entry point in the group "flow.plugins"
    from dataclasses import dataclass

    from flow.plugins import hookimpl


    @dataclass
    class TinyConfig:
        width: int = 8


    @hookimpl(optionalhook=True)  # optional: flow-models may not be installed
    def flow_models_register(registry):
        registry.register_model("tiny-mlp", build_tiny, TinyConfig, family="vision",
                                doc="A two-layer MLP for smoke tests.")

``optionalhook=True`` keeps :func:`flow.plugins.check_pending` quiet where
flow-models is not installed and so nobody declares the hook.
"""

from __future__ import annotations

from flow.plugins.hookspecs import hookspec


@hookspec
def flow_models_register(registry) -> None:
    """Add models and datasets to the model zoo.

    Called once per plugin, the first time the zoo is used (``flow_models.list_models()``,
    ``create``, ``get_config``, ``get_dataset``, ...), and for a plugin registered later with
    :func:`flow.plugins.register` on the next use after that; a plugin removed with
    :func:`flow.plugins.unregister` takes its entries with it. Receives the zoo's
    :class:`flow_models.registry.ZooRegistry` (not flow's op registry) as ``registry``:

    - ``registry.register_model(name, factory, config_cls, family, doc, defaults=None, override=False)``:
      ``factory(config) -> flow.nn.Module`` builds the model from an instance of the dataclass
      ``config_cls``; ``defaults`` (a dict) are the field values of this named variant, so that
      ``resnet18`` and ``resnet50`` share ``ResNetConfig``; ``family`` is one of ``vision``,
      ``nlp``, ``recsys``, ``speech`` or a new family name; ``doc`` says what the model is for.
    - ``registry.register_dataset(name, factory, family, doc, override=False)``:
      ``factory(**kwargs)`` returns the dataset (``flow_models.get_dataset(name, **kwargs)``).
    - both take a declaration of what the entry takes or gives, which flow-train checks a
      model/dataset pair with before it loads anything: ``consumes=fn(config) -> DataSpec`` for a
      model, ``produces=fn(**kwargs) -> DataSpec`` for a dataset (or a fixed
      :class:`flow_models.dataspec.DataSpec`).

    Registering a name twice is an error naming the plugin that registered it first,
    unless ``override=True``.
    """
