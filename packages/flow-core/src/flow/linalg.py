"""``flow.linalg``: linear algebra with PyTorch's names and signatures (``torch.linalg``).

Every function batches over leading dims and takes float32 or float64 tensors. Gradients are
the standard closed forms (see :mod:`flow.ops.linalg_decomp`); as in PyTorch, those of ``svd``
and ``eigh`` need distinct singular values / eigenvalues, and those of ``det`` an invertible
matrix. ``cholesky``, ``eigh`` and ``eigvalsh`` read the symmetric part of their input (PyTorch
reads one triangle: the same for symmetric input). ``lstsq`` follows the CPU default driver
'gelsy'. Complex matrices are not supported (flow has no complex dtype).
"""

from __future__ import annotations

from flow.ops.linalg import matmul
from flow.ops.linalg_api import (
    cholesky,
    cross,
    det,
    eigh,
    eigvalsh,
    inv,
    lstsq,
    matrix_norm,
    matrix_power,
    matrix_rank,
    multi_dot,
    norm,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
    svdvals,
    vector_norm,
)
from flow.ops.linalg_triangular import solve_triangular

__all__ = [
    "cholesky",
    "cross",
    "det",
    "eigh",
    "eigvalsh",
    "inv",
    "lstsq",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "multi_dot",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_triangular",
    "svd",
    "svdvals",
    "vector_norm",
]
