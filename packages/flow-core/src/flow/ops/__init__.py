"""The core's ops, declared next to their Python functions (see :mod:`flow.ops._define`).

``flow.ops.call(name, *tensors, **attrs)`` runs any registered op by name,
including ops added by plugins.
"""

from __future__ import annotations

from flow._dispatch import call
from flow.ops.composite import CompositeOp, composite

__all__ = ["call", "composite", "CompositeOp"]
