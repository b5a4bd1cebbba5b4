"""3-d layers: Conv3d, MaxPool3d, AvgPool3d (over (N, C, D, H, W) inputs)."""

from __future__ import annotations

import flow.nn.functional as F
from flow.nn.modules.conv import _ConvNd
from flow.nn.modules.pooling import AvgPool2d, _MaxPoolNd

__all__ = ["Conv3d", "MaxPool3d", "AvgPool3d"]


class Conv3d(_ConvNd):
    """3-d convolution over (N, C_in, D, H, W) inputs; weight (C_out, C_in / groups, kD, kH, kW).

    >>> flow.nn.Conv3d(2, 4, 3, padding=1)(flow.randn(1, 2, 5, 6, 7)).shape
    flow.Size([1, 4, 5, 6, 7])
    """

    _nd = 3


class MaxPool3d(_MaxPoolNd):
    """Max over sliding (kD, kH, kW) windows of (N, C, D, H, W) inputs."""

    def forward(self, input):
        return F.max_pool3d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            ceil_mode=self.ceil_mode,
            return_indices=self.return_indices,
        )


class AvgPool3d(AvgPool2d):
    """Average over sliding (kD, kH, kW) windows of (N, C, D, H, W) inputs."""

    def forward(self, input):
        return F.avg_pool3d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )
