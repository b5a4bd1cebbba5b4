"""Sliding blocks and sub-pixel shuffles, as ``torch.nn.functional``: unfold, fold, pixel_shuffle, pixel_unshuffle.

``unfold`` (im2col) is a grouped conv2d with a one-hot kernel: output channel ``c*kh*kw + i*kw + j``
copies tap (i, j) of channel c, which is exactly torch's (C, kh, kw) block order. ``fold`` (col2im)
is the adjoint of that map, i.e. the conv2d input-gradient op with the same kernel, so overlapping
blocks add up. Both are therefore differentiable to any order through the conv ops.
"""

from __future__ import annotations

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.nn.functional.conv import check_input, ntuple
from flow.ops import nn_conv as C

__all__ = ["unfold", "fold", "pixel_shuffle", "pixel_unshuffle"]


def _one_hot_kernel(channels: int, kh: int, kw: int, like):
    from flow._creation import tensor

    K = kh * kw
    w = np.zeros((channels * K, 1, kh, kw))
    taps = np.arange(K)
    for c in range(channels):
        w[c * K + taps, 0, taps // kw, taps % kw] = 1.0
    return tensor(w, dtype=like.dtype, device=like.device)


def _block_args(op, kernel_size, dilation, padding, stride):
    ks = ntuple(op, "kernel_size", kernel_size, 2, 1)
    dil = ntuple(op, "dilation", dilation, 2, 1)
    pad = ntuple(op, "padding", padding, 2, 0)
    st = ntuple(op, "stride", stride, 2, 1)
    return ks, dil, (pad[0], pad[0], pad[1], pad[1]), st


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Extract sliding local blocks: (N, C, H, W) -> (N, C * kh * kw, L), L the number of blocks.

    >>> flow.nn.functional.unfold(flow.randn(1, 3, 5, 5), kernel_size=2).shape
    flow.Size([1, 12, 16])
    """
    op = "unfold"
    check_input(op, input, "input", (3, 4))
    ks, dil, pads, st = _block_args(op, kernel_size, dilation, padding, stride)
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    C.conv_out_size(op, tuple(x.shape[2:]), ks, st, pads, dil)
    w = _one_hot_kernel(x.shape[1], ks[0], ks[1], x)
    out = call(C.CONV2D, x, w, None, stride=st, padding=pads, dilation=dil, groups=x.shape[1])
    out = out.reshape(out.shape[0], out.shape[1], -1)
    return out.squeeze(0) if unbatched else out


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Combine sliding blocks (N, C * kh * kw, L) into an (N, C, *output_size) tensor, summing overlaps.

    >>> x = flow.randn(1, 12, 16)
    >>> flow.nn.functional.fold(x, (5, 5), kernel_size=2).shape
    flow.Size([1, 3, 5, 5])
    """
    op = "fold"
    check_input(op, input, "input", (2, 3))
    out_size = ntuple(op, "output_size", output_size, 2, 1)
    ks, dil, pads, st = _block_args(op, kernel_size, dilation, padding, stride)
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    K = ks[0] * ks[1]
    if x.shape[1] % K:
        raise OpError(
            op,
            f"expected size of input's dimension 1 ({x.shape[1]}) to be divisible by the product of "
            f"kernel_size {ks} ({K})",
        )
    blocks = C.conv_out_size(op, out_size, ks, st, pads, dil)
    if blocks[0] * blocks[1] != x.shape[2]:
        raise OpError(
            op,
            f"given output_size={out_size}, kernel_size={ks}, dilation={dil}, padding={padding!r}, "
            f"stride={st}, expected size of input's dimension 2 to be {blocks[0] * blocks[1]} "
            f"({blocks[0]} x {blocks[1]} blocks), but got {x.shape[2]}",
        )
    channels = x.shape[1] // K
    w = _one_hot_kernel(channels, ks[0], ks[1], x)
    cols = x.reshape(x.shape[0], x.shape[1], blocks[0], blocks[1])
    out = call(
        C.CONV2D_BACKWARD_INPUT,
        cols,
        w,
        input_size=out_size,
        stride=st,
        padding=pads,
        dilation=dil,
        groups=channels,
    )
    return out.squeeze(0) if unbatched else out


def _factor(op: str, name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise OpTypeError(op, f"'{name}' must be an int, got {v!r}")
    if v < 1:
        raise OpError(op, f"'{name}' must be positive, got {v}")
    return v


def pixel_shuffle(input, upscale_factor: int):
    """Rearrange (*, C * r^2, H, W) into (*, C, H * r, W * r) (sub-pixel convolution output)."""
    op = "pixel_shuffle"
    r = _factor(op, "upscale_factor", upscale_factor)
    check_input(op, input, "input", tuple(range(3, 9)))
    *lead, c, h, w = tuple(input.shape)
    if c % (r * r):
        raise OpError(op, f"the channel dim ({c}) of 'input' must be divisible by upscale_factor**2 ({r * r})")
    n = len(lead)
    y = input.reshape(*lead, c // (r * r), r, r, h, w)
    y = y.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor: int):
    """Rearrange (*, C, H * r, W * r) into (*, C * r^2, H, W): the inverse of :func:`pixel_shuffle`."""
    op = "pixel_unshuffle"
    r = _factor(op, "downscale_factor", downscale_factor)
    check_input(op, input, "input", tuple(range(3, 9)))
    *lead, c, h, w = tuple(input.shape)
    if h % r or w % r:
        raise OpError(op, f"the spatial size ({h}, {w}) of 'input' must be divisible by downscale_factor ({r})")
    n = len(lead)
    y = input.reshape(*lead, c, h // r, r, w // r, r)
    y = y.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)
