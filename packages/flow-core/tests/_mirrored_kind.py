"""The test-only "mirrored" array kind: two copies of the data, every op run on both (and checked
to agree) by its handler. Shared by tests/test_array_kinds*.py."""

from __future__ import annotations

import numpy as np

import flow
from flow import array_kinds as K
from flow.interceptors import run_op


class MirroredArray:
    """Two copies of one array."""

    __slots__ = ("a", "b")

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        self.a = a
        self.b = b

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    ndim = property(lambda self: self.a.ndim)
    size = property(lambda self: self.a.size)
    strides = property(lambda self: self.a.strides)
    flags = property(lambda self: self.a.flags)

    def __array__(self, dtype=None, copy=None):
        check_equal(self.a, self.b, "__array__")
        return self.a.copy() if dtype is None else self.a.astype(dtype)

    def copy(self) -> "MirroredArray":
        return MirroredArray(self.a.copy(), self.b.copy())

    def like(self, host: np.ndarray) -> "MirroredArray":
        return MirroredArray(np.array(host), np.array(host))

    def __setitem__(self, key, val) -> None:
        if isinstance(val, MirroredArray):
            self.a[key] = val.a
            self.b[key] = val.b
        else:
            self.a[key] = val
            self.b[key] = val

    def repr_extras(self) -> list:
        return ["mirrored=True"]


def check_equal(a, b, what: str) -> None:
    if not np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True):
        raise AssertionError(f"mirrored copies diverged in {what}")


SEEN: list = []  # names of the ops the handler answered


def _piece(x, i: int):
    """Copy ``i`` of an input: a mirrored tensor's own copy; a plain tensor itself for copy 0 and a
    copy of it for copy 1 (so that an op writing into a plain input, such as an optimizer update
    into its plain state buffers, writes it once)."""
    if isinstance(x, flow.Tensor):
        d = x._data
        if d.__class__ is MirroredArray:
            return K.wrap(d.a if i == 0 else d.b, x.device)
        return x if i == 0 or d.__class__ is not np.ndarray else K.wrap(d.copy(), x.device)
    if x.__class__ in (list, tuple):
        return x.__class__(_piece(t, i) for t in x)
    return x


def _join(r0, r1, plain: set):
    if isinstance(r0, flow.Tensor):
        check_equal(r0._data, r1._data, "an op's output")
        if id(r0._data) in plain:  # written into a plain input in place: it stays that input's
            return r0
        return K.wrap(MirroredArray(r0._data, r1._data), r0.device)
    return tuple(_join(x, y, plain) for x, y in zip(r0, r1))


def _plain_arrays(inputs) -> set:
    out = set()
    for x in inputs:
        for t in x if x.__class__ in (list, tuple) else (x,):
            if isinstance(t, flow.Tensor) and t._data.__class__ is not MirroredArray:
                out.add(id(t._data))
    return out


def mirrored_handler(op, inputs, attrs):
    SEEN.append(op.name)
    with flow.no_grad():
        r1 = run_op(op, [_piece(x, 1) for x in inputs], attrs)  # on copies of the plain inputs: first
        r0 = run_op(op, [_piece(x, 0) for x in inputs], attrs)
    out = _join(r0, r1, _plain_arrays(inputs))
    K.record(op, inputs, attrs, out)
    return out


def mirror(t: flow.Tensor) -> flow.Tensor:
    """Make ``t`` (a tensor or a parameter) hold a mirrored copy of its data, in place."""
    a = t.detach().numpy()
    t.data = K.wrap(MirroredArray(a.copy(), a.copy()), t.device)
    return t


def mirrored(*shape, requires_grad=False, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return K.wrap(MirroredArray(a.copy(), a.copy()), requires_grad=requires_grad), a


def is_mirrored(t) -> bool:
    return isinstance(t, flow.Tensor) and t._data.__class__ is MirroredArray
