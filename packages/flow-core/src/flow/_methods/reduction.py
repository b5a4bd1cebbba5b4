"""Tensor methods for reductions."""

from __future__ import annotations

import flow.ops.reduction as _R


class ReductionMethods:
    __slots__ = ()

    def sum(self, dim=None, keepdim: bool = False, *, dtype=None):
        return _R.sum(self, dim, keepdim, dtype=dtype)

    def mean(self, dim=None, keepdim: bool = False, *, dtype=None):
        return _R.mean(self, dim, keepdim, dtype=dtype)
