"""Tensor methods and properties of PyTorch's API that flow answers for compatibility: shared memory
(``share_memory_``, ``is_shared``), the layout and device predicates (``is_sparse``, ``is_mps`` ...), the
legacy ``type()`` and ``memory_format=`` on ``to`` / ``contiguous`` / ``clone`` (see flow._memory_format).

Listed before :class:`flow._methods.conversion.ConversionMethods` among Tensor's bases, so that the
``memory_format`` forms here check their argument and then hand over to the conversions there.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class CompatMethods:
    __slots__ = ()

    # -- shared memory (flow.multiprocessing) ----------------------------------------------
    def share_memory_(self):
        """Move the data into memory shared with processes forked later (Hogwild training); in place,
        so the tensor (a Parameter too) keeps its identity. Views taken before the call keep the old
        memory; views taken after it share. A no-op for a tensor already shared and for device (non-CPU)
        tensors, as in PyTorch."""
        from flow.errors import FlowError
        from flow.multiprocessing._shared import is_shared_array, share_array

        if self.device.type != "cpu" or is_shared_array(self._data):
            return self
        if self._data.__class__ is not np.ndarray:
            raise FlowError(
                f"share_memory_(): only plain CPU tensors can be moved to shared memory, this one holds a "
                f"{type(self._data).__name__}"
            )
        self._data = share_array(self._data)
        return self

    def is_shared(self) -> bool:
        """Whether the data is in shared memory (after :meth:`share_memory_`)."""
        from flow.multiprocessing._shared import is_shared_array

        return is_shared_array(self._data)

    # -- layout and device predicates (flow tensors are dense, never quantized) -------------------
    @property
    def is_sparse(self) -> bool:
        return False

    @property
    def is_quantized(self) -> bool:
        return False

    @property
    def is_mps(self) -> bool:
        return self.device.type == "mps"

    @property
    def is_xpu(self) -> bool:
        return self.device.type == "xpu"

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    def get_device(self) -> int:
        """The device index: -1 on the CPU."""
        from flow._typeinfo import get_device

        return get_device(self)

    # -- the legacy type API ----------------------------------------------------------------
    def type(self, dtype: Any = None, non_blocking: bool = False, **kwargs: Any):
        """With no argument the type's name (``'flow.FloatTensor'``); else this tensor converted to
        ``dtype``: a legacy type (``flow.LongTensor``), its name (``'flow.LongTensor'``,
        ``'torch.LongTensor'``) or a dtype."""
        from flow import _legacy_types

        if kwargs:
            raise TypeError(f"type() got unexpected keyword arguments {sorted(kwargs)}")
        if dtype is None:
            return _legacy_types.type_name(self)
        return _legacy_types.convert(self, dtype, non_blocking)

    # -- memory_format= (row-major whatever the format, see flow._memory_format) --------------------
    def to(self, *args, memory_format=None, **kwargs):
        from flow._memory_format import check

        check("to()", memory_format, self.ndim)
        return super().to(*args, **kwargs)

    def contiguous(self, memory_format=None):
        from flow._memory_format import check

        check("contiguous()", memory_format, self.ndim)
        return super().contiguous()

    def clone(self, *, memory_format=None):
        from flow._memory_format import check

        check("clone()", memory_format, self.ndim)
        return super().clone()
