"""Sparse COO tensors: :class:`SparseTensor`, a ``flow.Tensor`` whose data is a :class:`CooArray`.

A COO tensor is an ``int64`` index matrix of shape ``(sparse_dim, nnz)`` (kept on the host: the
patterns are built and coalesced with NumPy) and a dense ``values`` tensor of shape ``(nnz, *dense)``.
Hybrid tensors (``dense_dim() > 0``: each entry a dense block, as the rows of an embedding table's
sparse gradient) support construction, coalesce, to_dense, ``+`` and scaling; products and
``sum(dim)`` need ``dense_dim() == 0``.

``CooArray`` is registered as an array kind (see :mod:`flow.array_kinds`): every op that reaches the
dispatcher with a sparse input goes to :func:`_handler`, which answers matrix products with a sparse
left (or right) operand and raises a clear error for every other op, so the dense hot path pays
nothing. Autograd runs on the ``values`` tensor: every sparse computation is written with dense,
differentiable flow ops on it (``index_add``, ``index_select``), so the gradient of a sparse tensor
has its own pattern, as ``torch.sparse.mm`` gives it.
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow._tensor import Tensor
from flow.array_kinds import register_array_kind
from flow.errors import OpError, OpTypeError


class CooArray:
    """The data of a :class:`SparseTensor`: host ``indices`` ``(sparse_dim, nnz)``, the ``values``
    tensor, the logical ``shape`` and whether the indices are known to be sorted and unique."""

    __slots__ = ("indices", "values", "shape", "coalesced")

    def __init__(self, indices: np.ndarray, values: Tensor, shape: tuple, coalesced: bool) -> None:
        self.indices = indices
        self.values = values
        self.shape = tuple(int(s) for s in shape)
        # a pattern of at most one entry is sorted and unique, as PyTorch reports it
        self.coalesced = bool(coalesced) or indices.shape[1] <= 1

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def device(self):
        return self.values.device

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.zeros(self.shape, dtype=self.values.numpy().dtype)  # (hybrid: whole blocks are added)
        np.add.at(out, tuple(self.indices), self.values.detach().numpy())
        return out if dtype is None else out.astype(dtype)


def _not_sparse_error(op: str) -> OpError:
    return OpError(
        op,
        "this op is not supported on sparse COO tensors; convert with .to_dense() first "
        "(sparse tensors support matrix products with a dense operand, sum, scaling by a number, a dtype cast, "
        "coalesce and to_dense)",
    )


def _is_sparse(t) -> bool:
    if isinstance(t, (list, tuple)):
        return any(_is_sparse(x) for x in t)
    return isinstance(getattr(t, "_data", None), CooArray)


def _handler(op, inputs: tuple, attrs: dict):
    from flow.sparse import _ops

    name = op.name
    if name == "matmul" and len(inputs) == 2:
        a, b = inputs
        if isinstance(a, SparseTensor) and not isinstance(b, SparseTensor):
            return _ops.spmm("matmul", a, b)
        if isinstance(b, SparseTensor) and not isinstance(a, SparseTensor):
            # dense @ sparse == (sparse^T @ dense^T)^T, without densifying the sparse operand
            if a.ndim != 2 or b.ndim != 2:
                shapes = f"{tuple(a.shape)} and {tuple(b.shape)}"
                raise OpError("matmul", f"dense @ sparse needs 2-d operands, got shapes {shapes}")
            return _ops.spmm("matmul", b.t(), a.t()).t()
        raise OpError("matmul", "sparse @ sparse is not supported; convert one operand with .to_dense()")
    if name == "add" and len(inputs) == 2 and all(isinstance(t, Tensor) for t in inputs):
        return _ops.add(inputs[0], inputs[1], attrs.get("alpha", 1))
    if name.endswith("_update") and any(_is_sparse(t) for t in inputs):
        # an optimizer's update op reached with a sparse gradient (see flow.optim): say which optimizers
        # take one, as PyTorch's do
        opt = str(attrs["optimizer"]).rsplit(":", 1)[-1] if "optimizer" in attrs else "this optimizer"
        raise OpError(
            name,
            f"{opt} does not support sparse gradients; use SGD (without weight decay), Adagrad or SparseAdam "
            "for parameters with sparse gradients (nn.Embedding(sparse=True)), or pass dense gradients",
        )
    if name == "sum" and len(inputs) == 1 and not attrs.get("keepdim", False):
        return _ops.sum(inputs[0], attrs.get("dim"))
    if name == "mul" and len(inputs) == 2:
        # scaling by a number keeps the pattern (an adjacency matrix times a constant)
        a, b = inputs if isinstance(inputs[0], SparseTensor) else inputs[::-1]
        if not isinstance(b, SparseTensor) and (not isinstance(b, Tensor) or b.ndim == 0):
            d = a._data
            return SparseTensor._from_parts(d.indices, d.values * b, d.shape, d.coalesced)
    if name == "cast" and len(inputs) == 1 and "dtype" in attrs:
        d = inputs[0]._data
        return SparseTensor._from_parts(d.indices, d.values.to(attrs["dtype"]), d.shape, d.coalesced)
    raise _not_sparse_error(name)


class SparseTensor(Tensor):
    """A sparse COO tensor (``layout=torch.sparse_coo``); build it with :func:`flow.sparse_coo_tensor`
    or :meth:`flow.Tensor.to_sparse`.

    Autograd lives on the values: ``requires_grad`` and ``grad`` are those of :meth:`values`, and
    ``.grad`` is a sparse tensor with this tensor's pattern.

    >>> s = flow.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> s.to_dense().tolist()
    [[0.0, 2.0], [3.0, 0.0]]
    """

    __slots__ = ()

    @classmethod
    def _from_parts(cls, indices: np.ndarray, values: Tensor, shape: tuple, coalesced: bool) -> "SparseTensor":
        t = cls._make(CooArray(indices, values, shape, coalesced), values.dtype, values.device)
        return t

    # -- layout --------------------------------------------------------------------------------
    @property
    def is_sparse(self) -> bool:
        return True

    @property
    def layout(self) -> str:
        return "sparse_coo"

    def sparse_dim(self) -> int:
        return self._data.indices.shape[0]

    def dense_dim(self) -> int:
        return self._data.values.ndim - 1

    def _nnz(self) -> int:
        return self._data.indices.shape[1]

    def is_coalesced(self) -> bool:
        return self._data.coalesced

    def _indices(self) -> Tensor:
        """The index matrix ``(sparse_dim, nnz)`` as stored (duplicates and order kept)."""
        from flow._creation import tensor

        return tensor(self._data.indices, dtype=D.int64, device=self.device)

    def _values(self) -> Tensor:
        """The values as stored (differentiable: gradients reach this tensor's values)."""
        return self._data.values

    def indices(self) -> Tensor:
        self._check_coalesced("indices")
        return self._indices()

    def values(self) -> Tensor:
        self._check_coalesced("values")
        return self._values()

    def _check_coalesced(self, what: str) -> None:
        if not self._data.coalesced:
            raise OpError(what, f"cannot get {what} on an uncoalesced sparse tensor, call .coalesce() first")

    def coalesce(self) -> "SparseTensor":
        """This tensor with sorted, unique indices; the values of repeated indices are summed."""
        from flow.sparse._ops import coalesce

        return coalesce(self)

    def to_dense(self, dtype=None) -> Tensor:
        from flow.sparse._ops import to_dense

        out = to_dense(self)
        return out if dtype is None else out.to(dtype)

    def to_sparse(self, sparse_dim: int | None = None) -> "SparseTensor":
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise OpError("to_sparse", f"this tensor has sparse_dim {self.sparse_dim()}, not {sparse_dim}")
        return self

    def t(self) -> "SparseTensor":
        """The transpose of a 2-d sparse tensor (its index rows swapped)."""
        if self.ndim != 2 or self.dense_dim():
            raise OpError("t", f"expects a 2-d sparse tensor with two sparse dims, got shape {tuple(self.shape)}")
        d = self._data
        return SparseTensor._from_parts(d.indices[::-1].copy(), d.values, d.shape[::-1], False)

    def detach(self) -> "SparseTensor":
        d = self._data
        return SparseTensor._from_parts(d.indices, d.values.detach(), d.shape, d.coalesced)

    def numpy(self, *, force: bool = False) -> np.ndarray:
        raise OpError("numpy", "a sparse tensor has no NumPy form; call .to_dense().numpy()")

    # -- autograd: delegated to the values ------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._data.values.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._data.values.requires_grad = value

    def requires_grad_(self, requires_grad: bool = True) -> "SparseTensor":
        self._data.values.requires_grad_(requires_grad)
        return self

    @property
    def is_leaf(self) -> bool:
        return self._data.values.is_leaf

    @property
    def grad(self):
        d = self._data
        g = d.values.grad
        if g is None:
            return None
        if d.coalesced:
            return SparseTensor._from_parts(d.indices, g, d.shape, True)
        # repeated entries stand for one element of the tensor: like PyTorch, report the gradient with
        # respect to that element, on the coalesced pattern (each copy's value gradient is the same)
        from flow._creation import tensor

        sshape = d.shape[: d.indices.shape[0]]
        lin = np.ravel_multi_index(tuple(d.indices), sshape) if d.indices.shape[0] else np.zeros(0, np.int64)
        uniq, first = np.unique(lin, return_index=True)
        idx = np.stack(np.unravel_index(uniq, sshape)).astype(np.int64).reshape(len(sshape), len(uniq))
        picked = g.index_select(0, tensor(first.astype(np.int64), dtype=D.int64, device=g.device))
        return SparseTensor._from_parts(idx, picked, d.shape, True)

    @grad.setter
    def grad(self, value) -> None:
        # Tensor._make sets ``grad = None`` before anything else exists; only None or a sparse
        # gradient of this pattern may be stored
        data = getattr(self, "_data", None)
        if data is None:
            return
        if value is None:
            data.values.grad = None
            return
        if not isinstance(value, SparseTensor) or value._data.indices.shape != data.indices.shape:
            raise OpTypeError("grad", "a sparse tensor's grad must be a sparse tensor with its pattern")
        if not np.array_equal(value._data.indices, data.indices):
            raise OpError("grad", "a sparse tensor's grad must have the same indices as the tensor")
        data.values.grad = value._data.values

    def __repr__(self) -> str:
        d = self._data
        extra = "" if d.values.requires_grad is False else ", requires_grad=True"
        return (
            f"tensor(indices={self._indices()!r},\n       values={d.values.detach()!r},\n"
            f"       size={d.shape}, nnz={self._nnz()}, layout=flow.sparse_coo{extra})"
        )

    __str__ = __repr__


# the autograd engine wraps a gradient it stores in ``.grad`` in this class (a sparse gradient stays sparse)
CooArray.tensor_class = SparseTensor
register_array_kind(CooArray, _handler)
