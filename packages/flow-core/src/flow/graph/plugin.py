"""Built-in plugin ``flow.graph``: the graph-mode ops (the fused program op), their kernels, and the
built-in graph passes, registered through the same hooks as any plugin."""

from __future__ import annotations

from flow.plugins import hookimpl


@hookimpl
def flow_register_ops(registry) -> None:
    from flow.graph.passes import fused_program

    fused_program.register_op(registry)


@hookimpl
def flow_register_tables(registry) -> None:
    from flow.graph.pass_tables import declare_tables

    declare_tables(registry)


@hookimpl
def flow_register_kernels(registry) -> None:
    from flow.graph.passes import fused_program

    fused_program.register_kernels(registry)


@hookimpl
def flow_register_rules(registry) -> None:
    from flow.graph import out_variants
    from flow.graph.pass_tables import PLAN_PHASE_TABLE
    from flow.graph.passes import memory

    out_variants.register(registry)
    registry.register_rule(PLAN_PHASE_TABLE, "memory_arena", memory.plan_phase())


@hookimpl
def flow_register_passes(registry) -> None:
    from flow.graph.passes import checkpointing, fusion, memory
    from flow.graph.passes.pipeline import register_builtin_passes

    register_builtin_passes(registry)
    checkpointing.register(registry)
    fusion.register(registry)
    memory.register(registry)
