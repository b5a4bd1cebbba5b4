"""DLPack: zero-copy exchange of CPU tensors with NumPy, PyTorch and every other DLPack library.

``flow.from_dlpack(x)`` takes an object with ``__dlpack__`` / ``__dlpack_device__`` (a NumPy array,
a PyTorch tensor, ...) or a bare DLPack capsule and returns a flow tensor that shares its memory;
``Tensor.__dlpack__`` (and :func:`to_dlpack`, which returns the capsule) go the other way, so
``np.from_dlpack(t)`` and ``torch.from_dlpack(t)`` alias ``t``. A write on either side shows on the
other, as in PyTorch.

Flow's CPU tensors hold NumPy arrays, so NumPy's own ``ndarray.__dlpack__`` / ``np.from_dlpack``
build and read the capsules (its deleter keeps the array alive while the consumer holds it). The one
dtype NumPy cannot exchange is bfloat16 (an ml_dtypes dtype, unknown to NumPy's DLPack code): it
travels as a uint16 view whose DLPack type code is rewritten in the capsule (``kDLUInt`` <->
``kDLBfloat``; both are 16 bits, one lane), so bfloat16 is zero-copy too.

Refused, with :class:`DLPackError` (a ``BufferError``, the exception the protocol's consumers expect):
tensors that require grad (as PyTorch: detach first), complex tensors (flow keeps them as a pair of
real arrays, not the interleaved layout DLPack describes: use ``view_as_real``), global tensors and
other array kinds, symbolic tensors inside a graph, and data on a device other than the CPU.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from flow import _dtype as D
from flow.errors import FlowError

if TYPE_CHECKING:
    from flow._tensor import Tensor

__all__ = ["DLPackError", "from_dlpack", "to_dlpack"]

_KDL_CPU = 1  # DLDeviceType kDLCPU
_KDL_UINT = 1  # DLDataTypeCode kDLUInt
_KDL_BFLOAT = 4  # DLDataTypeCode kDLBfloat
_LEGACY = b"dltensor"  # capsule names of the DLPack spec (the consumer renames them "used_...")
_VERSIONED = b"dltensor_versioned"


class DLPackError(FlowError, BufferError):
    """A tensor that cannot be exchanged through DLPack; the message says why and what to do instead."""


# -- the C structs of dlpack.h, only as far as reading/patching the dtype needs -----------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):  # the legacy "dltensor" capsule
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):  # the DLPack >= 1.0 "dltensor_versioned" capsule
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _dl_tensor(capsule: Any) -> _DLTensor:
    """The DLTensor inside an unconsumed capsule (legacy or versioned)."""
    name = _api.PyCapsule_GetName(capsule)
    if name not in (_LEGACY, _VERSIONED) or not _api.PyCapsule_IsValid(capsule, name):
        raise DLPackError(
            f"from_dlpack: expected an unconsumed DLPack capsule ('dltensor' or 'dltensor_versioned'), got one "
            f"named {name.decode() if name else None!r} (a capsule can be imported only once)"
        )
    ptr = _api.PyCapsule_GetPointer(capsule, name)
    struct = _DLManagedTensorVersioned if name == _VERSIONED else _DLManagedTensor
    return struct.from_address(ptr).dl_tensor


# -- export -------------------------------------------------------------------------------------------------
def _exportable(t: Tensor) -> np.ndarray:
    """The NumPy array behind ``t``, or the reason it has none, as a DLPackError."""
    if t._requires_grad:
        # PyTorch's message and exception type: consumers would otherwise hold a tensor autograd never sees
        raise DLPackError("Can't export tensors that require gradient, use tensor.detach()")
    if getattr(t.dtype, "is_complex", False):
        raise DLPackError(
            f"__dlpack__: complex tensors ({t.dtype}) cannot be exported: flow stores them as separate real and "
            "imaginary arrays, not the interleaved layout DLPack describes; export flow.view_as_real(t) instead"
        )
    d = t._data
    if d.__class__ is np.ndarray:
        return d
    if getattr(d, "is_global", False) is True:
        raise DLPackError(
            "__dlpack__: global tensors cannot be exported (the data is spread over ranks); "
            "export the local shard, t.to_local()"
        )
    from flow.graph.symbolic import SymbolicArray

    if d.__class__ is SymbolicArray:
        raise DLPackError("__dlpack__: this tensor is symbolic (inside a graph being traced) and has no data yet")
    if t.device.type != "cpu":
        raise DLPackError(f"__dlpack__: only CPU tensors can be exported, this one is on {t.device}; use t.cpu()")
    raise DLPackError(f"__dlpack__: tensors holding a {type(d).__name__} (an array kind) cannot be exported")


def tensor_dlpack(t: Tensor, stream: Any = None, max_version=None, dl_device=None, copy: bool | None = None) -> Any:
    """``Tensor.__dlpack__``: a DLPack capsule of ``t`` (see the module docstring for what is refused)."""
    a = _exportable(t)
    if stream is not None and stream != -1:  # -1: PyTorch's "no stream", which CPU data needs anyway
        raise DLPackError(f"__dlpack__: stream must be None for CPU tensors, got {stream!r}")
    if dl_device is not None and tuple(dl_device) != (_KDL_CPU, 0):
        raise DLPackError(f"__dlpack__: can only export to the CPU device (1, 0), got dl_device={tuple(dl_device)}")
    kw = {}  # only what the caller gave, so that NumPy picks the capsule version the consumer asked for
    if max_version is not None:
        kw["max_version"] = max_version
    if copy is not None:
        kw["copy"] = copy
    if t.dtype is not D.bfloat16:
        return a.__dlpack__(**kw)
    capsule = a.view(np.uint16).__dlpack__(**kw)
    _dl_tensor(capsule).dtype.code = _KDL_BFLOAT
    return capsule


def tensor_dlpack_device(t: Tensor) -> tuple[int, int]:
    """``Tensor.__dlpack_device__``: ``(1, 0)`` (kDLCPU) for the tensors :func:`tensor_dlpack` exports."""
    d = t._data
    if d.__class__ is not np.ndarray and t.device.type != "cpu" and hasattr(d, "__dlpack_device__"):
        return tuple(d.__dlpack_device__())
    return (_KDL_CPU, 0)


def to_dlpack(tensor: Tensor) -> Any:
    """A DLPack capsule sharing ``tensor``'s memory (``torch.utils.dlpack.to_dlpack``)."""
    from flow._tensor import Tensor

    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_dlpack: expected a flow Tensor, got {type(tensor).__name__}")
    return tensor_dlpack(tensor)


