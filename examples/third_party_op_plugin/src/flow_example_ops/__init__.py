"""flow-example-ops: an example of a third-party op package for flow.

It adds one op, ``example_swish`` (``x * sigmoid(beta * x)``), with its schema,
meta rule, gradient and CPU kernel, all registered through the ``flow.plugins``
entry point ``example_ops`` (see :mod:`flow_example_ops.plugin`). Installing the
package is enough: flow loads the plugin the first time a registry is used.

Example::

    import flow
    import flow_example_ops

    x = flow.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    y = flow_example_ops.swish(x, beta=1.5)
    y.sum().backward()
"""

from __future__ import annotations

import flow

__version__ = "0.1.0"
__all__ = ["swish"]


def swish(x: flow.Tensor, beta: float = 1.0) -> flow.Tensor:
    """``x * sigmoid(beta * x)``, elementwise (SiLU when ``beta == 1``).

    Example::

        >>> flow_example_ops.swish(flow.tensor([0.0, 1.0]), beta=1.0)
        tensor([0.0000, 0.7311])
    """
    return flow.ops.call("example_swish", x, beta=beta)
