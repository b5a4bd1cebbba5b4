"""Tensor methods about a tensor's shape and view metadata: the in-place view ops ``squeeze_``, ``unsqueeze_``
and ``t_``; ``H``; ``storage_offset``; ``ndimension``; ``sum_to_size``, as in PyTorch.
"""

from __future__ import annotations

import flow.ops.movement as _V
from flow.errors import OpError
from flow.ops.inplace import check_inplace_allowed


def _inplace_view(self, op: str, fn, *args):
    """``self.<op>(*args)`` for an in-place view op: ``self`` takes the shape (and strides) of the view
    ``fn(self, *args)`` over the same storage.

    Under autograd ``self`` takes over the view's history, so gradients flow back through the reshaping
    to its old value; the view ops record their input's shape when called, so changing ``self``'s shape
    afterwards does not disturb them. The version counter is bumped, as PyTorch does for these ops.
    """
    check_inplace_allowed(self, op)
    out = fn(self, *args)
    if out is not self:
        self._data = out._data
        if out._requires_grad and out.grad_fn is not None:
            self.grad_fn = out.grad_fn
            self._out_idx = out._out_idx
    self._version[0] += 1
    return self


class ViewMetaMethods:
    __slots__ = ()

    def squeeze_(self, dim=None):
        """Drop size-1 dims (all, or those in ``dim``: an int or a tuple) in place."""
        return _inplace_view(self, "squeeze_", _V.squeeze, dim)

    def unsqueeze_(self, dim: int):
        """Insert a size-1 dim at ``dim`` in place."""
        return _inplace_view(self, "unsqueeze_", _V.unsqueeze, dim)

    def t_(self):
        """Transpose a tensor of <= 2 dims in place (0-d and 1-d stay as they are)."""
        if self.ndim > 2:
            raise OpError("t_", f"expects a tensor with <= 2 dims, got {self.ndim}")
        return _inplace_view(self, "t_", _V.t)

    @property
    def H(self):
        """The conjugate transpose of a matrix; flow's dtypes are real, so this is ``transpose(0, 1)``
        (a view). A 0-d tensor is returned as is."""
        if self.ndim == 0:
            return self
        if self.ndim != 2:
            raise OpError(
                "H", f"is only supported on matrices (2-d tensors), got a {self.ndim}-d tensor; use .mT for batches"
            )
        return _V.transpose(self, 0, 1)

    def storage_offset(self) -> int:
        """How many elements into its storage this tensor's first element lies (0 unless it is a view).

        >>> flow.arange(6.0).reshape(2, 3)[1].storage_offset()
        3
        """
        base = self._base
        if base is None:
            return 0
        while base._base is not None:  # an alias's views are rooted at the alias: measure from the storage
            base = base._base
        here, start = self.data_ptr(), base.data_ptr()
        if here == 0 or start == 0:
            raise RuntimeError(
                f"storage_offset: the data of this tensor (device '{self.device}', a {type(self._data).__name__}) "
                "has no address to measure an offset from"
            )
        return (here - start) // self.dtype.itemsize

    def ndimension(self) -> int:
        """The number of dims (same as :meth:`dim`)."""
        return self.ndim

    def sum_to_size(self, *size):
        """Sum this tensor down to ``size`` (ints or one tuple), which must broadcast to this tensor's
        shape: the reverse of :meth:`expand`. Returns this tensor itself when the shape already matches.

        >>> flow.ones(2, 3).sum_to_size(1, 3)
        tensor([[2., 2., 2.]])
        """
        from flow._creation import _size
        from flow.ops._grad_util import sum_to_shape

        if not size:
            raise TypeError("sum_to_size() missing the required argument 'size' (ints or a tuple of ints)")
        target = _size("sum_to_size", size)
        shape = tuple(self.shape)
        lead = len(shape) - len(target)
        if lead < 0 or any(t != 1 and t != s for t, s in zip(target, shape[lead:])):
            raise OpError("sum_to_size", f"size {target} is not expandable to the tensor's size {shape}")
        return sum_to_shape(self, target)
