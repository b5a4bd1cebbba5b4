"""Graph mode: ``flow.nn.Graph`` and ``flow.compile``.

A call of a graph traces the step once per input signature into an IR (:mod:`flow.graph.ir`)
with symbolic tensors (:mod:`flow.graph.tracer`), including backward and the optimizer update,
runs the registered passes (:mod:`flow.graph.passes`), lowers the IR to a plan
(:mod:`flow.graph.lowering`) and runs it with the executor (:mod:`flow.graph.executor`,
:mod:`flow.graph.dataflow`). See ``docs/graph.md``.
"""

from flow.graph.compile import CompiledFunction, compile
from flow.graph.config import BlockConfig, GraphConfig
from flow.graph.executor import GraphExecutionError
from flow.graph.graph import Block, Graph
from flow.graph.ir import GraphIR, Lit, Node, SourceLoc, Value
from flow.graph.symbolic import GraphTraceError, SymbolicArray

__all__ = [
    "Graph",
    "Block",
    "compile",
    "CompiledFunction",
    "GraphConfig",
    "BlockConfig",
    "GraphIR",
    "Node",
    "Value",
    "Lit",
    "SourceLoc",
    "GraphExecutionError",
    "GraphTraceError",
    "SymbolicArray",
]
