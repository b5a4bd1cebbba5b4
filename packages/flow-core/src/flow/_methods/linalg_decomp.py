"""Tensor methods for decompositions and determinants (``x.det()``, ``x.svd()`` ...), delegating to
:mod:`flow.ops.linalg_legacy` (PyTorch's top-level signatures)."""

from __future__ import annotations

import flow.ops.linalg_legacy as _L


class LinalgDecompMethods:
    __slots__ = ()

    def det(self):
        return _L.det(self)

    def logdet(self):
        return _L.logdet(self)

    def slogdet(self):
        return _L.slogdet(self)

    def inverse(self):
        return _L.inverse(self)

    def svd(self, some: bool = True, compute_uv: bool = True):
        return _L.svd(self, some, compute_uv)

    def cholesky(self, upper: bool = False):
        return _L.cholesky(self, upper)

    def qr(self, some: bool = True):
        return _L.qr(self, some)

    def pinverse(self, rcond: float = 1e-15):
        return _L.pinverse(self, rcond)

    def matrix_power(self, n: int):
        return _L.matrix_power(self, n)
