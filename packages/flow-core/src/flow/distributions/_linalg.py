"""Differentiable Cholesky factorisation and triangular solves for ``MultivariateNormal``.

flow has no ``linalg.cholesky`` op yet, so these are ``autograd.Function``s computing on the host
with NumPy. Their backward formulas are written with flow ops and with these functions
themselves, so they can be differentiated again.
"""

from __future__ import annotations

import numpy as np

from flow.autograd.function import Function

__all__ = ["cholesky", "solve_triangular"]


def _host(t) -> np.ndarray:
    return np.asarray(t.numpy_host())


def _like(a: np.ndarray, ref):
    from flow._creation import tensor

    return tensor(np.ascontiguousarray(a, dtype=_host(ref).dtype), device=ref.device)


class _SolveTriangular(Function):
    @staticmethod
    def forward(ctx, A, B, upper: bool):
        a, b = _host(A), _host(B)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = np.broadcast_to(a, batch + a.shape[-2:])
        b = np.broadcast_to(b, batch + b.shape[-2:])
        # the triangle not named by `upper` is ignored, as torch.linalg.solve_triangular does
        a = np.triu(a) if upper else np.tril(a)
        x = np.linalg.solve(a, b) if a.size else np.zeros(batch + b.shape[-2:], dtype=b.dtype)
        X = _like(x, B)
        ctx.save_for_backward(A, X)
        ctx.upper = upper
        return X

    @staticmethod
    def backward(ctx, gX):
        A, X = ctx.saved_tensors
        # X = A^-1 B:  dB = A^-T dX,  dA = -dB X^T restricted to A's triangle
        gB = solve_triangular(A.mT, gX, upper=not ctx.upper)
        gA = -(gB @ X.mT)
        gA = gA.triu() if ctx.upper else gA.tril()
        return gA, gB, None


class _Cholesky(Function):
    @staticmethod
    def forward(ctx, A):
        a = _host(A)
        try:
            low = np.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            raise ValueError(
                f"cholesky: the input of shape {tuple(A.shape)} is not positive-definite (the factorisation failed)"
            ) from None
        L = _like(low, A)
        ctx.save_for_backward(L)
        return L

    @staticmethod
    def backward(ctx, gL):
        (L,) = ctx.saved_tensors
        # A = L L^T:  dA = sym(L^-T Phi(L^T dL) L^-1), Phi = lower triangle with the diagonal halved
        P = L.mT @ gL.tril()
        P = P.tril() - 0.5 * P.diagonal(dim1=-2, dim2=-1).diag_embed()
        S = solve_triangular(L.mT, P, upper=True)  # L^-T P
        S = solve_triangular(L.mT, S.mT, upper=True).mT  # (L^-T P) L^-1
        return 0.5 * (S + S.mT)


def solve_triangular(A, B, *, upper: bool):
    """``X`` with ``A @ X = B`` for triangular ``A`` (batched, broadcasting), as ``torch.linalg.solve_triangular``."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"solve_triangular: A must be a batch of square matrices, got shape {tuple(A.shape)}")
    if B.dim() < 2 or B.shape[-2] != A.shape[-1]:
        raise ValueError(f"solve_triangular: B of shape {tuple(B.shape)} does not match A of shape {tuple(A.shape)}")
    return _SolveTriangular.apply(A, B, upper)


def cholesky(A):
    """The lower-triangular ``L`` with ``L @ L.mT == A`` for symmetric positive-definite ``A`` (batched)."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"cholesky: expected a batch of square matrices, got shape {tuple(A.shape)}")
    return _Cholesky.apply(A)
