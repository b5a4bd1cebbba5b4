"""Tensor methods for matrix products."""

from __future__ import annotations

import flow.ops.linalg as _L


class LinalgMethods:
    __slots__ = ()

    def __matmul__(self, other):
        return _L.matmul(self, other)

    def __rmatmul__(self, other):
        return _L.matmul(other, self)

    def matmul(self, other):
        return _L.matmul(self, other)

    def mm(self, mat2):
        return _L.mm(self, mat2)

    def bmm(self, mat2):
        return _L.bmm(self, mat2)
