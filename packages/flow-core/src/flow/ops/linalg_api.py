"""The functions of :mod:`flow.linalg`, and PyTorch's top-level linear-algebra names (``flow.det``,
``flow.inverse``, ``flow.svd`` ...).

The decompositions are the ops of :mod:`flow.ops.linalg_decomp`; norms, ``pinv``, ``lstsq``,
``matrix_rank``, ``cross``, ``multi_dot`` and ``matrix_power`` are written with them and other flow
ops, so their gradients follow by composition.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import linalg_decomp as _K
from flow.ops import meta as M
from flow.ops.reduction import return_type

_RT = "flow.ops.linalg_api"
SlogdetResult = return_type("linalg_slogdet", "SlogdetResult", _RT, ("sign", "logabsdet"))
EighResult = return_type("linalg_eigh", "EighResult", _RT, ("eigenvalues", "eigenvectors"))
QRResult = return_type("linalg_qr", "QRResult", _RT, ("Q", "R"))
SVDResult = return_type("linalg_svd", "SVDResult", _RT, ("U", "S", "Vh"))
LegacySVDResult = return_type("svd", "LegacySVDResult", _RT, ("U", "S", "V"))
LstsqResult = return_type("linalg_lstsq", "LstsqResult", _RT, ("solution", "residuals", "rank", "singular_values"))


def _check(op: str, x, min_ndim: int = 2, arg: str = "A") -> None:
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
    if x.ndim < min_ndim:
        raise OpError(op, f"'{arg}' must have at least {min_ndim} dimensions, got shape {tuple(x.shape)}")


def _check_square(op: str, x, arg: str = "A") -> None:
    _check(op, x, 2, arg)
    if x.shape[-1] != x.shape[-2]:
        raise OpError(op, f"'{arg}' must be a batch of square matrices, got shape {tuple(x.shape)}")


def _mT(x):
    return x.transpose(-1, -2)


# -- decompositions and solvers --------------------------------------------------------------------
def inv(A):
    """The inverse of each square matrix in ``A`` (..., n, n); raises OpError when one is singular."""
    _check_square("linalg.inv", A)
    return call(_K.LINALG_INV, A)


def det(A):
    """The determinant of each square matrix in ``A`` (..., n, n)."""
    _check_square("linalg.det", A)
    return call(_K.LINALG_DET, A)


def slogdet(A):
    """``(sign, logabsdet)`` of the determinant of each matrix: ``det = sign * exp(logabsdet)``."""
    _check_square("linalg.slogdet", A)
    return SlogdetResult(*call(_K.LINALG_SLOGDET, A))


def _is_vector_rhs(A, B) -> bool:
    # PyTorch's rule: B is a (batch of) vector(s) when 1-d, or when its shape is A's without the last dim
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def solve(A, B, *, left: bool = True):
    """The solution X of ``A X = B`` (``X A = B`` when ``left=False``), batched and broadcast as PyTorch."""
    op = "linalg.solve"
    _check_square(op, A)
    _check(op, B, 1, "B")
    if not left:
        if B.ndim < 2:
            raise OpError(op, f"'B' must have at least 2 dimensions when left=False, got shape {tuple(B.shape)}")
        return _mT(solve(_mT(A), _mT(B)))
    if _is_vector_rhs(A, B):
        return call(_K.LINALG_SOLVE, A, B.unsqueeze(-1)).squeeze(-1)
    return call(_K.LINALG_SOLVE, A, B)


def cholesky(A, *, upper: bool = False):
    """The Cholesky factor L (``A = L L^T``; U with ``A = U^T U`` when ``upper``) of symmetric positive-definite
    matrices; raises OpError when one is not positive-definite."""
    _check_square("linalg.cholesky", A)
    return call(_K.LINALG_CHOLESKY, A, upper=bool(upper))


def qr(A, mode: str = "reduced"):
    """``(Q, R)`` with ``A = Q R``; ``mode`` is 'reduced', 'complete' or 'r' (Q is then empty)."""
    _check("linalg.qr", A)
    return QRResult(*call(_K.LINALG_QR, A, mode=mode))


def _check_uplo(op: str, UPLO: str) -> None:
    # the kernels read the symmetric part of A, so for symmetric input (the documented case) both agree
    if UPLO not in ("L", "U"):
        raise OpError(op, f"'UPLO' must be 'L' or 'U', got {UPLO!r}")


def eigh(A, UPLO: str = "L"):
    """``(eigenvalues, eigenvectors)`` of symmetric matrices, eigenvalues ascending."""
    _check_square("linalg.eigh", A)
    _check_uplo("linalg.eigh", UPLO)
    return EighResult(*call(_K.LINALG_EIGH, A))


def eigvalsh(A, UPLO: str = "L"):
    """The eigenvalues (ascending) of symmetric matrices."""
    _check_square("linalg.eigvalsh", A)
    _check_uplo("linalg.eigvalsh", UPLO)
    return call(_K.LINALG_EIGH, A)[0]


def svd(A, full_matrices: bool = True):
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``; gradients need distinct singular values (as PyTorch)."""
    _check("linalg.svd", A)
    return SVDResult(*call(_K.LINALG_SVD, A, full_matrices=bool(full_matrices)))


