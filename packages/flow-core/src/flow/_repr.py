"""PyTorch-style printing of tensors."""

from __future__ import annotations

import numpy as np

from flow import _dtype as D


def tensor_repr(t) -> str:
    a = t.numpy_host() if t.device.type != "meta" else None
    prefix = "tensor("
    extras = []
    if a is None:
        body = "..."
        extras.append(f"size={tuple(t.shape)}")
    else:
        if t.dtype in (D.bfloat16, D.float16):
            a = a.astype(np.float32)
        if a.size == 0:
            body = "[]"
            extras.append(f"size={tuple(t.shape)}")
        elif t.dtype.is_floating_point:
            finite = a[np.isfinite(a)]
            intlike = finite.size > 0 and np.all(finite == np.round(finite)) and np.abs(finite).max() < 1e8
            if intlike:
                fmt = {"float_kind": lambda v: (f"{v:.0f}." if np.isfinite(v) else str(v))}
            else:
                big = finite.size > 0 and (np.abs(finite).max() >= 1e8 or
                                           (np.abs(finite[finite != 0]).min() < 1e-4 if np.any(finite != 0)
                                            else False))
                fmt = {"float_kind": (lambda v: f"{v:.4e}") if big else (lambda v: f"{v:.4f}")}
            body = np.array2string(a, separator=", ", prefix=prefix, formatter=fmt, threshold=1000, edgeitems=3)
        else:
            body = np.array2string(a, separator=", ", prefix=prefix, threshold=1000, edgeitems=3)
            if t.dtype is D.bool:
                body = body.replace("True", "True").replace("False", "False")
    if t.device.type != "cpu":
        extras.append(f"device='{t.device}'")
    if t.dtype not in (D._default_dtype, D.int64, D.bool) or (t.dtype is D.int64 and a is not None and a.size == 0):
        extras.append(f"dtype={t.dtype!r}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return prefix + body + "".join(", " + e for e in extras) + ")"
