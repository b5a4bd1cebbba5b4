"""``flow.cuda.amp``: PyTorch's deprecated ``torch.cuda.amp`` aliases, on flow-amp.

``flow.cuda.amp.autocast(...)`` is ``flow.amp.autocast("cuda", ...)`` and ``flow.cuda.amp.GradScaler(...)``
is ``flow.amp.GradScaler("cuda", ...)``; both warn that they are deprecated, as PyTorch's do. Where CUDA
is not available they warn and turn themselves off, again as PyTorch does, so that a CUDA training
script runs unchanged (in full precision, without loss scaling) on a CPU-only machine.
``custom_fwd`` / ``custom_bwd`` are flow-amp's with ``device_type="cuda"``.

Mixed precision is flow-amp's: without it every name here raises
:class:`flow.errors.FeatureNotInstalledError` naming the package.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from flow import provided

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]  # noqa: F822 - built on first use (__getattr__)

_CACHE: dict[str, tuple[Any, Any]] = {}  # name -> (the flow-amp module it was built on, the object)


def _amp(what: str) -> Any:
    return provided.require("amp", f"flow.cuda.amp.{what} (mixed precision)")


def _cuda_available() -> bool:
    import flow.cuda

    return flow.cuda.is_available()


def _build(name: str) -> Any:
    amp = _amp(name)
    if name == "autocast":

        class autocast(amp.autocast):
            """``flow.cuda.amp.autocast(enabled=True, dtype=flow.float16, cache_enabled=True)``: deprecated
            alias of ``flow.amp.autocast("cuda", ...)``; off (with a warning) where CUDA is not available."""

            def __init__(self, enabled: bool = True, dtype: Any = None, cache_enabled: bool = True) -> None:
                import flow

                warnings.warn(
                    "flow.cuda.amp.autocast(args...) is deprecated. Please use flow.amp.autocast('cuda', args...) "
                    "instead.",
                    FutureWarning,
                    stacklevel=2,
                )
                if enabled and not _cuda_available():
                    warnings.warn("CUDA is not available. Disabling autocast.", UserWarning, stacklevel=2)
                    enabled = False
                super().__init__(
                    "cuda", dtype=flow.float16 if dtype is None else dtype, enabled=enabled, cache_enabled=cache_enabled
                )

        autocast.__module__ = __name__
        return autocast
    if name == "GradScaler":

        class GradScaler(amp.GradScaler):
            """``flow.cuda.amp.GradScaler(init_scale=2.0**16, ...)``: deprecated alias of
            ``flow.amp.GradScaler("cuda", ...)``; off (with a warning) where CUDA is not available."""

            def __init__(
                self,
                init_scale: float = 2.0**16,
                growth_factor: float = 2.0,
                backoff_factor: float = 0.5,
                growth_interval: int = 2000,
                enabled: bool = True,
            ) -> None:
                warnings.warn(
                    "flow.cuda.amp.GradScaler(args...) is deprecated. Please use flow.amp.GradScaler('cuda', "
                    "args...) instead.",
                    FutureWarning,
                    stacklevel=2,
                )
                if enabled and not _cuda_available():
                    warnings.warn(
                        "flow.cuda.amp.GradScaler is enabled, but CUDA is not available. Disabling.",
                        UserWarning,
                        stacklevel=2,
                    )
                    enabled = False
                super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

        GradScaler.__module__ = __name__
        return GradScaler
    if name in ("custom_fwd", "custom_bwd"):
        return functools.partial(getattr(amp, name), device_type="cuda")
    raise AttributeError(f"module 'flow.cuda.amp' has no attribute '{name}'")


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'flow.cuda.amp' has no attribute '{name}'")
    amp = _amp(name)  # asked every time: flow-amp may have been unloaded since
    hit = _CACHE.get(name)
    if hit is None or hit[0] is not amp:
        hit = _CACHE[name] = (amp, _build(name))
    return hit[1]