def svdvals(A):
    """The singular values of ``A``, descending."""
    _check("linalg.svdvals", A)
    return call(_K.LINALG_SVD, A, full_matrices=False)[1]


def _tolerance(s, smax, m: int, n: int, atol, rtol):
    # PyTorch's rule: tol = max(atol, rtol * sigma_max); rtol defaults to eps * max(m, n) when atol is not given
    if rtol is None:
        rtol = 0.0 if (atol is not None and atol > 0) else float(np.finfo(s.dtype.np).eps) * max(m, n)
    tol = smax * float(rtol)
    if atol is not None:
        tol = tol.clamp(min=float(atol))
    return tol


def pinv(A, *, atol: float | None = None, rtol: float | None = None, hermitian: bool = False):
    """The Moore-Penrose pseudo-inverse: singular values at or below the tolerance are treated as zero."""
    from flow.ops.clamp_where import where

    _check("linalg.pinv", A)
    m, n = A.shape[-2], A.shape[-1]
    if hermitian:
        _check_square("linalg.pinv", A)
        w, v = call(_K.LINALG_EIGH, A)
        aw = w.abs()
        keep = aw > _tolerance(aw, aw.amax(-1, keepdim=True), m, n, atol, rtol)
        winv = where(keep, 1.0 / where(keep, w, 1.0), 0.0)  # no 1/0 in either branch: gradients stay finite
        return (v * winv.unsqueeze(-2)) @ _mT(v)
    u, s, vh = call(_K.LINALG_SVD, A, full_matrices=False)
    keep = s > _tolerance(s, s[..., :1], m, n, atol, rtol)
    sinv = where(keep, 1.0 / where(keep, s, 1.0), 0.0)
    return _mT(vh) @ (sinv.unsqueeze(-1) * _mT(u))


def matrix_rank(A, *, atol: float | None = None, rtol: float | None = None, hermitian: bool = False):
    """The number of singular values above the tolerance (int64)."""
    from flow import _dtype as D
    from flow.autograd import no_grad

    _check("linalg.matrix_rank", A)
    m, n = A.shape[-2], A.shape[-1]
    with no_grad():
        if hermitian:
            _check_square("linalg.matrix_rank", A)
            s = call(_K.LINALG_EIGH, A)[0].abs()
            smax = s.amax(-1, keepdim=True)
        else:
            s = svdvals(A)
            smax = s[..., :1]
        return (s > _tolerance(s, smax, m, n, atol, rtol)).sum(-1).to(D.int64)


def lstsq(A, B, rcond: float | None = None, *, driver: str | None = None):
    """The least-squares solution of ``A X = B`` as PyTorch's default CPU driver 'gelsy' gives it: ``solution``
    and ``rank``; ``residuals`` and ``singular_values`` are empty (that driver computes neither)."""
    from flow._creation import zeros

    op = "linalg.lstsq"
    _check(op, A)
    _check(op, B, 2, "B")
    if driver not in (None, "gelsy"):
        raise OpError(op, f"driver={driver!r} is not supported; flow implements PyTorch's CPU default 'gelsy'")
    if B.shape[-2] != A.shape[-2]:
        raise OpError(op, f"'A' of shape {tuple(A.shape)} and 'B' of shape {tuple(B.shape)} differ in rows")
    M.broadcast_shapes(op, tuple(A.shape[:-2]), tuple(B.shape[:-2]))
    x = pinv(A, rtol=rcond) @ B
    empty = zeros(0, dtype=A.dtype, device=A.device)
    return LstsqResult(x, empty, matrix_rank(A, rtol=rcond), empty)


# -- norms -----------------------------------------------------------------------------------------
def vector_norm(x, ord: float = 2, dim=None, keepdim: bool = False, *, dtype=None):
    """The vector ``ord``-norm over ``dim`` (every element when None): any number, inf or -inf."""
    from flow.ops.reduction_stats import norm

    _check("linalg.vector_norm", x, 0, "x")
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise OpTypeError("linalg.vector_norm", f"'ord' must be a number, got {ord!r}")
    return norm(x, float(ord), dim, keepdim, dtype=dtype)


