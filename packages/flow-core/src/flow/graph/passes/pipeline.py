"""The pass pipeline: run every enabled registered pass in order, verify, keep a log."""

from __future__ import annotations

import time
from dataclasses import dataclass

from flow.graph.passes.constant_folding import constant_folding
from flow.graph.passes.cse import cse
from flow.graph.passes.dce import dce
from flow.graph.passes.simplify import simplify

# name, function, ordering constraints (see docs/graph.md for where plugins' passes go)
BUILTIN_PASSES = (
    ("constant_folding", constant_folding, dict(before=("simplify",))),
    ("simplify", simplify, dict(after=("constant_folding",), before=("cse",))),
    ("cse", cse, dict(after=("simplify",), before=("dce",))),
    ("dce", dce, dict(after=("cse",))),
)


def register_builtin_passes(registry) -> None:
    for name, fn, order in BUILTIN_PASSES:
        registry.register_pass(name, fn, **order)


@dataclass
class PassRecord:
    """What one pass did: op counts and node count after it, time taken, the IR text (debug >= 2)."""

    name: str
    ran: bool
    nodes: int
    op_counts: dict
    seconds: float = 0.0
    text: str = ""


def run_pipeline(ir, config, log: list | None = None, keep_text: bool = False):
    """Run the enabled passes in registry order; each result is verified. Returns the final IR."""
    from flow.errors import FlowError
    from flow.registry import REGISTRY

    config.check()
    # the tracer took every node's output metas from its op's meta rule: verify() re-runs the rules
    # only of nodes the passes make or change (an ~8% saving of a GPT step's compile time)
    from flow.graph.meta_check import mark_checked

    mark_checked(ir)
    if log is not None:
        log.append(PassRecord("trace", True, len(ir.nodes), ir.op_counts(), 0.0, str(ir) if keep_text else ""))
    for entry in REGISTRY.passes.ordered():
        if not config.pass_enabled(entry):
            if log is not None:
                log.append(PassRecord(entry.name, False, len(ir.nodes), {}))
            continue
        t0 = time.perf_counter()
        out = entry.fn(ir, config)
        if out is None:
            raise FlowError(f"graph pass '{entry.name}' (plugin '{entry.plugin}') returned None; a pass returns the IR")
        try:
            out.verify()
        except FlowError as e:
            raise FlowError(f"graph pass '{entry.name}' (plugin '{entry.plugin}') produced an invalid IR: {e}") from e
        ir = out
        if log is not None:
            log.append(
                PassRecord(
                    entry.name,
                    True,
                    len(ir.nodes),
                    ir.op_counts(),
                    time.perf_counter() - t0,
                    str(ir) if keep_text else "",
                )
            )
    return ir
