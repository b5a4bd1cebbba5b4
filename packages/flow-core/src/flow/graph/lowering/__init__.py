"""Lowering of the graph IR to an execution plan."""

from flow.graph.lowering.plan import Plan, Step, dependencies, lower

__all__ = ["Plan", "Step", "lower", "dependencies"]
