"""3-d convolution and pooling, as ``torch.nn.functional``: conv3d, max_pool3d, avg_pool3d.

They are built from the 2-d ops, so they share those ops' kernels and gradients (of any order):

* ``conv3d`` is a sum over the kernel's depth taps: tap ``a`` reads the input depth slices
  ``a * dilation + stride * t`` (a strided view), folded into the batch, and convolves them in 2-d
  with ``weight[:, :, a]``.
* Max and average pooling over a box are separable: pooling the (H, W) planes and then pooling the
  result along depth gives the 3-d window's max (or mean: the divisor of a box is the product of its
  per-axis counts, also with ``ceil_mode`` and ``count_include_pad=False``).
"""

from __future__ import annotations

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.nn.functional.conv import _padding, check_input, ntuple
from flow.nn.functional.pooling import _window_args, avg_pool2d, max_pool2d
from flow.ops import nn_conv as C
from flow.ops import nn_pool as P

__all__ = ["conv3d", "max_pool3d", "avg_pool3d"]


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d convolution (cross-correlation) of an (N, C, D, H, W) or (C, D, H, W) input.

    ``weight`` is (C_out, C_in / groups, kD, kH, kW); ``padding`` is an int, a triple, ``'valid'``
    or ``'same'`` (stride 1).
    """
    op = "conv3d"
    check_input(op, input, "input", (4, 5))
    check_input(op, weight, "weight", (5,))
    if bias is not None:
        check_input(op, bias, "bias", (1,))
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise OpError(op, f"'groups' must be a positive int, got {groups!r}")
    st = ntuple(op, "stride", stride, 3, 1)
    dil = ntuple(op, "dilation", dilation, 3, 1)
    pads = _padding(op, padding, tuple(weight.shape[2:]), dil, st)
    unbatched = input.ndim == 4
    x = input.unsqueeze(0) if unbatched else input
    C.check_conv_shapes(op, tuple(x.shape), tuple(weight.shape), groups, None if bias is None else bias.shape)
    Do, Ho, Wo = C.conv_out_size(op, tuple(x.shape[2:]), tuple(weight.shape[2:]), st, pads, dil)
    if pads[0] or pads[1]:
        from flow.ops.padding import pad

        x = pad(x, (0, 0, 0, 0, pads[0], pads[1]))
    N, Cin, _, H, W = tuple(x.shape)
    O, kd = weight.shape[0], weight.shape[2]
    sd, dd = st[0], dil[0]
    acc = None
    for a in range(kd):
        planes = x[:, :, a * dd : a * dd + sd * (Do - 1) + 1 : sd]  # (N, C, Do, H, W)
        planes = planes.transpose(1, 2).reshape(N * Do, Cin, H, W)
        y = call(
            C.CONV2D, planes, weight[:, :, a], None, stride=st[1:], padding=pads[2:], dilation=dil[1:], groups=groups
        )
        acc = y if acc is None else acc + y
    out = acc.reshape(N, Do, O, Ho, Wo).transpose(1, 2)
    if bias is not None:
        out = out + bias.reshape(1, O, 1, 1, 1)
    return out.squeeze(0) if unbatched else out


def _batched5(op, input):
    check_input(op, input, "input", (4, 5))
    unbatched = input.ndim == 4
    return (input.unsqueeze(0) if unbatched else input), unbatched


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """3-d max pooling of an (N, C, D, H, W) or (C, D, H, W) input.

    ``indices`` (with ``return_indices``) index each flattened (D, H, W) input volume, as torch's.
    """
    op = "max_pool3d"
    x, unbatched = _batched5(op, input)
    ks, st, pad, dil = _window_args(op, 3, kernel_size, stride, padding, dilation)
    P.check_pool_params(op, tuple(x.shape[2:]), ks, st, pad, dil, bool(ceil_mode))
    N, Cn, D, H, W = tuple(x.shape)
    planes, idx_hw = max_pool2d(
        x.reshape(N, Cn * D, H, W), ks[1:], st[1:], pad[1:], dil[1:], ceil_mode, return_indices=True
    )
    Ho, Wo = planes.shape[2:]
    out, idx_d = max_pool2d(
        planes.reshape(N, Cn, D, Ho * Wo),
        (ks[0], 1),
        (st[0], 1),
        (pad[0], 0),
        (dil[0], 1),
        ceil_mode,
        return_indices=True,
    )
    Do = out.shape[2]
    out = out.reshape(N, Cn, Do, Ho, Wo)
    if return_indices:
        # idx_d = d * (Ho*Wo) + p picks depth d of output pixel p; idx_hw there is the (h, w) offset
        hw = idx_hw.reshape(N, Cn, D * Ho * Wo).gather(2, idx_d.reshape(N, Cn, Do * Ho * Wo))
        depth = idx_d.reshape(N, Cn, Do * Ho * Wo) // (Ho * Wo)
        idx = (depth * (H * W) + hw).reshape(N, Cn, Do, Ho, Wo)
        return (out.squeeze(0), idx.squeeze(0)) if unbatched else (out, idx)
    return out.squeeze(0) if unbatched else out


def avg_pool3d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    """3-d average pooling of an (N, C, D, H, W) or (C, D, H, W) input."""
    op = "avg_pool3d"
    x, unbatched = _batched5(op, input)
    ks, st, pad, dil = _window_args(op, 3, kernel_size, stride, padding, 1)
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, int):
            raise OpTypeError(op, f"'divisor_override' must be an int or None, got {divisor_override!r}")
        if divisor_override == 0:
            raise OpError(op, "'divisor_override' must be non-zero, got 0")
    P.check_pool_params(op, tuple(x.shape[2:]), ks, st, pad, dil, bool(ceil_mode))
    N, Cn, D, H, W = tuple(x.shape)
    # with an override both passes sum (divisor 1) and the total is divided once at the end
    div = None if divisor_override is None else 1
    planes = avg_pool2d(x.reshape(N, Cn * D, H, W), ks[1:], st[1:], pad[1:], ceil_mode, count_include_pad, div)
    Ho, Wo = planes.shape[2:]
    out = avg_pool2d(
        planes.reshape(N, Cn, D, Ho * Wo), (ks[0], 1), (st[0], 1), (pad[0], 0), ceil_mode, count_include_pad, div
    )
    out = out.reshape(N, Cn, out.shape[2], Ho, Wo)
    if divisor_override is not None:
        out = out / divisor_override
    return out.squeeze(0) if unbatched else out
