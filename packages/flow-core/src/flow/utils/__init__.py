"""Utilities (``flow.utils``): ``flow.utils.data`` (datasets, samplers, DataLoader)."""

from flow.utils import checkpoint, data

__all__ = ["checkpoint", "data"]
