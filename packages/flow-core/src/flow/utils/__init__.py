"""Utilities (``flow.utils``): ``flow.utils.data`` (datasets, samplers, DataLoader)."""

from flow.utils import checkpoint, data, tensorboard  # tensorboard imports its package only when used

__all__ = ["checkpoint", "data", "tensorboard"]
