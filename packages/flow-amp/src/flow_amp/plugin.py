"""The ``amp`` entry point of flow-amp (group ``flow.plugins``).

flow's plugin manager imports this module and runs its hooks:

- ``flow_register_ops`` / ``flow_register_kernels``: the loss-scaling ops ``amp_unscale`` and
  ``amp_update_scale`` (:mod:`flow_amp.loss_scale_ops`);
- ``flow_register_tables``: the ``"amp_color"`` rule table (op name -> allow / deny / promote /
  clear, see :mod:`flow_amp.colors`), which any op package fills with
  ``registry.register_rule("amp_color", op, colour)`` in its own ``flow_register_rules`` (queued
  until flow-amp loads, so op packages need not depend on it);
- ``flow_register_rules``: the colours of flow-core's ops;
- ``flow_register_passes``: the ``amp`` graph pass (:mod:`flow_amp.graph_pass`), run when a graph's
  ``config.enable_amp()`` is on;
- ``flow_register_api``: ``flow.autocast``, ``flow.is_autocast_enabled`` and ``flow.amp``.
"""

from __future__ import annotations

from flow.plugins import hookimpl


@hookimpl
def flow_register_ops(registry) -> None:
    from flow_amp import loss_scale_ops

    loss_scale_ops.register(registry)


@hookimpl
def flow_register_kernels(registry) -> None:
    from flow_amp import loss_scale_ops

    loss_scale_ops.register_kernels(registry)


@hookimpl
def flow_register_tables(registry) -> None:
    from flow_amp.colors import TABLE

    registry.declare_table(TABLE, "AMP colour of each op: allow, deny, promote or clear (flow-amp)")


@hookimpl
def flow_register_rules(registry) -> None:
    from flow.ops.composite import COMPOSITES
    from flow_amp.colors import TABLE, core_colors

    for name, rule in core_colors().items():
        if name in registry.ops or name in COMPOSITES:
            registry.register_rule(TABLE, name, rule)


@hookimpl
def flow_register_passes(registry) -> None:
    from flow_amp import graph_pass

    graph_pass.register_pass(registry)


@hookimpl
def flow_register_api(registry) -> None:
    import flow_amp
    from flow_amp.autocast import autocast, is_autocast_enabled

    registry.register_api("autocast", autocast)
    registry.register_api("is_autocast_enabled", is_autocast_enabled)
    registry.register_api("amp", flow_amp)
