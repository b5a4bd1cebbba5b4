"""flow-models: the model zoo for flow.

Will hold vision, NLP, recommendation and speech models, dataset readers, the
training command line and weight converters. flow finds it through the
``flow.plugins`` entry point ``models`` (module :mod:`flow_models.plugin`). It
is a skeleton for now: the plugin registers nothing yet.
"""

__version__ = "0.1.0"
