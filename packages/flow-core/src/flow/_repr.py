"""PyTorch-style printing of tensors."""

from __future__ import annotations

import numpy as np

from flow import _dtype as D


def _shape_only(t) -> bool:
    if t.device.type == "cpu":
        return False
    from flow.registry import REGISTRY

    dt = REGISTRY._device_types.get(t.device.type)
    return dt is None or bool(dt.extra.get("shape_only"))


def _float_formatter(a: np.ndarray):
    """One fixed format for every element, padded to a common width (as PyTorch prints)."""
    finite = a[np.isfinite(a)]
    if finite.size and np.all(finite == np.round(finite)) and np.abs(finite).max() < 1e8:

        def fmt(v):
            return f"{v:.0f}." if np.isfinite(v) else str(v)
    else:
        nz = np.abs(finite[finite != 0])
        sci = nz.size > 0 and (nz.max() >= 1e8 or nz.min() < 1e-4)
        spec = ".4e" if sci else ".4f"

        def fmt(v):
            return format(v, spec) if np.isfinite(v) else str(v)

    width = 0
    for v in (finite.max(), finite.min()) if finite.size else ():
        width = max(width, len(fmt(v)))
    if finite.size != a.size:
        width = max(width, max(len(str(v)) for v in a[~np.isfinite(a)].flat[:1000]))
    return {"float_kind": lambda v: fmt(v).rjust(width)}


def _kind_extras(t) -> list | None:
    """For an array kind's tensor (flow.array_kinds): what printing appends (``repr_extras()``);
    None for a plain tensor."""
    from flow._dispatch import _KINDS

    d = t._data
    if d.__class__ is np.ndarray or d.__class__ not in _KINDS:
        return None
    fn = getattr(d, "repr_extras", None)
    return [str(e) for e in fn()] if fn is not None else []


def tensor_repr(t) -> str:
    kind = _kind_extras(t)
    if kind is not None and getattr(type(t._data), "__array__", None) is None:
        a = None  # an array kind without a host value: shape only
    else:
        a = None if _shape_only(t) else t.numpy_host()
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
            if a.ndim != 1:
                extras.append(f"size={tuple(t.shape)}")
        elif t.dtype.is_floating_point:
            body = np.array2string(
                a,
                separator=", ",
                prefix=prefix,
                formatter=_float_formatter(a),
                threshold=1000,
                edgeitems=3,
                max_line_width=80,
            )
        else:
            body = np.array2string(a, separator=", ", prefix=prefix, threshold=1000, edgeitems=3, max_line_width=80)
    if t.device.type != "cpu":
        extras.append(f"device='{t.device}'")
    if t.dtype not in (D._default_dtype, D.int64, D.bool) or (t.dtype is D.int64 and a is not None and a.size == 0):
        extras.append(f"dtype={t.dtype!r}")
    if kind:
        extras.extend(kind)
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return prefix + body + "".join(", " + e for e in extras) + ")"
