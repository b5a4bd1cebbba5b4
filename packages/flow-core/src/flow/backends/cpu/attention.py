"""Which kernel :func:`flow.nn.functional.scaled_dot_product_attention` uses on the CPU.

Named as PyTorch's ``torch.backends.cuda.enable_flash_sdp`` / ``flash_sdp_enabled``: with the fused
("flash") kernel enabled (the default), an attention it applies to (no ``attn_mask``, no dropout,
float32 / float64) runs the ``flash_attention`` op, whose CPU kernel is blocked over queries and keys
and never forms the (L, S) score matrix; disabled, every call runs the composite of matmul, masking
and softmax. The environment variable ``FLOW_CPU_FLASH_ATTENTION=0`` disables it from the start
(read once, at import).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from flow.backends._flags import _check_bool

__all__ = ["enable_flash_sdp", "flash_sdp", "flash_sdp_enabled"]

_STATE = {"flash": os.environ.get("FLOW_CPU_FLASH_ATTENTION", "1") != "0"}


def enable_flash_sdp(enabled: bool) -> None:
    """Allow (True) or forbid (False) the fused attention kernel on the CPU."""
    _STATE["flash"] = _check_bool("flow.backends.cpu.attention.enable_flash_sdp", enabled)


def flash_sdp_enabled() -> bool:
    """Whether the fused attention kernel may be used on the CPU."""
    return _STATE["flash"]


@contextlib.contextmanager
def flash_sdp(enabled: bool) -> Iterator[None]:
    """The fused kernel allowed or forbidden inside the block, the previous choice restored after."""
    prev = _STATE["flash"]
    enable_flash_sdp(enabled)
    try:
        yield
    finally:
        _STATE["flash"] = prev
