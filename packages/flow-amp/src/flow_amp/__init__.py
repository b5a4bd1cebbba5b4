"""flow-amp: automatic mixed precision for flow.

Owns mixed-precision policies (fp16, bf16) and their op colour tables,
autocast for eager mode, the AMP graph pass, loss scalers and master weights.
flow finds it through the ``flow.plugins`` entry point ``amp`` (module
:mod:`flow_amp.plugin`). It is a skeleton for now: the plugin registers nothing
yet.
"""

__version__ = "0.1.0"
