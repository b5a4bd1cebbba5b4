"""Graph passes: functions ``fn(ir, config) -> ir`` registered by name with ordering constraints.

The built-in ones (registered by the built-in plugin ``flow.graph``, see :mod:`flow.graph.plugin`)
run in this order: ``constant_folding`` -> ``simplify`` -> ``cse`` -> ``dce``. Plugins add theirs
with ``registry.register_pass(name, fn, before=..., after=...)`` in ``flow_register_passes``;
:func:`flow.graph.passes.pipeline.run_pipeline` runs every enabled pass in order, checks the IR
after each and keeps a log for ``graph.debug()``.
"""

from flow.graph.passes.constant_folding import constant_folding
from flow.graph.passes.cse import cse
from flow.graph.passes.dce import dce
from flow.graph.passes.pipeline import BUILTIN_PASSES, PassRecord, run_pipeline
from flow.graph.passes.simplify import simplify

__all__ = ["constant_folding", "cse", "dce", "simplify", "run_pipeline", "BUILTIN_PASSES", "PassRecord"]
