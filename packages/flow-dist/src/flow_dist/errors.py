"""flow-dist's errors about global tensors (placement and SBP errors live with those classes,
communication errors in :mod:`flow_dist.comm.errors`)."""

from __future__ import annotations

from flow.errors import FlowError

__all__ = ["GlobalTensorError"]


class GlobalTensorError(FlowError):
    """A global tensor used in a way it cannot be (mixed placements, a rank outside its placement)."""
