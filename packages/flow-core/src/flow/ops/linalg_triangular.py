"""``flow.linalg.solve_triangular``, as ``torch.linalg.solve_triangular``.

A composite of flow ops: the triangle named by ``upper`` is taken from ``A`` (``tril`` / ``triu``,
the diagonal replaced by ones when ``unitriangular``) and handed to the ``linalg_solve`` op (the LU solve). So it
runs on every device and under graph mode, and its gradient follows by composition: the masking
restricts the gradient of ``A`` to the triangle read, as PyTorch's is, and it can be differentiated
again. The LU solve of a triangular matrix is backward stable like a substitution; a matrix with a
zero on the diagonal (singular) raises the OpError of ``linalg.solve`` where PyTorch returns inf/nan.
"""

from __future__ import annotations

from flow.errors import OpError, OpTypeError


def _triangle(A, upper: bool, unitriangular: bool):
    T = A.triu(1 if unitriangular else 0) if upper else A.tril(-1 if unitriangular else 0)
    if unitriangular:
        from flow._creation import eye

        # the diagonal of A is not read at all (nor differentiated), as PyTorch's
        T = T + eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return T


def solve_triangular(A, B, *, upper: bool, left: bool = True, unitriangular: bool = False):
    """The solution ``X`` of ``A X = B`` (``X A = B`` when ``left=False``) for triangular ``A`` (..., n, n)
    and ``B`` (..., n, k) (``(..., k, n)`` when ``left=False``); batches broadcast. Only the upper
    (``upper=True``) or lower triangle of ``A`` is read; with ``unitriangular`` its diagonal is taken
    to be ones."""
    from flow._dispatch import call
    from flow._tensor import Tensor
    from flow.ops.linalg_decomp import LINALG_SOLVE

    op = "linalg.solve_triangular"
    for name, t in (("A", A), ("B", B)):
        if not isinstance(t, Tensor):
            raise OpTypeError(op, f"'{name}' must be a Tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise OpError(op, f"'{name}' must have at least 2 dimensions, got shape {tuple(t.shape)}")
    if not isinstance(upper, bool):
        raise OpTypeError(op, f"'upper' must be a bool, got {type(upper).__name__}")
    if A.shape[-1] != A.shape[-2]:
        raise OpError(op, f"'A' must be a batch of square matrices, got shape {tuple(A.shape)}")
    n = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        side = "rows" if left else "columns"
        raise OpError(op, f"'B' of shape {tuple(B.shape)} must have {n} {side} to match 'A' of shape {tuple(A.shape)}")
    if A.dtype != B.dtype:
        raise OpTypeError(op, f"'A' and 'B' must have the same dtype, got {A.dtype} and {B.dtype}")
    T = _triangle(A, upper, bool(unitriangular))
    # the op directly, not linalg.solve: B is always a matrix here (solve would take a B of shape A.shape[:-1]
    # for a batch of vectors)
    if left:
        return call(LINALG_SOLVE, T, B)
    return call(LINALG_SOLVE, T.mT, B.mT).mT


__all__ = ["solve_triangular"]
