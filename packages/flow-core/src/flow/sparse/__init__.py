"""``flow.sparse``: sparse COO tensors (``torch.sparse``'s COO layout) for graph models.

>>> adj = flow.sparse_coo_tensor([[0, 1, 1], [1, 0, 1]], [1.0, 1.0, 2.0], (2, 2))
>>> x = flow.randn(2, 4)
>>> flow.sparse.mm(adj, x).shape  # also ``adj @ x``, ``flow.mm(adj, x)``, ``flow.matmul(adj, x)``
flow.Size([2, 4])

Supported: construction (:func:`flow.sparse_coo_tensor`, :meth:`Tensor.to_sparse`), ``to_dense``,
``coalesce`` (repeated indices summed), ``indices`` / ``values`` / ``_nnz`` / ``sparse_dim``, :func:`mm`
and matrix products with one sparse 2-d operand, :func:`sum`, ``+`` (sparse + sparse stays sparse, with
a dense tensor it is dense); autograd through the values (a sparse operand's gradient has its own
pattern). Hybrid tensors (``dense_dim() > 0``, e.g. the gradient of ``nn.Embedding(sparse=True)``:
indices ``(1, nnz)``, values ``(nnz, D)``) support construction, coalesce, to_dense, ``+`` and scaling.
Not supported: sparse @ sparse, products and ``sum(dim)`` of hybrid tensors, and every other op, which
raises an error suggesting ``.to_dense()``. Unlike PyTorch, where
``torch.mm`` (not ``torch.sparse.mm``) gives a sparse operand a dense gradient, every product here
gives it the sparse one.
"""

from __future__ import annotations

from flow.sparse._coo import CooArray, SparseTensor
from flow.sparse._ops import coalesce, mm, sparse_coo_tensor, sum, to_dense, to_sparse

__all__ = ["SparseTensor", "CooArray", "mm", "sum", "sparse_coo_tensor", "coalesce", "to_dense", "to_sparse"]
