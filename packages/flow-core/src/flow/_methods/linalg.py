"""Tensor methods for matrix products."""

from __future__ import annotations

import flow.ops.linalg as _L
from flow.ops.inplace import inplace_call


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

    def dot(self, other):
        return _L.dot(self, other)

    def vdot(self, other):
        return _L.vdot(self, other)

    def outer(self, vec2):
        return _L.outer(self, vec2)

    def ger(self, vec2):
        return _L.outer(self, vec2)

    def inner(self, other):
        return _L.inner(self, other)

    def mv(self, vec):
        return _L.mv(self, vec)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return _L.addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def addmm_(self, mat1, mat2, *, beta=1, alpha=1):
        return inplace_call(self, "addmm_", lambda x, a, b: _L.addmm(x, a, b, beta=beta, alpha=alpha), mat1, mat2)

    def addmv(self, mat, vec, *, beta=1, alpha=1):
        return _L.addmv(self, mat, vec, beta=beta, alpha=alpha)

    def addr(self, vec1, vec2, *, beta=1, alpha=1):
        return _L.addr(self, vec1, vec2, beta=beta, alpha=alpha)

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return _L.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def baddbmm_(self, batch1, batch2, *, beta=1, alpha=1):
        return inplace_call(
            self, "baddbmm_", lambda x, a, b: _L.baddbmm(x, a, b, beta=beta, alpha=alpha), batch1, batch2
        )

    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return _L.addbmm(self, batch1, batch2, beta=beta, alpha=alpha)
