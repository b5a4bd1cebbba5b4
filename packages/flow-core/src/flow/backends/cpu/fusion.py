"""The CPU backend's entries in the graph pass tables: fusion by C code generation, NumPy arenas.

* the fusion rule (:data:`flow.graph.pass_tables.FUSION_TABLE`, key ``"cpu"``): the ops, dtypes and
  attributes :mod:`flow.backends.cpu.codegen_ops` can write in C, lowered by
  :func:`flow.backends.cpu.codegen.build` (all programs of a graph in one compiler call); without a C
  compiler the rule says so and the graph stays unfused;
* the ``fused_elementwise`` kernel for ``cpu``: the compiled loop (the reference evaluation when a
  plan built elsewhere meets no compiler here); it takes ``out=``, so memory planning can use it;
* the arena rule (:data:`flow.graph.pass_tables.ARENA_TABLE`): NumPy buffers.
"""

from __future__ import annotations


def _unavailable() -> str | None:
    from flow.backends.cpu import codegen

    if codegen.find_compiler() is None:
        return "no C compiler found (looked for $FLOW_CC, $CC, cc, gcc, clang)"
    return None


def _lower(programs: list) -> None:
    from flow.backends.cpu import codegen

    codegen.build(programs)


def fusion_rule():
    from flow.backends.cpu import codegen_ops
    from flow.graph.pass_tables import FusionRule

    return FusionRule(
        ops=codegen_ops.SUPPORTED,
        dtypes=codegen_ops.DTYPES,
        reductions=codegen_ops.REDUCTIONS,
        attrs_supported=codegen_ops.attrs_supported,
        lower=_lower,
        unavailable=_unavailable,
    )


def fused_kernel(inputs, program, out=None):
    from flow.backends.cpu import codegen

    k = codegen._KERNELS.get(program.key)
    if k is None:
        try:
            k = codegen.native_kernel(program)
        except codegen.CodegenError:  # no compiler here (e.g. a plan built elsewhere): the reference
            from flow.graph.passes.fused_program import evaluate, store

            return store(evaluate(program, list(inputs)), out)
    return k(inputs, out)


fused_kernel.supports_out = True
# the compiled loops load and store bfloat16 / float16 themselves (codegen_ops.LOWP): the low-precision
# adapter of lowp.py must not convert their inputs to float32 first
fused_kernel.handles_low_precision = True


def register_kernels(registry) -> None:
    from flow.graph.passes.fused_program import FUSED_OP

    if FUSED_OP in registry._ops:  # the op comes from the flow.graph plugin
        registry.register_kernel(FUSED_OP, "cpu", fused_kernel)


def register_rules(registry) -> None:
    from flow.graph.pass_tables import ARENA_TABLE, FUSION_TABLE, numpy_arena_rule

    if FUSION_TABLE in registry._tables:
        registry.register_rule(FUSION_TABLE, "cpu", fusion_rule())
        registry.register_rule(ARENA_TABLE, "cpu", numpy_arena_rule())
