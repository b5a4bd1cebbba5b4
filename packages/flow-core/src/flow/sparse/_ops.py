"""The computations on sparse COO tensors: construction, coalesce, to_dense / to_sparse, sum, mm.

Patterns (indices) are handled on the host with NumPy; values only ever go through dense,
differentiable flow ops (``index_add`` to scatter and sum, ``index_select`` to gather), so autograd,
devices and interceptors see ordinary ops.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from flow import _creation as C
from flow import _dtype as D
from flow._tensor import Tensor
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.sparse._coo import SparseTensor


def _host_indices(op: str, indices: Any) -> np.ndarray:
    if isinstance(indices, SparseTensor):
        raise OpTypeError(op, "indices must be a dense integer tensor, got a sparse tensor")
    arr = indices.detach().numpy() if isinstance(indices, Tensor) else np.asarray(indices)
    if arr.size == 0 and arr.ndim <= 1:
        arr = arr.reshape(1 if arr.ndim == 1 and arr.shape[0] == 0 else 0, 0)
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise OpTypeError(op, f"indices must be an integer tensor, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise OpError(op, f"indices must be 2-d (sparse_dim, nnz), got shape {tuple(arr.shape)}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _linear(indices: np.ndarray, shape: tuple) -> np.ndarray:
    """Row-major positions of the entries (the order coalesce sorts them in)."""
    if indices.shape[0] == 0:
        return np.zeros(indices.shape[1], dtype=np.int64)
    return np.ravel_multi_index(tuple(indices), shape).astype(np.int64)


def _index_tensor(arr: np.ndarray, like: Tensor) -> Tensor:
    return C.tensor(np.ascontiguousarray(arr, dtype=np.int64), dtype=D.int64, device=like.device)


def sparse_coo_tensor(
    indices: Any,
    values: Any,
    size: Any = None,
    *,
    dtype: D.dtype | None = None,
    device: Any = None,
    requires_grad: bool = False,
    check_invariants: bool | None = None,
    is_coalesced: bool | None = None,
) -> SparseTensor:
    """A sparse COO tensor with ``values[k]`` at ``indices[:, k]`` (``torch.sparse_coo_tensor``).

    ``indices``: integers, shape ``(sparse_dim, nnz)``; ``values``: ``nnz`` numbers (a tensor keeps its
    autograd history; ``requires_grad=True`` makes a new leaf of them instead); ``size``: the shape
    (default: one past the largest index of each dim). Repeated indices are kept until
    :meth:`~SparseTensor.coalesce` sums them. Indices are always checked against ``size``.

    >>> s = flow.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    >>> s.to_dense()
    tensor([[0., 0., 3.],
            [4., 0., 5.]])
    """
    op = "sparse_coo_tensor"
    idx = _host_indices(op, indices)
    if isinstance(values, SparseTensor):
        raise OpTypeError(op, "values must be a dense tensor, got a sparse tensor")
    if not isinstance(values, Tensor):
        values = C.tensor(values, dtype=dtype, device=device)
    if dtype is not None and values.dtype != dtype:
        values = values.to(dtype)
    if device is not None and values.device != C.tensor(0, device=device).device:
        values = values.to(device)
    if values.ndim == 0:
        raise OpError(op, "values must be at least 1-d (nnz, *dense_dims), got a 0-d tensor")
    dense = tuple(values.shape[1:])  # a hybrid tensor: each entry holds a dense block of this shape
    nnz = idx.shape[1]
    if values.shape[0] != nnz:
        raise OpError(op, f"indices have {nnz} entries but values have {values.shape[0]}")
    if nnz and idx.min() < 0:
        raise OpIndexError(op, f"indices must be non-negative, found {int(idx.min())}")
    if size is None:
        shape = (tuple(int(m) + 1 for m in idx.max(axis=1)) if nnz else (0,) * idx.shape[0]) + dense
    else:
        shape = tuple(size)
        if not all(isinstance(s, numbers.Integral) and s >= 0 for s in shape):
            raise OpTypeError(op, f"size must be non-negative integers, got {size!r}")
        shape = tuple(int(s) for s in shape)
        if len(shape) != idx.shape[0] + len(dense) or shape[idx.shape[0] :] != dense:
            raise OpError(
                op,
                f"size {shape} does not fit indices with sparse_dim {idx.shape[0]} and values of shape "
                f"{tuple(values.shape)} (a hybrid tensor's size is its {idx.shape[0]} sparse dims followed by the "
                f"dense dims {dense} of values)",
            )
        if nnz:
            top = idx.max(axis=1)
            for d, (m, s) in enumerate(zip(top, shape)):
                if m >= s:
                    raise OpIndexError(
                        op, f"size is inconsistent with indices: for dim {d}, size is {s} but found index {int(m)}"
                    )
    if requires_grad:
        if not values.dtype.is_floating_point:
            raise OpTypeError(op, f"only floating-point sparse tensors can require grad, got {values.dtype}")
        values = values.detach().requires_grad_()
    return SparseTensor._from_parts(idx, values, shape, bool(is_coalesced))


def _check_sparse(op: str, x: Any) -> SparseTensor:
    if not isinstance(x, SparseTensor):
        raise OpTypeError(op, f"expected a sparse COO tensor, got {type(x).__name__}")
    return x


def _segment_sum(values: Tensor, inverse: np.ndarray, n: int) -> Tensor:
    out = C.zeros(n, *values.shape[1:], dtype=values.dtype, device=values.device)
    return out.index_add(0, _index_tensor(inverse, values), values)


def coalesce(s: SparseTensor) -> SparseTensor:
    """``s`` with sorted unique indices, the values of each repeated index summed (a no-op when coalesced)."""
    _check_sparse("coalesce", s)
    d = s._data
    if d.coalesced:
        return s
    sshape = d.shape[: d.indices.shape[0]]
    lin = _linear(d.indices, sshape)
    uniq, inverse = np.unique(lin, return_inverse=True)
    idx = np.stack(np.unravel_index(uniq, sshape)).astype(np.int64).reshape(len(sshape), len(uniq))
    return SparseTensor._from_parts(idx, _segment_sum(d.values, inverse.reshape(-1), len(uniq)), d.shape, True)


def to_dense(s: SparseTensor) -> Tensor:
    """The dense tensor of ``s`` (repeated indices summed); differentiable in the values."""
    d = _check_sparse("to_dense", s)._data
    sshape = d.shape[: d.indices.shape[0]]
    n = int(np.prod(sshape, dtype=np.int64))
    # one row of the flat result per sparse position: a hybrid tensor's dense blocks are added whole
    flat = C.zeros(n, *d.shape[len(sshape) :], dtype=d.values.dtype, device=d.values.device)
    flat = flat.index_add(0, _index_tensor(_linear(d.indices, sshape), d.values), d.values)
    return flat.reshape(d.shape)


def to_sparse(x: Tensor, sparse_dim: int | None = None) -> SparseTensor:
    """The coalesced COO tensor of the nonzero entries of the dense ``x``; differentiable."""
    if isinstance(x, SparseTensor):
        return x.to_sparse(sparse_dim)
    if not isinstance(x, Tensor):
        raise OpTypeError("to_sparse", f"expected a Tensor, got {type(x).__name__}")
    if sparse_dim is not None and sparse_dim != x.ndim:
        raise OpError(
            "to_sparse",
            f"sparse_dim={sparse_dim} would make a hybrid tensor of a {x.ndim}-d one; only sparse_dim == ndim "
            "is supported",
        )
    if x.ndim == 0:
        raise OpError("to_sparse", "a 0-d tensor cannot be made sparse")
    host = x.detach().numpy()
    idx = np.stack(np.nonzero(host)).astype(np.int64).reshape(x.ndim, -1)
    values = x.reshape(-1).index_select(0, _index_tensor(_linear(idx, tuple(x.shape)), x))
    return SparseTensor._from_parts(idx, values, tuple(x.shape), True)


def _dims(op: str, dim: Any, ndim: int) -> tuple:
    dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
    out = []
    for d in dims:
        if not isinstance(d, numbers.Integral) or not -ndim <= d < ndim:
            raise OpIndexError(op, f"dim {d!r} out of range for a {ndim}-d sparse tensor")
        d = int(d) % ndim
        if d in out:
            raise OpError(op, f"dim {d} appears more than once in {dim!r}")
        out.append(d)
    return tuple(sorted(out))


def sum(input: SparseTensor, dim: Any = None, dtype: D.dtype | None = None) -> Tensor:  # noqa: A001
    """``torch.sparse.sum``: the sum of all values (a dense 0-d tensor), or over the sparse dims ``dim``:
    a coalesced sparse tensor of the remaining dims (dense 0-d when every dim is summed).

    >>> s = flow.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    >>> flow.sparse.sum(s, 0).to_dense().tolist()
    [4.0, 0.0, 8.0]
    """
    d = _check_sparse("sparse.sum", input)._data
    values = d.values if dtype is None else d.values.to(dtype)
    if dim is None:
        return values.sum()
    if d.values.ndim > 1:
        raise OpError("sparse.sum", "summing over dims of a hybrid sparse tensor (dense_dim > 0) is not supported")
    dims = _dims("sparse.sum", dim, len(d.shape))
    keep = [k for k in range(len(d.shape)) if k not in dims]
    if not keep:
        return values.sum()
    shape = tuple(d.shape[k] for k in keep)
    lin = _linear(d.indices[keep], shape)
    uniq, inverse = np.unique(lin, return_inverse=True)
    idx = np.stack(np.unravel_index(uniq, shape)).astype(np.int64).reshape(len(shape), len(uniq))
    return SparseTensor._from_parts(idx, _segment_sum(values, inverse.reshape(-1), len(uniq)), shape, True)


def spmm(op: str, s: SparseTensor, dense: Tensor) -> Tensor:
    """``s @ dense`` for a 2-d sparse ``s`` and a dense 1-d or 2-d ``dense`` (a dense result).

    Row ``i`` of the result sums ``values[k] * dense[j]`` over the entries ``(i, j)``, so repeated
    indices count once each and no coalesce is needed. The gradient reaches ``dense`` (``s^T @ g``)
    and the values (``sum(g[i] * dense[j])``, i.e. a sparse gradient with ``s``'s pattern)."""
    _check_sparse(op, s)
    if isinstance(dense, SparseTensor):
        raise OpError(op, "sparse @ sparse is not supported; convert one operand with .to_dense()")
    if not isinstance(dense, Tensor):
        raise OpTypeError(op, f"the dense operand must be a Tensor, got {type(dense).__name__}")
    if s.ndim != 2 or s.dense_dim():
        raise OpError(op, f"the sparse operand must be 2-d with two sparse dims, got shape {tuple(s.shape)}")
    vec = dense.ndim == 1
    if dense.ndim not in (1, 2):
        raise OpError(op, f"the dense operand must be 1-d or 2-d, got shape {tuple(dense.shape)}")
    if dense.shape[0] != s.shape[1]:
        raise OpError(op, f"shapes {tuple(s.shape)} and {tuple(dense.shape)} cannot be multiplied")
    if dense.dtype != s.dtype:
        raise OpTypeError(op, f"expected both operands to have the same dtype, got {s.dtype} and {dense.dtype}")
    if dense.device != s.device:
        raise OpError(op, f"operands are on different devices: {s.device} and {dense.device}")
    d = s._data
    m = dense.unsqueeze(1) if vec else dense
    rows = _index_tensor(d.indices[0], m)
    cols = _index_tensor(d.indices[1], m)
    contrib = d.values.unsqueeze(1) * m.index_select(0, cols)
    out = C.zeros(s.shape[0], m.shape[1], dtype=m.dtype, device=m.device).index_add(0, rows, contrib)
    return out.squeeze(1) if vec else out


def mm(mat1: SparseTensor, mat2: Tensor) -> Tensor:
    """``torch.sparse.mm``: the dense product of a 2-d sparse ``mat1`` and a 2-d dense ``mat2``;
    ``mat1``'s gradient is sparse with its own pattern.

    >>> a = flow.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> flow.sparse.mm(a, flow.ones(2, 1)).tolist()
    [[2.0], [3.0]]
    """
    if isinstance(mat1, SparseTensor) and isinstance(mat2, Tensor) and mat2.ndim != 2:
        raise OpError("sparse.mm", f"mat2 must be 2-d, got shape {tuple(mat2.shape)}")
    if not isinstance(mat1, SparseTensor) and isinstance(mat2, SparseTensor):
        return spmm("sparse.mm", mat2.t(), mat1.t()).t()
    return spmm("sparse.mm", mat1, mat2)


def add(a: Any, b: Any, alpha: Any = 1) -> Tensor:
    """``a + alpha * b`` with a sparse operand: two sparse tensors give a sparse one (their entries
    concatenated, uncoalesced, as PyTorch's); a sparse and a dense tensor give a dense one.

    This is how the gradients of two lookups in one table add up in ``.grad``.

    >>> a = flow.sparse_coo_tensor([[0, 2]], flow.ones(2, 3), (4, 3))
    >>> (a + a).coalesce().values().tolist()
    [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
    """
    sa, sb = isinstance(a, SparseTensor), isinstance(b, SparseTensor)
    if not (sa or sb):
        raise OpTypeError("add", "expected at least one sparse COO tensor")
    if sa and sb:
        da, db = a._data, b._data
        if da.shape != db.shape or da.indices.shape[0] != db.indices.shape[0]:
            raise OpError(
                "add",
                f"sparse tensors of shapes {da.shape} and {db.shape} (sparse_dim {da.indices.shape[0]} and "
                f"{db.indices.shape[0]}) cannot be added",
            )
        if da.values.dtype != db.values.dtype:
            raise OpTypeError("add", f"sparse operands must have the same dtype, got {a.dtype} and {b.dtype}")
        vb = db.values if isinstance(alpha, numbers.Number) and alpha == 1 else db.values * alpha
        from flow import cat

        idx = np.concatenate([da.indices, db.indices], axis=1)
        return SparseTensor._from_parts(idx, cat([da.values, vb]), da.shape, False)
    dense_a = to_dense(a) if sa else a
    dense_b = to_dense(b) if sb else b
    if not isinstance(dense_a, Tensor) or not isinstance(dense_b, Tensor) or dense_a.shape != dense_b.shape:
        raise OpError(
            "add",
            f"a sparse tensor can be added to a sparse or dense tensor of its own shape only, got {_desc(a)} and "
            f"{_desc(b)}; convert with .to_dense() first",
        )
    return dense_a + dense_b if isinstance(alpha, numbers.Number) and alpha == 1 else dense_a + dense_b * alpha


def _desc(x: Any) -> str:
    return f"shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
