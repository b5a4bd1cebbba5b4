"""``flow.backends.cuda``: PyTorch's ``torch.backends.cuda`` flags.

``is_built()`` says whether flow can run on CUDA here (the flow-cuda package provides the device; False
without it). ``matmul.allow_tf32`` and the other flags are real settable attributes with PyTorch's
defaults (bools only) and have no effect on CPU; the scaled-dot-product-attention backend switches
(``enable_flash_sdp`` ...) likewise only record the choice.
"""

from __future__ import annotations

from flow.backends._flags import FlagObject, _check_bool

__all__ = [
    "is_built",
    "matmul",
    "enable_flash_sdp",
    "flash_sdp_enabled",
    "enable_mem_efficient_sdp",
    "mem_efficient_sdp_enabled",
    "enable_math_sdp",
    "math_sdp_enabled",
    "enable_cudnn_sdp",
    "cudnn_sdp_enabled",
]

matmul = FlagObject(
    "flow.backends.cuda.matmul",
    {
        "allow_tf32": False,
        "allow_fp16_reduced_precision_reduction": True,
        "allow_bf16_reduced_precision_reduction": True,
    },
)

_SDP = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built() -> bool:
    """Whether flow can use CUDA: when a plugin (flow-cuda) provides ``flow.cuda``'s device."""
    from flow import provided

    return provided.get("cuda") is not None


def _sdp(kind: str):
    def enable(enabled: bool) -> None:
        _SDP[kind] = _check_bool(f"flow.backends.cuda.enable_{kind}_sdp", enabled)

    def is_enabled() -> bool:
        return _SDP[kind]

    enable.__name__, is_enabled.__name__ = f"enable_{kind}_sdp", f"{kind}_sdp_enabled"
    enable.__doc__ = f"Allow or forbid the {kind} attention backend (recorded; no effect on CPU)."
    is_enabled.__doc__ = f"Whether the {kind} attention backend is allowed."
    return enable, is_enabled


enable_flash_sdp, flash_sdp_enabled = _sdp("flash")
enable_mem_efficient_sdp, mem_efficient_sdp_enabled = _sdp("mem_efficient")
enable_math_sdp, math_sdp_enabled = _sdp("math")
enable_cudnn_sdp, cudnn_sdp_enabled = _sdp("cudnn")
