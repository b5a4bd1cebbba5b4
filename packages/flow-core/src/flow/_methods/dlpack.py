"""``Tensor.__dlpack__`` and ``Tensor.__dlpack_device__``: the DLPack protocol (see :mod:`flow.utils.dlpack`)."""

from __future__ import annotations

from typing import Any


class DLPackMethods:
    __slots__ = ()

    def __dlpack__(
        self,
        stream: Any = None,
        *,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule sharing this CPU tensor's memory (``np.from_dlpack(t)``, ``torch.from_dlpack(t)``).

        Refuses (``BufferError``) tensors that require grad, as PyTorch does, and complex, global and
        non-CPU tensors."""
        from flow.utils.dlpack import tensor_dlpack

        return tensor_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device type, device id)`` of DLPack: ``(1, 0)`` for CPU tensors."""
        from flow.utils.dlpack import tensor_dlpack_device

        return tensor_dlpack_device(self)
