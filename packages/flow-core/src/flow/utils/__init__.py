"""Utilities (``flow.utils``): ``flow.utils.data`` (datasets, samplers, DataLoader)."""

from flow.utils import data

__all__ = ["data"]
