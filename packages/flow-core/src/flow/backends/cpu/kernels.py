"""Native CPU kernel overrides (``flow._C``), registered for the ``cpu`` device.

Each entry maps an op to a kernel calling the extension; the NumPy reference
kernel stays registered as the generic one, which opcheck compares against.
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


def _kernel_table(native) -> dict:
    table = {}

    def gelu(x, approximate="none"):
        return native.gelu_forward(x, approximate)

    def gelu_backward(g, x, approximate="none"):
        return native.gelu_backward(g, x, approximate)

    table["gelu"] = gelu
    table["gelu_backward"] = gelu_backward
    return table
