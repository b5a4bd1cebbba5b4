"""Neural-network building blocks (``flow.nn``): Module, Parameter, layers, losses, init and utils.

>>> model = flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.ReLU(), flow.nn.Linear(8, 2))
>>> model(flow.randn(3, 4)).shape
flow.Size([3, 2])
"""

from flow.nn import functional, init, parallel, utils
from flow.nn.modules import *  # noqa: F401,F403
from flow.nn.modules import __all__ as _modules_all
from flow.nn.parameter import Buffer, Parameter

__all__ = ["functional", "init", "parallel", "utils", "Parameter", "Buffer", "Graph"] + list(_modules_all)  # noqa: F405


def __getattr__(name: str):
    # flow.nn.Graph is graph mode's class (flow.graph.graph), which itself builds on flow.nn: found on
    # first use, so that flow.nn does not import the graph compiler (and the two do not import each other).
    if name == "Graph":
        from flow.graph.graph import Graph

        globals()["Graph"] = Graph
        return Graph
    if name == "graph":  # OneFlow's flow.nn.graph namespace (GraphModule), loaded on first use as Graph is
        import importlib

        return importlib.import_module("flow.nn.graph")
    if name == "DataParallel":  # PyTorch's nn.DataParallel is nn.parallel.DataParallel
        return parallel.DataParallel
    raise AttributeError(f"module 'flow.nn' has no attribute '{name}'")
