"""Tensor methods for indexing (``t[...]``, ``t[...] = v``) and gather/scatter."""

from __future__ import annotations

import flow.ops.indexing as _I
import flow.ops.subscript as _X
from flow.autograd.grad_mode import STATE
from flow.ops.inplace import apply_inplace


def _inplace(self, name: str, fn, *args, **kwargs):
    """``self.<name>_(...)``: run ``fn`` out of place, then write the result into ``self``.

    Under autograd ``fn`` gets an alias of ``self`` with a private version counter: these ops save their
    inputs, but their gradients only read the index/mask/source, so the write into ``self`` (and later
    in-place ops on it) must not invalidate the node they record.
    """
    src = self
    if STATE.grad_enabled and not (self._requires_grad and self.grad_fn is None):
        from flow._dispatch import call
        from flow.ops.views import BASIC_INDEX

        src = call(BASIC_INDEX, self, index=())
    return apply_inplace(self, fn(src, *args, **kwargs), name)


class IndexingMethods:
    __slots__ = ()

    def __getitem__(self, key):
        return _X.getitem(self, key)

    def __setitem__(self, key, value) -> None:
        _X.setitem(self, key, value)

    def gather(self, dim: int, index, *, sparse_grad: bool = False):
        return _I.gather(self, dim, index)

    def scatter(self, dim: int, index, src=None, *, value=None, reduce=None):
        return _I.scatter(self, dim, index, src, value=value, reduce=reduce)

    def scatter_(self, dim: int, index, src=None, *, value=None, reduce=None):
        return _inplace(self, "scatter_", _I.scatter, dim, index, src, value=value, reduce=reduce)

    def scatter_add(self, dim: int, index, src):
        return _I.scatter_add(self, dim, index, src)

    def scatter_add_(self, dim: int, index, src):
        return _inplace(self, "scatter_add_", _I.scatter_add, dim, index, src)

    def index_select(self, dim: int, index):
        return _I.index_select(self, dim, index)

    def index_add(self, dim: int, index, source, *, alpha=1):
        return _I.index_add(self, dim, index, source, alpha=alpha)

    def index_add_(self, dim: int, index, source, *, alpha=1):
        return _inplace(self, "index_add_", _I.index_add, dim, index, source, alpha=alpha)

    def index_fill(self, dim: int, index, value):
        return _I.index_fill(self, dim, index, value)

    def index_fill_(self, dim: int, index, value):
        return _inplace(self, "index_fill_", _I.index_fill, dim, index, value)

    def index_copy(self, dim: int, index, source):
        return _I.index_copy(self, dim, index, source)

    def index_copy_(self, dim: int, index, source):
        return _inplace(self, "index_copy_", _I.index_copy, dim, index, source)

    def index_put(self, indices, values, accumulate: bool = False):
        return _X.index_put(self, indices, values, accumulate)

    def index_put_(self, indices, values, accumulate: bool = False):
        return _inplace(self, "index_put_", _X.index_put, indices, values, accumulate)

    def masked_fill(self, mask, value):
        return _I.masked_fill(self, mask, value)

    def masked_fill_(self, mask, value):
        from flow.ops.meta import broadcast_shapes

        if broadcast_shapes("masked_fill_", tuple(self.shape), tuple(mask.shape)) != tuple(self.shape):
            from flow.errors import OpError

            raise OpError(
                "masked_fill_",
                f"mask of shape {tuple(mask.shape)} cannot be broadcast to the tensor's shape {tuple(self.shape)}",
            )
        return _inplace(self, "masked_fill_", _I.masked_fill, mask, value)

    def masked_select(self, mask):
        return _I.masked_select(self, mask)

    def nonzero(self, *, as_tuple: bool = False):
        return _I.nonzero(self, as_tuple=as_tuple)

    def argwhere(self):
        return _I.argwhere(self)

    def take(self, index):
        return _I.take(self, index)

    def take_along_dim(self, indices, dim=None):
        return _I.take_along_dim(self, indices, dim)

    def fill_diagonal_(self, fill_value, wrap: bool = False):
        """Fill the main diagonal (all dims equal, or a 2-d matrix; ``wrap`` for tall matrices) in place."""
        import numpy as np

        from flow._creation import tensor
        from flow.errors import OpError

        shape = tuple(self.shape)
        if len(shape) < 2 or (len(shape) > 2 and len(set(shape)) != 1):
            raise OpError(
                "fill_diagonal_", f"needs a 2-d tensor or one whose dims all have the same size, got shape {shape}"
            )
        mask = np.zeros(shape, dtype=bool)
        np.fill_diagonal(mask, True, wrap=wrap)
        key = tuple(tensor(ix, device=self.device) for ix in np.nonzero(mask))
        _X.setitem(self, key, fill_value)
        return self
