"""``flow.backends.cudnn``: PyTorch's ``torch.backends.cudnn`` flags.

flow's CPU kernels do not use cuDNN, so ``is_available()`` is False and ``version()`` None, and the flags
have no effect on CPU; they are real settable attributes (with PyTorch's defaults, taking bools only), so
that scripts that set them (``flow.backends.cudnn.benchmark = True``) run unchanged, and a CUDA device
package may read them.

>>> flow.backends.cudnn.is_available(), flow.backends.cudnn.benchmark
(False, False)
"""

from __future__ import annotations

from typing import Any, ContextManager

from flow.backends import _flags

__all__ = ["is_available", "version", "flags", "enabled", "benchmark", "deterministic", "allow_tf32"]

enabled: bool
benchmark: bool
deterministic: bool
allow_tf32: bool

# PyTorch's defaults
_flags.install(__name__, {"enabled": True, "benchmark": False, "deterministic": False, "allow_tf32": True})
benchmark_limit: int = 10


def is_available() -> bool:
    """Whether cuDNN can be used: never by flow's CPU kernels."""
    return False


def version() -> int | None:
    """The cuDNN version, None where cuDNN is not available (as in PyTorch)."""
    return None


def is_acceptable(tensor: Any) -> bool:
    """Whether cuDNN could run on ``tensor``: False without cuDNN."""
    return False


def flags(
    enabled: bool | None = False,
    benchmark: bool | None = False,
    deterministic: bool | None = False,
    allow_tf32: bool | None = True,
) -> ContextManager[None]:
    """``with flow.backends.cudnn.flags(enabled=..., ...):`` sets the flags inside the block (PyTorch's
    defaults for the arguments; None leaves a flag as it is)."""
    import sys

    return sys.modules[__name__]._with_flags(
        enabled=enabled, benchmark=benchmark, deterministic=deterministic, allow_tf32=allow_tf32
    )
