"""PyTorch's top-level linear-algebra names: ``flow.det``, ``flow.inverse``, ``flow.svd`` (the legacy
signature, returning V) ... The ``flow.linalg`` functions they wrap are in :mod:`flow.ops.linalg_api`."""

from __future__ import annotations

import math

from flow.ops import linalg_api as _A


def det(input):
    """The determinant of each square matrix (``flow.linalg.det``)."""
    return _A.det(input)


def inverse(input):
    """The inverse of each square matrix (``flow.linalg.inv``)."""
    return _A.inv(input)


def slogdet(input):
    """``(sign, logabsdet)`` of each determinant (``flow.linalg.slogdet``)."""
    return _A.slogdet(input)


def logdet(input):
    """``log(det(input))``: nan for a negative determinant and -inf for a zero one, as PyTorch."""
    from flow.ops.clamp_where import where

    sign, logabs = _A.slogdet(input)
    return where(sign < 0, math.nan, logabs)


def svd(input, some: bool = True, compute_uv: bool = True):
    """``torch.svd``: ``(U, S, V)`` with ``input = U diag(S) V^T`` (V, not Vh); ``some=False`` gives full U
    and V. With ``compute_uv=False`` U and V are zero-filled (m, m) and (n, n) matrices, as PyTorch."""
    from flow._creation import zeros

    _A._check("svd", input, 2, "input")
    if not compute_uv:
        m, n = input.shape[-2], input.shape[-1]
        b = tuple(input.shape[:-2])
        s = _A.svdvals(input)
        return _A.LegacySVDResult(zeros(*b, m, m, dtype=input.dtype), s, zeros(*b, n, n, dtype=input.dtype))
    u, s, vh = _A.svd(input, full_matrices=not some)
    return _A.LegacySVDResult(u, s, vh.transpose(-1, -2))


def cholesky(input, upper: bool = False):
    """``torch.cholesky``: the lower (or ``upper``) Cholesky factor."""
    return _A.cholesky(input, upper=upper)


def qr(input, some: bool = True):
    """``torch.qr``: ``(Q, R)``, reduced when ``some`` else complete."""
    return _A.qr(input, "reduced" if some else "complete")


def pinverse(input, rcond: float = 1e-15):
    """``torch.pinverse``: the pseudo-inverse with singular values at or below ``rcond * max(S)`` dropped."""
    return _A.pinv(input, rtol=rcond)


def matrix_power(input, n: int):
    """``input`` to the integer power ``n`` (``flow.linalg.matrix_power``)."""
    return _A.matrix_power(input, n)


__all__ = ["det", "inverse", "slogdet", "logdet", "svd", "cholesky", "qr", "pinverse", "matrix_power"]
