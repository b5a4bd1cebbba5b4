"""``flow.backends.mps``: PyTorch's ``torch.backends.mps``; flow has no Metal device."""

from __future__ import annotations

__all__ = ["is_available", "is_built"]


def is_available() -> bool:
    """Whether the Metal (MPS) device can be used: never."""
    return False


def is_built() -> bool:
    """Whether flow was built with Metal support: no."""
    return False
