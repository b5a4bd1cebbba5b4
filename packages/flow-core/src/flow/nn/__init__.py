"""Neural-network building blocks (``flow.nn``)."""

from flow.nn import functional

__all__ = ["functional"]
