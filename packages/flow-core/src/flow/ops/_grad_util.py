"""Small pieces gradients share, written with flow ops so they work at any order."""

from __future__ import annotations


def sum_to_shape(g, shape: tuple):
    """Reduce a broadcast gradient back to ``shape`` (undo NumPy broadcasting)."""
    gshape = tuple(g.shape)
    shape = tuple(shape)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    dims = list(range(lead))
    for i, s in enumerate(shape):
        if s == 1 and gshape[lead + i] != 1:
            dims.append(lead + i)
    if dims:
        g = g.sum(dim=tuple(dims), keepdim=True)
    if lead:
        g = g.reshape(shape)
    elif tuple(g.shape) != shape:
        g = g.reshape(shape)
    return g
