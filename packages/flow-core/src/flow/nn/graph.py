"""``flow.nn.graph``: OneFlow's names for graph-mode blocks.

``flow.nn.graph.GraphModule`` is the type of a module inside an ``nn.Graph`` (:class:`flow.graph.Block`):
``self.model.h0.to(flow.nn.graph.GraphModule).set_stage(0, placement)`` sets a block's pipeline stage.
"""

from __future__ import annotations


def __getattr__(name: str):
    # found on first use, so that importing flow.nn does not import the graph compiler
    if name == "GraphModule":
        from flow.graph.graph import Block

        return Block
    raise AttributeError(f"module 'flow.nn.graph' has no attribute '{name}'")
