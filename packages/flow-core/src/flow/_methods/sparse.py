"""Tensor methods between the dense and the sparse COO layouts (``x.to_sparse()``, ``x.to_dense()``);
:class:`flow.sparse.SparseTensor` overrides both for its own layout."""

from __future__ import annotations


class SparseLayoutMethods:
    __slots__ = ()

    def to_sparse(self, sparse_dim: int | None = None):
        """This tensor as a coalesced sparse COO tensor of its nonzero entries (``torch.Tensor.to_sparse``)."""
        from flow.sparse import to_sparse

        return to_sparse(self, sparse_dim)

    def to_dense(self, dtype=None):
        """A dense tensor is its own dense form (``torch.Tensor.to_dense``)."""
        return self if dtype is None else self.to(dtype)
