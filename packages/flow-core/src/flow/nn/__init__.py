"""Neural-network building blocks (``flow.nn``): Module, Parameter, layers, losses, init and utils.

>>> model = flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.ReLU(), flow.nn.Linear(8, 2))
>>> model(flow.randn(3, 4)).shape
flow.Size([3, 2])
"""

from flow.nn import functional, init, utils
from flow.nn.modules import *  # noqa: F401,F403
from flow.nn.modules import __all__ as _modules_all
from flow.nn.parameter import Buffer, Parameter

__all__ = ["functional", "init", "utils", "Parameter", "Buffer", "Graph"] + list(_modules_all)

from flow.graph.graph import Graph  # noqa: E402  (graph mode: flow.nn.Graph)
