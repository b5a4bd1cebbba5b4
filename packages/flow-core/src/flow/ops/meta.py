"""Meta rules: shapes, dtypes and devices out from those in, with clear errors.

Meta rules receive anything with ``shape``, ``dtype`` and ``device`` (eager
tensors, symbolic graph tensors, :class:`TensorMeta`) and return
:class:`TensorMeta` (or a tuple of them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from flow import _dtype as D
from flow.errors import OpError, OpIndexError, OpTypeError


@dataclass(frozen=True)
class TensorMeta:
    """Shape, dtype and device of a tensor, without data."""

    shape: tuple
    dtype: D.dtype
    device: object

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def shape_of(x) -> tuple:
    return tuple(x.shape)


def is_tensor_like(x) -> bool:
    # NumPy scalars have shape, dtype and (NumPy 2) device too, but are constants here.
    if isinstance(x, np.generic):
        return False
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "device")


def broadcast_shapes(op: str, *shapes: Sequence[int]) -> tuple:
    """NumPy/PyTorch broadcasting with an error naming the op and the shapes."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        off = ndim - len(s)
        for i, d in enumerate(s):
            o = out[off + i]
            if o == 1:
                out[off + i] = d
            elif d != 1 and d != o:
                raise OpError(
                    op,
                    f"shapes {[tuple(x) for x in shapes]} cannot be broadcast together (dim {i - len(s)}: {o} vs {d})",
                )
    return tuple(out)


def wrap_dim(op: str, dim, ndim: int, arg: str = "dim") -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise OpTypeError(op, f"'{arg}' must be an int, got {type(dim).__name__} {dim!r}")
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise OpIndexError(op, f"'{arg}'={dim} is out of range for a {ndim}-d tensor (expected {-n} <= {arg} < {n})")
    return dim % n


def wrap_dims(op: str, dims, ndim: int) -> tuple:
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(wrap_dim(op, d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise OpError(op, f"dim {tuple(dims)} names a dimension twice")
    return out


def check_same_device(op: str, *xs) -> object:
    dev = None
    for x in xs:
        if x is None or not is_tensor_like(x):
            continue
        if dev is None:
            dev = x.device
        elif x.device != dev:
            raise OpError(op, f"expected all tensors on the same device, got {dev} and {x.device}")
    return dev


def check_float(op: str, x, arg: str = "input") -> None:
    if not x.dtype.is_floating_point:
        raise OpTypeError(op, f"'{arg}' must be a floating-point tensor, got {x.dtype}")


def check_dtype_in(op: str, x, allowed, arg: str = "input") -> None:
    if x.dtype not in allowed:
        raise OpTypeError(op, f"'{arg}' must have dtype in {list(allowed)}, got {x.dtype}")


def check_ndim(op: str, x, ndims, arg: str = "input") -> None:
    if isinstance(ndims, int):
        ndims = (ndims,)
    if len(x.shape) not in ndims:
        want = " or ".join(f"{n}-d" for n in ndims)
        raise OpError(op, f"'{arg}' must be {want}, got shape {tuple(x.shape)}")


def same(x, *args, **attrs) -> TensorMeta:
    """Output like the first input (unary elementwise ops)."""
    return TensorMeta(tuple(x.shape), x.dtype, x.device)


def same_float(op: str):
    def rule(x, *args, **attrs):
        check_float(op, x)
        return TensorMeta(tuple(x.shape), x.dtype, x.device)

    return rule


def elementwise(op: str, out_dtype=None):
    """Broadcast all tensor inputs; dtype of the first tensor input (the caller promoted them)."""

    def rule(*xs, **attrs):
        ts = [x for x in xs if is_tensor_like(x)]
        dev = check_same_device(op, *ts)
        for t in ts[1:]:
            if t.dtype != ts[0].dtype:
                raise OpTypeError(
                    op, f"inputs must have the same dtype after promotion, got {ts[0].dtype} and {t.dtype}"
                )
        shape = broadcast_shapes(op, *[tuple(t.shape) for t in ts])
        return TensorMeta(shape, out_dtype or ts[0].dtype, dev)

    return rule


def same_shapes(op: str, names=("grad_output", "input")):
    """Backward ops of elementwise ops: inputs of one shape and dtype (no broadcasting), output like them."""

    def rule(*xs, **attrs):
        ts = [x for x in xs if is_tensor_like(x)]
        for n, t in zip(names[1:], ts[1:]):
            if tuple(t.shape) != tuple(ts[0].shape) or t.dtype != ts[0].dtype:
                raise OpError(
                    op,
                    f"'{n}' must have the shape and dtype of '{names[0]}' ({tuple(ts[0].shape)} "
                    f"{ts[0].dtype}), got {tuple(t.shape)} {t.dtype}",
                )
        return TensorMeta(tuple(ts[0].shape), ts[0].dtype, check_same_device(op, *ts))

    return rule


def reduction(op: str, out_dtype=None, allow_int: bool = True):
    def rule(x, dim=None, keepdim=False, **attrs):
        if not allow_int and not x.dtype.is_floating_point:
            raise OpTypeError(op, f"expected a floating-point input, got {x.dtype}")
        dims = wrap_dims(op, dim, len(x.shape))
        if keepdim:
            shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
        else:
            shape = tuple(s for i, s in enumerate(x.shape) if i not in dims)
        dt = out_dtype(x.dtype) if callable(out_dtype) else (out_dtype or x.dtype)
        return TensorMeta(shape, dt, x.device)

    return rule
