"""flow-cuda: the ``cuda`` device for flow, built on CuPy.

Installing this package makes flow find it through the ``flow.plugins`` entry
point ``cuda`` (module :mod:`flow_cuda.plugin`); nothing needs to import it by
hand. It is a skeleton for now: the plugin registers nothing yet.

CuPy is an optional dependency (``pip install flow-cuda[cuda12]``), so that
importing this package, and listing plugins, works on machines without a GPU.
"""

__version__ = "0.1.0"
