"""The ``flow.onnx`` plugin: declares the ``"onnx_export"`` rule table and gives flow-core's ops their rules.

:func:`flow.onnx.export` registers it on first use, so ``import flow`` never imports ``onnx``; rules
other plugins registered for the table before then are queued by the registry and go into it here.
"""

from __future__ import annotations

from flow.plugins import hookimpl


@hookimpl
def flow_register_tables(registry) -> None:
    from flow.onnx.export import TABLE

    registry.declare_table(TABLE, "ONNX export rule of each op: rule(node, ctx) -> list of onnx NodeProto (flow.onnx)")


@hookimpl
def flow_register_rules(registry) -> None:
    from flow.onnx import rules_attention, rules_math, rules_nn
    from flow.onnx.export import TABLE

    for rules in (rules_math.RULES, rules_nn.RULES, rules_attention.RULES):
        for name, rule in rules.items():
            if name in registry.ops:
                registry.register_rule(TABLE, name, rule)
