"""Spatial transformers, as ``torch.nn.functional``: affine_grid and grid_sample (4-d inputs).

``grid_sample`` follows PyTorch's formulas step by step: the grid is unnormalised to pixel
coordinates (``align_corners`` deciding whether -1/1 are pixel centres or edges), clipped or
reflected for the ``border``/``reflection`` padding modes, and the taps are gathered from the
flattened planes. Everything is written with flow ops, so the gradient with respect to the input
(a scatter-add) and the grid (through the bilinear weights and the reflection/clip maps) is the one
PyTorch computes.
"""

from __future__ import annotations

import numpy as np

from flow.errors import OpError, OpTypeError
from flow.nn.functional.conv import check_input

__all__ = ["affine_grid", "grid_sample"]

_MODES = ("bilinear", "nearest")
_PADDING = ("zeros", "border", "reflection")


def _base_coords(n: int, align_corners: bool) -> np.ndarray:
    # torch's linspace_from_neg_one: a single step is 0; without align_corners the points are pixel centres
    if n <= 1:
        return np.zeros(max(n, 0))
    r = np.linspace(-1.0, 1.0, n)
    return r if align_corners else r * (n - 1) / n


def affine_grid(theta, size, align_corners: bool | None = None):
    """The (N, H, W, 2) sampling grid of a batch of 2-d affine maps ``theta`` (N, 2, 3) for an output ``size``.

    ``size`` is (N, C, H, W); the grid holds normalised (x, y) coordinates for :func:`grid_sample`.
    """
    op = "affine_grid"
    from flow._creation import tensor
    from flow._tensor import Tensor

    if not isinstance(theta, Tensor):
        raise OpTypeError(op, f"'theta' must be a Tensor, got {type(theta).__name__}")
    if not theta.dtype.is_floating_point:
        raise OpTypeError(op, f"'theta' must be a floating-point tensor, got {theta.dtype}")
    size = tuple(int(s) for s in size)
    if len(size) != 4:
        raise OpError(op, f"only 2-d affine grids are supported: 'size' must be (N, C, H, W), got {size}")
    if any(s < 1 for s in size):
        raise OpError(op, f"'size' must be positive, got {size}")
    N, _, H, W = size
    if tuple(theta.shape) != (N, 2, 3):
        raise OpError(
            op,
            f"expected a batch of 2-d affine matrices of shape (N, 2, 3) = {(N, 2, 3)} for size {size}, "
            f"got theta of shape {tuple(theta.shape)}",
        )
    ac = bool(align_corners)
    xs, ys = _base_coords(W, ac), _base_coords(H, ac)
    base = np.stack([np.broadcast_to(xs, (H, W)), np.broadcast_to(ys[:, None], (H, W)), np.ones((H, W))], -1)
    base_t = tensor(base.reshape(1, H * W, 3), dtype=theta.dtype, device=theta.device)
    return base_t.matmul(theta.transpose(1, 2)).reshape(N, H, W, 2)


def _unnormalize(c, size: int, align_corners: bool):
    if align_corners:
        return (c + 1) * ((size - 1) / 2)
    return ((c + 1) * size - 1) / 2


def _reflect(c, twice_low: int, twice_high: int):
    # torch's reflect_coordinates: fold c into [low, high] by mirroring at the bounds
    from flow.ops.clamp_where import where

    if twice_low == twice_high:
        return c * 0
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = (c - low).abs()
    extra = c.fmod(span)
    flips = (c / span).floor()
    even = (flips.fmod(2) == 0).detach()
    return where(even, extra + low, (span - extra) + low)


def _source_coords(c, size: int, padding_mode: str, align_corners: bool):
    c = _unnormalize(c, size, align_corners)
    if padding_mode == "border":
        c = c.clamp(0, size - 1)
    elif padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = c.clamp(0, size - 1)
    return c


def _gather(flat, ix, iy, H: int, W: int):
    """Values of ``flat`` (N, C, H*W) at integer pixels (ix, iy) of shape (N, P); zero outside the image."""
    inside = ((ix >= 0) & (ix <= W - 1) & (iy >= 0) & (iy <= H - 1)).detach()
    lin = iy.clamp(0, H - 1) * W + ix.clamp(0, W - 1)
    N, Cn, _ = tuple(flat.shape)
    idx = lin.long().unsqueeze(1).expand(N, Cn, lin.shape[1])
    return flat.gather(2, idx) * inside.unsqueeze(1).to(flat.dtype)


def grid_sample(input, grid, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool | None = None):
    """Sample ``input`` (N, C, H, W) at the normalised (x, y) locations of ``grid`` (N, H_out, W_out, 2).

    ``mode`` is ``'bilinear'`` or ``'nearest'`` (ties round half to even, as torch); ``padding_mode``
    is ``'zeros'``, ``'border'`` or ``'reflection'``. ``align_corners`` defaults to False.
    """
    op = "grid_sample"
    check_input(op, input, "input", (4,))
    check_input(op, grid, "grid", (4,))
    if mode not in _MODES:
        raise OpError(op, f"'mode' must be one of {_MODES}, got {mode!r}")
    if padding_mode not in _PADDING:
        raise OpError(op, f"'padding_mode' must be one of {_PADDING}, got {padding_mode!r}")
    if not input.dtype.is_floating_point or grid.dtype != input.dtype:
        raise OpTypeError(
            op, f"'input' and 'grid' must be floating-point tensors of one dtype, got {input.dtype} and {grid.dtype}"
        )
    N, Cn, H, W = tuple(input.shape)
    if grid.shape[0] != N or grid.shape[3] != 2:
        raise OpError(
            op,
            f"expected 'grid' of shape (N={N}, H_out, W_out, 2) for an input of shape {tuple(input.shape)}, "
            f"got {tuple(grid.shape)}",
        )
    if H < 1 or W < 1:
        raise OpError(op, f"'input' must have non-empty spatial dims, got shape {tuple(input.shape)}")
    ac = bool(align_corners)
    Ho, Wo = grid.shape[1], grid.shape[2]
    g = grid.reshape(N, Ho * Wo, 2)
    x = _source_coords(g[..., 0], W, padding_mode, ac)
    y = _source_coords(g[..., 1], H, padding_mode, ac)
    flat = input.reshape(N, Cn, H * W)
    if mode == "nearest":
        out = _gather(flat, x.detach().round(), y.detach().round(), H, W)
    else:
        x0, y0 = x.detach().floor(), y.detach().floor()
        x1, y1 = x0 + 1, y0 + 1
        # the four taps' weights, as torch's nw/ne/sw/se (products of distances to the opposite corner)
        out = (
            _gather(flat, x0, y0, H, W) * ((x1 - x) * (y1 - y)).unsqueeze(1)
            + _gather(flat, x1, y0, H, W) * ((x - x0) * (y1 - y)).unsqueeze(1)
            + _gather(flat, x0, y1, H, W) * ((x1 - x) * (y - y0)).unsqueeze(1)
            + _gather(flat, x1, y1, H, W) * ((x - x0) * (y - y0)).unsqueeze(1)
        )
    return out.reshape(N, Cn, Ho, Wo)
