"""flow-models: the model zoo for flow.

Models and datasets by name, filled through flow's plugins: flow-models' own plugin
(entry point ``models`` in the group ``flow.plugins``, module :mod:`flow_models.plugin`)
and any other package that implements the hook ``flow_models_register(registry)``
declared in :mod:`flow_models.hookspecs`.

>>> import flow_models
>>> flow_models.list_models("vision")[:3]
['lenet', 'lenet-mnist', 'mobilenet-v2']
>>> model = flow_models.create("resnet18", stem="cifar", num_classes=10)
>>> model.num_parameters()
11173962

Families: :mod:`flow_models.vision`, :mod:`flow_models.nlp`, :mod:`flow_models.recsys`,
:mod:`flow_models.speech`; weight converters in :mod:`flow_models.convert`.
"""

from flow_models.registry import (
    ConfigError,
    UnknownNameError,
    ZooError,
    ZooModel,
    create,
    dataset_info,
    get_config,
    get_dataset,
    list_datasets,
    list_models,
    model_info,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "UnknownNameError",
    "ZooError",
    "ZooModel",
    "create",
    "dataset_info",
    "get_config",
    "get_dataset",
    "list_datasets",
    "list_models",
    "model_info",
]
