"""``flow.backends.openmp``: PyTorch's ``torch.backends.openmp``."""

from __future__ import annotations

__all__ = ["is_available"]


def is_available() -> bool:
    """Whether flow's native CPU kernels were built with OpenMP (more than one thread possible)."""
    from flow.backends.cpu import native

    try:
        n = native.get_num_threads()
        native.set_num_threads(2)
        threaded = native.get_num_threads() == 2
        native.set_num_threads(n)
    except Exception:  # native kernels not built: NumPy fallback, no OpenMP
        return False
    return threaded
