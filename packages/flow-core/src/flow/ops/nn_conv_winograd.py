"""The ``"winograd"`` CPU kernels of conv2d and conv2d_backward_input (graph-mode autotuning candidates).

A second kernel under another name is an alternative the graph executor times against ``"default"``
(the im2col GEMM of :mod:`flow.ops.nn_conv`) and keeps when faster; eager dispatch keeps running
``"default"`` (registered first). Both call :mod:`flow.backends.cpu.winograd`, which computes by
Winograd F(2x2, 3x3) where the layer is a 3x3, stride-1, dilation-1, ungrouped float convolution that
passes its accuracy rule, and by the GEMM everywhere else (16-bit floats: the default kernel's float32
adapter). Both take ``out=``, so an autotuned step still gets its outputs planned in the arena.
"""

from __future__ import annotations

from flow.ops._define import kernel
from flow.ops.nn_conv import CONV2D, CONV2D_BACKWARD_INPUT


@kernel(CONV2D, "cpu", name="winograd")
def _conv2d_winograd(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, out=None):
    from flow.backends.cpu import conv, winograd  # deferred: the backend imports flow.ops.nn_conv

    if x.dtype not in winograd.TOLERANCE:  # 16-bit floats: the default kernel (the float32 adapter)
        return conv.conv2d_out(x, w, b, stride, padding, dilation, groups, out=out)
    return winograd.conv2d_forward(x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups, out=out)


@kernel(CONV2D_BACKWARD_INPUT, "cpu", name="winograd")
def _bwi_winograd(g, w, input_size=(), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, out=None):
    from flow.backends.cpu import conv, winograd

    if g.dtype not in winograd.TOLERANCE:
        return conv.conv2d_backward_input_out(g, w, input_size, stride, padding, dilation, groups, out=out)
    return winograd.conv2d_backward_input(
        g, w, tuple(input_size), tuple(stride), tuple(padding), tuple(dilation), groups, out=out
    )


# both write into ``out=`` when given (graph memory planning's arena), as the GEMM kernels' out-variants do
_conv2d_winograd.supports_out = True
_bwi_winograd.supports_out = True
