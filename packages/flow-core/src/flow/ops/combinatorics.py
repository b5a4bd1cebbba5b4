"""Tensors built by combining the elements of others: ``flow.cartesian_prod``, ``flow.combinations``,
``flow.block_diag``, ``flow.vander``, ``flow.unravel_index`` (PyTorch's names and semantics).

Each is written with flow ops (index tables computed on the host are small), so gradients come from
the ops they call; none registers an op of its own.
"""

from __future__ import annotations

import builtins
import itertools
import math

from flow.errors import OpError, OpTypeError
from flow.ops.aliases import _tensor_arg

__all__ = ["cartesian_prod", "combinations", "block_diag", "vander", "unravel_index"]


def cartesian_prod(*tensors):
    """``torch.cartesian_prod``: every combination of one element of each 1-D tensor, one per row.

    >>> flow.cartesian_prod(flow.tensor([1, 2]), flow.tensor([3, 4]))
    tensor([[1, 3],
            [1, 4],
            [2, 3],
            [2, 4]])
    """
    from flow.ops.shape_ops import meshgrid, stack

    if not tensors:
        raise OpError("cartesian_prod", "expects at least one tensor")
    for i, t in enumerate(tensors):
        if _tensor_arg("cartesian_prod", t, f"tensors[{i}]").dim() != 1:
            raise OpError("cartesian_prod", f"expects 1-D tensors, tensors[{i}] is {t.dim()}-D")
        if t.dtype is not tensors[0].dtype:
            raise OpTypeError("cartesian_prod", f"expects one dtype, got {tensors[0].dtype} and {t.dtype}")
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1)


def block_diag(*tensors):
    """``torch.block_diag``: the tensors (0-, 1- or 2-D, read as matrices) along the diagonal of a zero matrix.

    The dtype is the promotion of theirs; a 0-d tensor is a 1x1 block, a 1-D one a single row.
    """
    from flow import _dtype as D
    from flow._creation import zeros
    from flow.nn.functional import pad
    from flow.ops.shape_ops import cat

    blocks = []
    for i, t in enumerate(tensors):
        if _tensor_arg("block_diag", t, f"tensors[{i}]").dim() > 2:
            raise OpError("block_diag", f"input tensors must have 2 or fewer dims, tensors[{i}] has {t.dim()}")
        blocks.append(t.reshape(1, 1) if t.dim() == 0 else t.reshape(1, -1) if t.dim() == 1 else t)
    if not blocks:
        return zeros(1, 0)
    dtype = blocks[0].dtype
    for b in blocks[1:]:
        dtype = D.promote_types(dtype, b.dtype)
    width = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        # each block padded with zero columns to the full width: cat of the rows is the matrix
        rows.append(pad(b.to(dtype), (left, width - left - b.shape[1])))
        left += b.shape[1]
    return cat(rows, 0)


def combinations(input, r: int = 2, with_replacement: bool = False):
    """``torch.combinations``: the length-``r`` combinations of a 1-D tensor's elements, one per row
    (as :func:`itertools.combinations`, or ``combinations_with_replacement``)."""
    from flow import _dtype as D
    from flow._creation import tensor
    from flow.ops.indexing import index_select

    if _tensor_arg("combinations", input).dim() != 1:
        raise OpError("combinations", f"expects a 1-D tensor, got shape {tuple(input.shape)}")
    if not isinstance(r, builtins.int) or r < 0:
        raise OpError("combinations", f"r must be a non-negative int, got {r!r}")
    if r == 0:
        return input.new_empty((0,))
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    # the index table is small and host-side; the values are gathered with an op, so gradients flow
    idx = [i for combo in pick(builtins.range(input.shape[0]), r) for i in combo]
    flat = index_select(input, 0, tensor(idx, dtype=D.int64, device=input.device))
    return flat.reshape(-1, r)


def vander(x, N: int | None = None, increasing: bool = False):
    """``torch.vander``: the Vandermonde matrix of a 1-D tensor, powers ``N-1 .. 0`` (``0 .. N-1`` if ``increasing``).

    Integer and bool input give int64, as in PyTorch. The powers are a cumulative product, as PyTorch
    computes them, so values and gradients agree with it.
    """
    from flow import _dtype as D
    from flow._creation import ones
    from flow.ops.shape_ops import cat

    if _tensor_arg("vander", x).dim() != 1:
        raise OpError("vander", f"x must be a 1-D tensor, got {x.dim()}-D")
    n = x.shape[0] if N is None else N
    if not isinstance(n, builtins.int) or n < 0:
        raise OpError("vander", f"N must be a non-negative int, got {N!r}")
    if not x.dtype.is_floating_point:
        x = x.to(D.int64)
    if n == 0:
        return x.new_empty((x.shape[0], 0))
    first = ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
    # also for N == 1 (an empty expand): the result stays connected to x, with zero gradient, as in PyTorch
    out = cat([first, x.unsqueeze(1).expand(x.shape[0], n - 1)], 1).cumprod(1)
    return out if increasing else out.flip(1)


def unravel_index(indices, shape):
    """``torch.unravel_index``: the coordinates (a tuple of int64 tensors) of flat ``indices`` in a
    row-major tensor of ``shape``. Indices are taken modulo the number of elements, as PyTorch does.

    >>> flow.unravel_index(flow.tensor([4, 1]), (2, 3))
    (tensor([1, 0]), tensor([1, 1]))
    """
    from flow import _dtype as D
    from flow.ops.arith import floor_divide, remainder

    if _tensor_arg("unravel_index", indices).dtype.is_floating_point or indices.dtype is D.bool:
        raise OpTypeError("unravel_index", f"expected 'indices' of an integer dtype, got {indices.dtype}")
    dims = (shape,) if isinstance(shape, builtins.int) else tuple(shape)
    if any(not isinstance(d, builtins.int) or d < 0 for d in dims):
        raise OpError("unravel_index", f"'shape' must hold non-negative ints, got {dims}")
    if not dims:
        return ()
    if math.prod(dims) == 0:
        raise OpError("unravel_index", f"cannot unravel into a shape without elements, {dims}")
    flat = remainder(indices.to(D.int64), math.prod(dims))
    coords = []
    for d in reversed(dims):
        coords.append(remainder(flat, d))
        flat = floor_divide(flat, d)
    return tuple(reversed(coords))
