"""Convolution layers: Conv1d/2d/3d and ConvTranspose1d/2d/3d."""

from __future__ import annotations

import math

import flow.nn.functional as F
from flow import _creation as C
from flow.nn import init
from flow.nn.modules.module import Module
from flow.nn.parameter import Parameter

__all__ = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d"]


def _ntuple(x, n: int, name: str) -> tuple:
    if isinstance(x, (tuple, list)):
        if len(x) != n:
            raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {tuple(x)}")
        return tuple(int(v) for v in x)
    return (int(x),) * n


class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        output_padding=0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        n = self._nd
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(
                f"padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', got {padding_mode!r}"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
        self.stride = _ntuple(stride, n, "stride")
        self.dilation = _ntuple(dilation, n, "dilation")
        self.output_padding = _ntuple(output_padding, n, "output_padding")
        self.groups = groups
        self.padding_mode = padding_mode
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            if self._transposed:
                raise ValueError(f"{type(self).__name__} does not support string padding")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, n, "padding")
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        # F.pad order for the non-zero padding modes: last dim first, (left, right) each
        pads = []
        for d, k, i in zip(reversed(self.dilation), reversed(self.kernel_size), range(n - 1, -1, -1)):
            if self.padding == "same":
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            elif self.padding == "valid":
                pads += [0, 0]
            else:
                pads += [self.padding[i], self.padding[i]]
        self._reversed_padding_repeated_twice = pads
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(C.empty(*shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(C.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch's default
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        n = self._nd
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"  # torch prints strings unquoted: padding=same
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    def _conv_forward(self, input, weight, bias):
        conv = getattr(F, f"conv{self._nd}d")
        if self.padding_mode != "zeros":
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(input, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_ConvNd):
    """1-d convolution over (N, C_in, L) inputs.

    >>> flow.nn.Conv1d(4, 8, 3, padding=1)(flow.randn(2, 4, 10)).shape
    flow.Size([2, 8, 10])
    """

    _nd = 1

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device=device,
            dtype=dtype,
        )


class Conv2d(_ConvNd):
    """2-d convolution over (N, C_in, H, W) inputs; ``padding`` may be an int, a pair, 'same' or 'valid'.

    >>> flow.nn.Conv2d(3, 16, 3, stride=2, padding=1)(flow.randn(1, 3, 32, 32)).shape
    flow.Size([1, 16, 16, 16])
    """

    _nd = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device=device,
            dtype=dtype,
        )


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            output_padding,
            device=device,
            dtype=dtype,
        )

    def _output_padding(self, input, output_size) -> tuple:
        if output_size is None:
            return self.output_padding
        n = self._nd
        output_size = tuple(output_size)[-n:]
        if len(output_size) != n:
            raise ValueError(f"output_size must have {n} or {n + 2} elements (got {len(output_size)})")
        res = []
        for d in range(n):
            in_size = input.shape[input.ndim - n + d]
            min_size = (
                (in_size - 1) * self.stride[d] - 2 * self.padding[d] + self.dilation[d] * (self.kernel_size[d] - 1) + 1
            )
            max_size = min_size + self.stride[d] - 1
            if not min_size <= output_size[d] <= max_size:
                raise ValueError(
                    f"requested an output size of {output_size}, but valid sizes range from "
                    f"{min_size} to {max_size} (for an input of {tuple(input.shape)[-n:]})"
                )
            res.append(output_size[d] - min_size)
        return tuple(res)

    def forward(self, input, output_size=None):
        fn = getattr(F, f"conv_transpose{self._nd}d")
        op = self._output_padding(input, output_size)
        return fn(input, self.weight, self.bias, self.stride, self.padding, op, self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-d convolution (the gradient of Conv1d with respect to its input)."""

    _nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-d convolution; weight shape (in_channels, out_channels // groups, kH, kW).

    >>> flow.nn.ConvTranspose2d(8, 4, 2, stride=2)(flow.randn(1, 8, 5, 5)).shape
    flow.Size([1, 4, 10, 10])
    """

    _nd = 2
