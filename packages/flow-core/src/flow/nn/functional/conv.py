"""Convolutions, as ``torch.nn.functional``: conv1d, conv2d, conv_transpose1d, conv_transpose2d."""

from __future__ import annotations

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import nn_conv as C

__all__ = ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d"]


def _tensor_type():
    from flow._tensor import Tensor

    return Tensor


def ntuple(op: str, name: str, v, n: int, minimum: int | None = None) -> tuple:
    """An int or a sequence of ``n`` ints as an n-tuple, checked against ``minimum``."""
    if isinstance(v, (list, tuple)):
        vals = tuple(v)
        if len(vals) == 1 and n > 1:
            vals = vals * n
    else:
        vals = (v,) * n
    if len(vals) != n or any(isinstance(x, bool) or not isinstance(x, int) for x in vals):
        raise OpTypeError(op, f"'{name}' must be an int or a tuple of {n} ints, got {v!r}")
    if minimum is not None and any(x < minimum for x in vals):
        what = "positive" if minimum == 1 else "non-negative" if minimum == 0 else f">= {minimum}"
        raise OpError(op, f"'{name}' must be {what}, got {v!r}")
    return vals


def check_input(op: str, x, name: str, ndims: tuple) -> None:
    if not isinstance(x, _tensor_type()):
        raise OpTypeError(op, f"'{name}' must be a Tensor, got {type(x).__name__}")
    if x.ndim not in ndims:
        want = " or ".join(f"{d}-d" for d in ndims)
        raise OpError(op, f"expected '{name}' to be {want}, got a {x.ndim}-d tensor of shape {tuple(x.shape)}")


def _padding(op: str, padding, ksize: tuple, dilation: tuple, stride: tuple) -> tuple:
    """torch's padding argument as explicit (before, after) pairs per spatial dim, flattened."""
    n = len(ksize)
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * (2 * n)
        if padding == "same":
            if any(s != 1 for s in stride):
                raise OpError(op, f"padding='same' is not supported for strided convolutions (stride={stride})")
            out = []
            for k, d in zip(ksize, dilation):
                total = d * (k - 1)
                out += [total // 2, total - total // 2]  # the extra pixel goes after, as in torch
            return tuple(out)
        raise OpError(op, f"'padding' must be 'same', 'valid', an int or a tuple of ints, got {padding!r}")
    p = ntuple(op, "padding", padding, n, minimum=0)
    return tuple(v for x in p for v in (x, x))


def _convnd(op: str, nd: int, input, weight, bias, stride, padding, dilation, groups):
    check_input(op, input, "input", (nd + 1, nd + 2))
    check_input(op, weight, "weight", (nd + 2,))
    if bias is not None:
        check_input(op, bias, "bias", (1,))
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise OpTypeError(op, f"'groups' must be an int, got {groups!r}")
    if groups < 1:
        raise OpError(op, f"'groups' must be a positive int, got {groups}")
    st = ntuple(op, "stride", stride, nd, 1)
    dil = ntuple(op, "dilation", dilation, nd, 1)
    pads = _padding(op, padding, tuple(weight.shape[2:]), dil, st)
    unbatched = input.ndim == nd + 1
    x = input.unsqueeze(0) if unbatched else input
    C.check_conv_shapes(op, tuple(x.shape), tuple(weight.shape), groups, None if bias is None else bias.shape)
    C.conv_out_size(op, tuple(x.shape[2:]), tuple(weight.shape[2:]), st, pads, dil)
    w = weight
    if nd == 1:  # a conv2d over a unit height
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        st, dil, pads = (1,) + st, (1,) + dil, (0, 0) + pads
    out = call(C.CONV2D, x, w, bias, stride=st, padding=pads, dilation=dil, groups=groups)
    if nd == 1:
        out = out.squeeze(2)
    return out.squeeze(0) if unbatched else out


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution (cross-correlation) of an (N, C, H, W) or (C, H, W) input.

    ``padding`` is an int, a pair, ``'valid'`` or ``'same'`` (stride 1; an odd total goes after).
    """
    return _convnd("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution of an (N, C, L) or (C, L) input (a conv2d over a unit height)."""
    return _convnd("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def _conv_transposend(op, nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    check_input(op, input, "input", (nd + 1, nd + 2))
    check_input(op, weight, "weight", (nd + 2,))
    if bias is not None:
        check_input(op, bias, "bias", (1,))
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise OpError(op, f"'groups' must be a positive int, got {groups!r}")
    if isinstance(padding, str):
        raise OpError(op, f"'padding' must be an int or a tuple of ints for a transposed convolution, got {padding!r}")
    st = ntuple(op, "stride", stride, nd, 1)
    dil = ntuple(op, "dilation", dilation, nd, 1)
    pad = ntuple(op, "padding", padding, nd, 0)
    opad = ntuple(op, "output_padding", output_padding, nd, 0)
    for o, s, d in zip(opad, st, dil):
        if o >= max(s, d):
            raise OpError(op, f"'output_padding' {opad} must be smaller than stride {st} or dilation {dil}")
    unbatched = input.ndim == nd + 1
    x = input.unsqueeze(0) if unbatched else input
    cin, cout_g = weight.shape[0], weight.shape[1]
    if x.shape[1] != cin:
        raise OpError(
            op,
            f"expected 'input' with {cin} channels (weight.shape[0]), got {x.shape[1]} channels "
            f"(input shape {tuple(x.shape)}, weight shape {tuple(weight.shape)})",
        )
    if cin % groups:
        raise OpError(op, f"'weight' has {cin} input channels, which is not divisible by groups={groups}")
    if bias is not None and tuple(bias.shape) != (cout_g * groups,):
        raise OpError(op, f"'bias' must have shape ({cout_g * groups},), got {tuple(bias.shape)}")
    ks = tuple(weight.shape[2:])
    out_size, pads = [], []
    for L, k, s, p, o, d in zip(x.shape[2:], ks, st, pad, opad, dil):
        size = (L - 1) * s - 2 * p + d * (k - 1) + o + 1
        if size < 1:
            raise OpError(
                op,
                f"the output size would be {size} (< 1) for input size {L}, kernel {k}, stride {s}, "
                f"padding {p}, dilation {d}, output_padding {o}",
            )
        out_size.append(size)
        pads += [p, p - max(0, o - s + 1)]  # output_padding >= stride (dilation > stride): crop the far side
    w = weight
    if nd == 1:
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        st, dil, pads, out_size = (1,) + st, (1,) + dil, [0, 0] + pads, [1] + out_size
    out = call(
        C.CONV2D_BACKWARD_INPUT,
        x,
        w,
        input_size=tuple(out_size),
        stride=st,
        padding=tuple(pads),
        dilation=dil,
        groups=groups,
    )
    if bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * (out.ndim - 2))
    if nd == 1:
        out = out.squeeze(2)
    return out.squeeze(0) if unbatched else out


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed 2-d convolution (the adjoint of conv2d in its input); weight is (C_in, C_out/groups, kH, kW)."""
    return _conv_transposend(
        "conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups, dilation
    )


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed 1-d convolution; weight is (C_in, C_out/groups, k)."""
    return _conv_transposend(
        "conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups, dilation
    )
