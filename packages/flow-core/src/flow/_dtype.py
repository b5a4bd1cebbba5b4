"""dtypes: PyTorch's names on top of NumPy (and ml_dtypes for bfloat16).

A ``flow.dtype`` is an interned object; equality is identity, so the dispatcher
can key its kernel cache on it without hashing strings.
"""

from __future__ import annotations

import builtins as _builtins

import ml_dtypes
import numpy as np

__all__ = [
    "dtype",
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "get_default_dtype",
    "set_default_dtype",
    "promote_types",
    "result_type",
    "as_dtype",
]

_BOOL, _INT, _FLOAT = 0, 1, 2


class dtype:
    """A tensor element type (``flow.float32`` ...)."""

    __slots__ = ("name", "np", "itemsize", "category", "is_floating_point", "is_signed", "_rank")

    def __init__(self, name: str, np_dtype, category: int, rank: int) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.category = category
        self.is_floating_point = category == _FLOAT
        self.is_signed = name not in ("bool", "uint8")
        self._rank = rank

    def __repr__(self) -> str:
        return f"flow.{self.name}"

    def __reduce__(self):
        return (as_dtype, (self.name,))

    @property
    def is_complex(self) -> bool:
        return False

    def to_real(self) -> "dtype":
        return self


bool = dtype("bool", np.bool_, _BOOL, 0)  # noqa: A001 - PyTorch's name
uint8 = dtype("uint8", np.uint8, _INT, 1)
int8 = dtype("int8", np.int8, _INT, 1)
int16 = dtype("int16", np.int16, _INT, 2)
int32 = dtype("int32", np.int32, _INT, 3)
int64 = dtype("int64", np.int64, _INT, 4)
float16 = dtype("float16", np.float16, _FLOAT, 5)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16, _FLOAT, 5)
float32 = dtype("float32", np.float32, _FLOAT, 6)
float64 = dtype("float64", np.float64, _FLOAT, 7)

ALL_DTYPES = (bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)
FLOAT_DTYPES = (float16, bfloat16, float32, float64)
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update(
    {"float": float32, "double": float64, "half": float16, "long": int64, "int": int32, "short": int16, "bool_": bool}
)
# NumPy dtype -> flow dtype; the dispatcher uses this to type kernel outputs.
NP_TO_DTYPE: dict = {d.np: d for d in ALL_DTYPES}

_default_dtype = float32


def get_default_dtype() -> dtype:
    """The dtype of floating-point tensors made from Python floats (float32 unless changed)."""
    return _default_dtype


def set_default_dtype(d: dtype) -> None:
    """Set the default floating-point dtype (float16, bfloat16, float32 or float64)."""
    global _default_dtype
    d = as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"set_default_dtype: only floating-point dtypes are allowed, got {d}")
    _default_dtype = d
    _scalar_cache.clear()


def as_dtype(d) -> dtype:
    """Turn a flow dtype, a NumPy dtype, a Python type or a name into a flow dtype."""
    if isinstance(d, dtype):
        return d
    if isinstance(d, str):
        try:
            return _BY_NAME[d.replace("flow.", "").replace("torch.", "")]
        except KeyError:
            raise TypeError(f"unknown dtype {d!r}") from None
    if d is float:
        return _default_dtype
    if d is int:
        return int64
    if d is _builtins.bool:
        return bool
    try:
        return NP_TO_DTYPE[np.dtype(d)]
    except (KeyError, TypeError):
        # torch.dtype objects print as "torch.float32"
        name = str(d)
        if name.startswith("torch."):
            return as_dtype(name)
        raise TypeError(f"unsupported dtype {d!r}") from None


_PROMOTE: dict = {}


def promote_types(a: dtype, b: dtype) -> dtype:
    """PyTorch's promotion lattice for two dtypes (``torch.promote_types``)."""
    key = (a, b)
    r = _PROMOTE.get(key)
    if r is not None:
        return r
    if a is b:
        r = a
    elif a.category != b.category:
        r = a if a.category > b.category else b
    elif a.category == _FLOAT:
        if {a, b} == {float16, bfloat16}:
            r = float32
        else:
            r = a if a._rank > b._rank else b
    elif a.category == _INT:
        if {a, b} == {uint8, int8}:
            r = int16
        elif a is uint8:
            r = b
        elif b is uint8:
            r = a
        else:
            r = a if a._rank > b._rank else b
    else:
        r = bool
    _PROMOTE[key] = r
    return r


_scalar_cache: dict = {}


def scalar_result_dtype(t: dtype, scalar_type: type) -> dtype:
    """Result dtype of ``tensor <op> python_scalar`` under PyTorch's rules.

    A scalar only changes the dtype when it is of a higher category
    (bool < int < float) than the tensor.
    """
    key = (t, scalar_type)
    r = _scalar_cache.get(key)
    if r is None:
        if scalar_type is _builtins.bool or issubclass(scalar_type, np.bool_):
            cat = _BOOL
        elif issubclass(scalar_type, (int, np.integer)):
            cat = _INT
        else:
            cat = _FLOAT
        if cat <= t.category:
            r = t
        else:
            r = _default_dtype if cat == _FLOAT else int64
        _scalar_cache[key] = r
    return r


def result_type(*operands) -> dtype:
    """PyTorch's ``result_type``: dimensioned tensors, then 0-d tensors, then scalars."""
    from flow._tensor import Tensor

    dims = [o.dtype for o in operands if isinstance(o, Tensor) and o.ndim > 0]
    zeros = [o.dtype for o in operands if isinstance(o, Tensor) and o.ndim == 0]
    scalars = [type(o) for o in operands if not isinstance(o, Tensor)]

    def fold(ds):
        r = None
        for d in ds:
            r = d if r is None else promote_types(r, d)
        return r

    r = fold(dims)
    z = fold(zeros)
    if r is None:
        r = z
    elif z is not None and z.category > r.category:
        r = z if z.category == _FLOAT and r.category != _FLOAT else promote_types(r, z)
    for s in scalars:
        if r is None:
            if s is _builtins.bool:
                r = bool
            elif issubclass(s, (int, np.integer)):
                r = int64
            else:
                r = _default_dtype
        else:
            r = scalar_result_dtype(r, s)
    return r if r is not None else _default_dtype
