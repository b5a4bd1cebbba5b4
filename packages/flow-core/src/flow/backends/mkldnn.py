"""``flow.backends.mkldnn``: PyTorch's ``torch.backends.mkldnn``; flow's CPU kernels do not use oneDNN.

``enabled`` is a real settable flag (bools only, PyTorch's default True) with no effect.
"""

from __future__ import annotations

from flow.backends import _flags

__all__ = ["is_available", "enabled"]

enabled: bool
_flags.install(__name__, {"enabled": True})


def is_available() -> bool:
    """Whether oneDNN (MKL-DNN) can be used: not by flow's kernels."""
    return False
