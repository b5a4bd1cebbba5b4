"""``flow.nn.DataParallel``: PyTorch's single-process data parallelism, here for CPU-only scripts.

Without an accelerator, PyTorch's ``DataParallel`` keeps the module and calls it unchanged
(``device_ids`` is ``[]``); flow's does the same, so a script that wraps its model runs on the CPU as it
would there: same outputs, ``.module`` the wrapped model, state-dict keys prefixed with ``module.``.
Splitting a batch over several CUDA devices is not implemented: use
``flow.nn.parallel.DistributedDataParallel`` (flow-dist) for data parallelism.
"""

from __future__ import annotations

from typing import Any, Sequence

from flow.errors import FlowError
from flow.nn.modules.module import Module

__all__ = ["DataParallel"]


class DataParallel(Module):
    """``DataParallel(module, device_ids=None, output_device=None, dim=0)``: calls ``module`` as it is
    where no accelerator is available (as PyTorch does)."""

    def __init__(
        self, module: Module, device_ids: Sequence[Any] | None = None, output_device: Any = None, dim: int = 0
    ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel: expected an nn.Module, got {type(module).__name__}")
        import flow.accelerator

        if flow.accelerator.is_available():
            raise FlowError(
                "DataParallel: splitting a batch over accelerator devices is not implemented; use "
                "flow.nn.parallel.DistributedDataParallel (flow-dist)"
            )
        self.module = module
        self.device_ids: list[int] = []

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)
