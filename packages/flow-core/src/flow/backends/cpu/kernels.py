"""Native CPU kernel overrides (``flow._C``), registered for the ``cpu`` device.

Each entry maps an op to a kernel calling the extension; the NumPy reference
kernel stays registered as the generic one, which opcheck compares against.
The native softmax / layer-norm kernels work over the last axis: other dims
are moved last (a view) before the call and back after it.
"""

from __future__ import annotations

import numpy as np

_F32_F64 = (np.dtype(np.float32), np.dtype(np.float64))


def register(registry) -> None:
    from flow.backends.cpu import native

    if not native.HAVE_NATIVE:
        return
    from flow import _dtype as D

    fdt = [D.float32, D.float64]
    table = _kernel_table(native)
    for op_name, fn in table.items():
        if op_name in registry.ops:
            registry.register_kernel(op_name, "cpu", fn, dtypes=fdt)
    for op_name, (fn, out) in _gemm_kernels().items():
        if op_name in registry.ops:
            registry.register_kernel(op_name, "cpu", fn, dtypes=fdt, out=out)


def _gemm_kernels() -> dict:
    """matmul and linear under the thread policy (flow.backends.cpu.threads): OpenBLAS is
    single-threaded, and a large product gets flow's thread count for its call. A small 2-d product
    stays ``ndarray.dot`` (the same GEMM without the ufunc machinery: most of a small eager
    matmul's overhead), with and without ``out=`` for graph memory planning."""
    from flow.backends.cpu import threads

    large = threads.LARGE_GEMM
    mm = threads.matmul

    def matmul(a, b):
        if a.ndim == 2 and b.ndim == 2 and a.dtype is b.dtype and a.shape[0] * a.shape[1] * b.shape[1] < large:
            return a.dot(b)
        return mm(a, b)

    def matmul_out(a, b, out=None):
        return mm(a, b, out=out)

    def linear(x, w, b=None):
        out = matmul(x, w.T)
        if b is not None:
            out += b  # in place: the product is a fresh array
        return out

    def linear_out(x, w, b=None, out=None):
        out = mm(x, w.T, out=out)
        if b is not None:
            out += b
        return out

    return {"matmul": (matmul, matmul_out), "linear": (linear, linear_out)}


def _last_axis(fn, dim, *arrays):
    """Run a last-axis native kernel over ``dim`` of equally shaped arrays."""
    x = arrays[0]
    nd = x.ndim
    if nd == 0:
        return fn(*(a.reshape(1) for a in arrays)).reshape(())
    if x.size == 0:
        return np.zeros_like(x)
    dim = dim % nd
    if dim == nd - 1:
        return fn(*arrays)
    out = fn(*(np.moveaxis(a, dim, -1) for a in arrays))
    return np.moveaxis(out, -1, dim)


def _kernel_table(native) -> dict:
    table = {}

    def gelu(x, approximate="none"):
        return native.gelu_forward(x, approximate)

    def gelu_backward(g, x, approximate="none"):
        return native.gelu_backward(g, x, approximate)

    table["gelu"] = gelu
    table["gelu_backward"] = gelu_backward

    # softmax family (flow.ops.nn_act)
    table["softmax"] = lambda x, dim=-1: _last_axis(native.softmax_forward, dim, x)
    table["log_softmax"] = lambda x, dim=-1: _last_axis(native.log_softmax_forward, dim, x)
    table["softmax_backward"] = lambda g, y, dim=-1: _last_axis(native.softmax_backward, dim, g, y)
    table["log_softmax_backward"] = lambda g, y, dim=-1: _last_axis(native.log_softmax_backward, dim, g, y)

    def silu_backward(g, x):
        if g.shape != x.shape:
            g, x = np.broadcast_arrays(g, x)
        return native.silu_backward(g, x)

    table["silu"] = native.silu_forward
    table["silu_backward"] = silu_backward
    _nn_kernels(native, table)
    return table


def _nn_kernels(native, table: dict) -> None:
    """layer_norm and cross_entropy: the NumPy kernels with native row kernels plugged in."""
    try:
        from flow.ops import nn_loss, nn_norm
    except ImportError:  # pragma: no cover - partial trees
        return
    if hasattr(nn_norm, "native_kernels"):
        table.update(nn_norm.native_kernels(native))
    if hasattr(nn_loss, "native_kernels"):
        table.update(nn_loss.native_kernels(native))