# -- import -------------------------------------------------------------------------------------------------
class _Capsule:
    """Hands NumPy's ``from_dlpack`` a capsule we already hold (it only takes objects with ``__dlpack__``)."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDL_CPU, 0)


def _capsule_of(ext: Any) -> Any:
    if _is_capsule(ext):
        return ext
    if not hasattr(ext, "__dlpack__"):
        raise TypeError(
            f"from_dlpack: expected an object with __dlpack__ and __dlpack_device__ or a DLPack capsule, "
            f"got {type(ext).__name__}"
        )
    if hasattr(ext, "__dlpack_device__"):
        dev = tuple(ext.__dlpack_device__())
        if int(dev[0]) != _KDL_CPU:
            raise DLPackError(f"from_dlpack: only CPU data (device type 1) can be imported, got device {dev}")
    try:  # ask for a versioned capsule (it carries the read-only flag); older producers take no keywords
        return ext.__dlpack__(max_version=(1, 0))
    except TypeError:
        return ext.__dlpack__()


def from_dlpack(ext_tensor: Any) -> Tensor:
    """A CPU tensor sharing the memory of ``ext_tensor``: any object with ``__dlpack__`` and
    ``__dlpack_device__`` (a NumPy array, a PyTorch tensor, ...) or a DLPack capsule, as
    ``torch.from_dlpack``. Writes to either show in the other."""
    from flow._tensor import Tensor

    if isinstance(ext_tensor, Tensor):  # PyTorch returns the tensor itself for its own tensors
        return ext_tensor
    capsule = _capsule_of(ext_tensor)
    dl = _dl_tensor(capsule)
    if dl.device.device_type != _KDL_CPU:
        raise DLPackError(f"from_dlpack: only CPU data (device type 1) can be imported, got {dl.device.device_type}")
    code, bits, lanes = dl.dtype.code, dl.dtype.bits, dl.dtype.lanes
    bf16 = code == _KDL_BFLOAT
    if bf16:
        if (bits, lanes) != (16, 1):
            raise DLPackError(f"from_dlpack: unsupported bfloat type of {bits} bits x {lanes} lanes")
        dl.dtype.code = _KDL_UINT  # NumPy reads it as uint16; viewed back as ml_dtypes.bfloat16 below
    try:
        arr = np.from_dlpack(_Capsule(capsule))
    except BufferError as e:
        raise DLPackError(f"from_dlpack: {e}") from None
    if bf16:
        arr = arr.view(D.bfloat16.np)
    dt = D.NP_TO_DTYPE.get(arr.dtype)
    if dt is None:
        hint = " (flow keeps complex tensors as real pairs: import view_as_real(x))" if arr.dtype.kind == "c" else ""
        raise DLPackError(f"from_dlpack: unsupported dtype {arr.dtype}{hint}")
    # a read-only producer's memory stays shared (as torch.from_dlpack and flow.from_numpy do): in-place
    # ops on the tensor then fail with NumPy's "read-only" error instead of silently writing a copy
    from flow._device import CPU

    return Tensor._make(arr, dt, CPU)
