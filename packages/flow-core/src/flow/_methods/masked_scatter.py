"""``Tensor.masked_scatter`` and ``masked_scatter_``, as in PyTorch: where ``mask`` is True, take the next
element of ``source`` (read in row-major order).

Written with flow ops (cumsum, take, where), so it runs on every device and autograd gives both
gradients: ``self``'s where the mask is False, ``source``'s at the elements that were taken.
"""

from __future__ import annotations

from flow.errors import OpError, OpTypeError


def _check(op: str, self, mask, source) -> None:
    from flow._tensor import Tensor

    if not isinstance(mask, Tensor):
        raise OpTypeError(op, f"mask must be a Tensor, got {type(mask).__name__}")
    if not isinstance(source, Tensor):
        raise OpTypeError(op, f"source must be a Tensor, got {type(source).__name__}")
    if mask.dtype.name != "bool":
        raise OpTypeError(op, f"only supports boolean masks, but got mask with dtype {mask.dtype}")
    if source.dtype is not self.dtype:
        raise OpTypeError(op, f"expected self and source to have the same dtype, got {self.dtype} and {source.dtype}")


def _scatter(input, mask, source):
    """The out-of-place result; ``mask`` has ``input``'s shape."""
    from flow.ops.clamp_where import where
    from flow.ops.indexing import take
    from flow.ops.reduction_stats import cumsum

    flat = mask.reshape(-1)
    n_true = int(flat.sum().item())
    if n_true > source.numel():
        raise OpError(
            "masked_scatter",
            f"source has {source.numel()} elements, fewer than the {n_true} True values in mask",
        )
    if n_true == 0:
        return input.clone()  # nothing to take, and source may even be empty
    # the k-th True position (in row-major order) takes source's k-th element; False positions read
    # element 0 and are then discarded by the where
    pos = (cumsum(flat, 0) - 1).clamp(min=0)
    taken = take(source, pos).reshape(*input.shape)
    return where(mask, taken, input)


class MaskedScatterMethods:
    __slots__ = ()

    def masked_scatter(self, mask, source):
        """A copy of this tensor whose elements where ``mask`` is True (broadcasting with this tensor) are the
        leading elements of ``source`` in row-major order.

        >>> flow.zeros(2, 2).masked_scatter(flow.tensor([[True, False], [True, True]]), flow.tensor([1.0, 2, 3]))
        tensor([[1., 0.],
                [2., 3.]])
        """
        from flow.ops.meta import broadcast_shapes
        from flow.ops.shape_ops import broadcast_to

        _check("masked_scatter", self, mask, source)
        shape = broadcast_shapes("masked_scatter", tuple(self.shape), tuple(mask.shape))
        return _scatter(broadcast_to(self, shape), broadcast_to(mask, shape), source)

    def masked_scatter_(self, mask, source):
        """In place: write the leading elements of ``source`` (row-major) where ``mask`` (broadcast to this
        tensor's shape) is True."""
        from flow._methods.indexing import _inplace
        from flow.ops.meta import broadcast_shapes
        from flow.ops.shape_ops import broadcast_to

        _check("masked_scatter_", self, mask, source)
        shape = tuple(self.shape)
        if broadcast_shapes("masked_scatter_", shape, tuple(mask.shape)) != shape:
            raise OpError(
                "masked_scatter_",
                f"mask of shape {tuple(mask.shape)} cannot be broadcast to the tensor's shape {shape}",
            )
        return _inplace(self, "masked_scatter_", _scatter, broadcast_to(mask, shape), source)
