"""The complex dtypes (``flow.complex64``, ``flow.complex128``) and :class:`ComplexArray`, the data
of a complex tensor: a pair of real flow tensors of one shape, dtype and device.

The complex dtypes are instances of :class:`complex_dtype`, a subclass of ``flow.dtype`` kept out of
``flow._dtype.ALL_DTYPES`` and ``NP_TO_DTYPE``: no kernel ever produces or accepts them, and the loops
over "every dtype" (tests, opcheck, the kernel caches) do not see them. They are interned, so
equality is identity, as for the other dtypes.
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D

_COMPLEX = 3  # a category above bool / int / float, so promote_types(float, complex) is complex


class complex_dtype(D.dtype):
    """A complex element type: ``flow.complex64`` (float32 parts) or ``flow.complex128`` (float64 parts)."""

    __slots__ = ()

    def __init__(self, name: str, np_dtype, real: D.dtype) -> None:
        super().__init__(name, np_dtype, _COMPLEX, 8 if real is D.float32 else 9)
        _REAL[self.name] = real

    @property
    def is_complex(self) -> bool:
        return True

    def to_real(self) -> D.dtype:
        """The dtype of the real and imaginary parts (``torch.complex64.to_real() == torch.float32``)."""
        return _REAL[self.name]

    def to_complex(self) -> "complex_dtype":
        return self

    def __reduce__(self):
        return (complex_dtype_named, (self.name,))


_REAL: dict = {}
complex64 = complex_dtype("complex64", np.complex64, D.float32)
complex128 = complex_dtype("complex128", np.complex128, D.float64)
cfloat = complex64
cdouble = complex128
_BY_NAME = {"complex64": complex64, "complex128": complex128, "cfloat": complex64, "cdouble": complex128}
_OF_REAL = {D.float32: complex64, D.float64: complex128}


def complex_dtype_named(name: str) -> complex_dtype:
    """``flow.complex64`` from ``"complex64"`` (also ``"cfloat"``, ``"torch.complex128"``)."""
    key = name.replace("flow.", "").replace("torch.", "")
    if key not in _BY_NAME:
        raise TypeError(f"unknown complex dtype {name!r}; expected complex64 or complex128")
    return _BY_NAME[key]


def complex_of(real: D.dtype, op: str) -> complex_dtype:
    """The complex dtype whose parts are ``real`` (float32 -> complex64, float64 -> complex128)."""
    c = _OF_REAL.get(real)
    if c is None:
        from flow.errors import OpTypeError

        raise OpTypeError(op, f"complex tensors have float32 or float64 parts, got {real}")
    return c


def default_complex() -> complex_dtype:
    """The dtype of complex tensors made from Python numbers: complex128 when the default dtype is
    float64, else complex64 (PyTorch's ``get_default_dtype`` pairing)."""
    return complex128 if D.get_default_dtype() is D.float64 else complex64


def as_complex_dtype(d, op: str) -> complex_dtype | None:
    """``d`` as a complex dtype (a flow complex dtype, a NumPy complex dtype, a name), or None when it is real."""
    if isinstance(d, complex_dtype):
        return d
    if isinstance(d, str):
        return complex_dtype_named(d) if "complex" in d or d.endswith(("cfloat", "cdouble")) else None
    if d is complex:
        return default_complex()
    if isinstance(d, D.dtype):
        return None
    try:
        npd = np.dtype(d)
    except TypeError:
        name = str(d)
        return complex_dtype_named(name) if "complex" in name else None
    if npd == np.complex64:
        return complex64
    if npd == np.complex128:
        return complex128
    if npd.kind == "c":
        from flow.errors import OpTypeError

        raise OpTypeError(op, f"unsupported complex dtype {npd}; flow has complex64 and complex128")
    return None


class ComplexArray:
    """The data of a :class:`~flow._complex.ComplexTensor`: the tensors ``re`` and ``im`` (real and
    imaginary parts, one shape, dtype and device). Autograd runs on the parts."""

    __slots__ = ("re", "im")

    def __init__(self, re, im) -> None:
        self.re = re
        self.im = im

    @property
    def shape(self) -> tuple:
        return tuple(self.re.shape)

    @property
    def ndim(self) -> int:
        return self.re.ndim

    @property
    def size(self) -> int:
        return self.re.numel()

    @property
    def dtype(self) -> complex_dtype:
        return _OF_REAL[self.re.dtype]

    @property
    def device(self):
        return self.re.device

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.dtype.np)
        out.real = np.asarray(self.re.detach().numpy_host())
        out.imag = np.asarray(self.im.detach().numpy_host())
        return out if dtype is None else out.astype(dtype)