_MATRIX_ORDS = ("fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2)


def matrix_norm(A, ord="fro", dim: Sequence[int] = (-2, -1), keepdim: bool = False, *, dtype=None):
    """The matrix norm over the two dims ``dim``: 'fro', 'nuc', inf, -inf, 1, -1, 2 or -2."""
    op = "linalg.matrix_norm"
    _check(op, A)
    if ord not in _MATRIX_ORDS or isinstance(ord, bool):
        raise OpError(op, f"'ord' must be one of {_MATRIX_ORDS}, got {ord!r}")
    dims = tuple(dim)
    if len(dims) != 2:
        raise OpError(op, f"'dim' must name 2 dimensions, got {dim!r}")
    d0, d1 = M.wrap_dims(op, dims, A.ndim)
    if d0 == d1:
        raise OpError(op, f"'dim' names a dimension twice: {dim!r}")
    if dtype is not None:
        A = A.to(dtype)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        s = svdvals(A.movedim((d0, d1), (-2, -1)))
        r = s.sum(-1) if ord == "nuc" else s.amax(-1) if ord == 2 else s.amin(-1)
    else:
        # 1: the largest column sum of |A| (sum over rows d0); inf: the largest row sum (sum over columns d1)
        summed, other = (d0, d1) if abs(ord) == 1 else (d1, d0)
        a = A.abs().sum(summed, keepdim=True)
        r = a.amax(other, keepdim=True) if ord > 0 else a.amin(other, keepdim=True)
        return r if keepdim else r.squeeze((d0, d1))
    if keepdim:
        for d in sorted((d0, d1)):
            r = r.unsqueeze(d)
    return r


def norm(A, ord=None, dim=None, keepdim: bool = False, *, dtype=None):
    """A vector or matrix norm, chosen as PyTorch does: by ``dim`` (an int or a pair) or by ``A.ndim``."""
    op = "linalg.norm"
    _check(op, A, 0)
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or (dim is None and ord is not None and A.ndim == 2):
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
    if dim is None and ord is not None and A.ndim != 1:
        raise OpError(op, f"a norm with ord={ord!r} and dim=None needs a 1-d or 2-d input, got shape {tuple(A.shape)}")
    if isinstance(ord, str):
        raise OpError(op, f"ord={ord!r} is a matrix norm: give a 2-d input or two dims")
    if dim is not None and len(dim) != 1:
        raise OpError(op, f"'dim' must be an int, or a tuple of 1 or 2 ints, got {dim!r}")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# -- products --------------------------------------------------------------------------------------
def cross(input, other, *, dim: int = -1):
    """The cross product of 3-vectors along ``dim`` (batch dims broadcast)."""
    op = "linalg.cross"
    _check(op, input, 1, "input")
    _check(op, other, 1, "other")
    if input.ndim != other.ndim:  # as PyTorch: broadcasting only between inputs of one rank
        raise OpError(
            op, f"inputs must have the same number of dims, got {tuple(input.shape)} and {tuple(other.shape)}"
        )
    shape = M.broadcast_shapes(op, tuple(input.shape), tuple(other.shape))
    d = M.wrap_dim(op, dim, len(shape))
    if shape[d] != 3:
        raise OpError(op, f"dim {dim} must have size 3, got shapes {tuple(input.shape)} and {tuple(other.shape)}")
    a, b = input.expand(*shape), other.expand(*shape)
    # c_i = a_{i+1} b_{i+2} - a_{i+2} b_{i+1}: rolls of the whole vectors keep this one expression
    return a.roll(-1, d) * b.roll(-2, d) - a.roll(-2, d) * b.roll(-1, d)


def multi_dot(tensors: Sequence):
    """The product of a chain of matrices; the first and the last may be 1-d (a row and a column vector)."""
    from flow.ops.linalg import matmul

    op = "linalg.multi_dot"
    ts = list(tensors)
    if len(ts) < 2:
        raise OpError(op, f"expected at least 2 tensors, got {len(ts)}")
    for i, t in enumerate(ts):
        _check(op, t, 1, f"tensors[{i}]")
        ok = t.ndim == 2 or (t.ndim == 1 and i in (0, len(ts) - 1))
        if not ok:
            raise OpError(op, f"tensors[{i}] must be 2-d (the first and last may be 1-d), got shape {tuple(t.shape)}")
    out = ts[0]
    for t in ts[1:]:
        out = matmul(out, t)
    return out


def matrix_power(A, n: int):
    """``A`` multiplied by itself ``n`` times (the identity for 0, powers of the inverse for n < 0)."""
    from flow.ops.linalg import matmul

    op = "linalg.matrix_power"
    _check_square(op, A)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise OpTypeError(op, f"'n' must be an int, got {type(n).__name__}")
    n = int(n)
    if n == 0:
        # as PyTorch, the identity stays connected to A's graph (with a zero gradient)
        return A * 0.0 + _K._eye_like(A, A.shape[-1])
    base = inv(A) if n < 0 else A
    n = abs(n)
    out = None
    while n:  # binary powering: O(log n) products
        if n & 1:
            out = base if out is None else matmul(out, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return out


inverse = inv

__all__: list = []  # exported as flow.linalg.*; the top-level names are in flow.ops.linalg_legacy
