"""Out-variants of core generic kernels, for graph memory planning (``out=`` into its arena).

Each is the same NumPy-API call as the generic kernel of its op, with ``out=``; they are declared
on those kernel entries (:func:`flow.graph.pass_tables.register_out_variant`) by the ``flow.graph``
plugin, so a device overriding the op with its own kernel does not inherit them.
"""

from __future__ import annotations


def _linear(xp):
    def linear_out(x, w, b=None, out=None):
        out = xp.matmul(x, w.T, out=out)
        if b is not None:
            out += b
        return out

    return linear_out


def _matmul(xp):
    def matmul_out(a, b, out=None):
        return xp.matmul(a, b, out=out)

    return matmul_out


def _relu(xp):
    def relu_out(x, out=None):
        return xp.maximum(x, x.dtype.type(0), out=out)

    return relu_out


def _div(xp):
    def div_out(a, b, out=None):
        return xp.true_divide(a, b, out=out)

    return div_out


def _cast(xp):
    def cast_out(x, dtype, out=None):
        if out is None:
            from flow import _dtype as D

            return x.astype(D.as_dtype(dtype).np)
        xp.copyto(out, x, casting="unsafe")
        return out

    return cast_out


def _cat(xp):
    def cat_out(tensors, dim=0, out=None):
        return xp.concatenate(tensors, axis=dim, out=out)

    return cat_out


def _sum(xp):
    from flow.ops.reduction import _sum_kernel, axes

    plain = _sum_kernel(xp)

    def sum_out(x, dim=None, keepdim=False, out=None):
        if x.dtype in (xp.float32, xp.float64):
            return xp.sum(x, axis=axes(x, dim), keepdims=keepdim, out=out)
        r = plain(x, dim, keepdim)  # integer/bool sums: the kernel's own accumulation dtype rules
        if out is None:
            return r
        out[...] = r
        return out

    return sum_out


GENERIC_OUT_VARIANTS = {
    "linear": _linear,
    "matmul": _matmul,
    "relu": _relu,
    "div": _div,
    "cast": _cast,
    "cat": _cat,
    "sum": _sum,
}


def register(registry) -> None:
    from flow.graph.pass_tables import register_out_variant

    for op, factory in GENERIC_OUT_VARIANTS.items():
        register_out_variant(registry, op, "generic", factory)
    # the CPU convolutions (flow.backends.cpu.conv): their native kernels write into the given array
    if "cpu" in registry._device_types:
        from flow.backends.cpu import conv

        for op, fn in conv.OUT_VARIANTS.items():
            if op in registry._ops:
                register_out_variant(registry, op, "cpu", fn)
