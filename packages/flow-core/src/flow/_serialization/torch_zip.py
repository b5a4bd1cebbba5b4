"""Reading PyTorch's ``torch.save`` checkpoints (its zip format) without torch and without running code.

The archive holds ``<name>/data.pkl`` (a pickle of the saved object, protocol 2), one entry
``<name>/data/<key>`` of raw bytes per storage, and ``<name>/byteorder`` (absent in old files,
which are little-endian). The pickle names its storages by persistent ids
``("storage", StorageType, key, location, numel)`` and rebuilds tensors with
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)``.

It is read the way ``torch.load(weights_only=True)`` reads it: the unpickler resolves only a fixed
set of names (the tensor and parameter rebuilders, storage types, dtypes, ``torch.Size``,
``torch.device``, ``collections.OrderedDict``, sets and bytes) plus what
:func:`flow.serialization.add_safe_globals` allow-lists, and refuses every other name before it is
imported, so a file cannot run code. Tensors are rebuilt from their storage with their offset and
strides; tensors that were views of one storage load as separate tensors with the right values.
"""

from __future__ import annotations

import _compat_pickle
import io
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from flow import _dtype as D
from flow._device import device as _device
from flow._serialization import safe_globals as _safe
from flow._serialization.container import clean_bool
from flow._serialization.errors import CheckpointError
from flow._tensor import Size, Tensor
from flow.errors import FlowError

__all__ = ["ZIP_MAGIC", "load"]

ZIP_MAGIC = b"PK\x03\x04"
_MAX_PICKLE = 1 << 31  # data.pkl holds structure, not tensor data: a bigger one is corrupt (or a zip bomb)

# torch's legacy typed-storage classes (what torch.save still names) -> flow dtype names
_STORAGES = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "CharStorage": "int8",
    "ShortStorage": "int16",
    "IntStorage": "int32",
    "LongStorage": "int64",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
# torch dtype attributes (pickled as the global ``torch.<name>``) -> flow dtype names
_DTYPES = {
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "int16": "int16",
    "short": "int16",
    "int32": "int32",
    "int": "int32",
    "int64": "int64",
    "long": "int64",
    "uint8": "uint8",
    "bool": "bool",
}
# torch dtypes / storages flow has no counterpart for: named in the error when a tensor uses one
_UNSUPPORTED = {
    "uint16", "uint32", "uint64", "complex32", "complex64", "complex128", "chalf", "cfloat", "cdouble",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2",
}  # fmt: skip
_UNSUPPORTED_STORAGES = {
    "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128", "QInt8Storage": "qint8",
    "QUInt8Storage": "quint8", "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
}  # fmt: skip


class _StorageType(NamedTuple):
    dtype: D.dtype | None  # None: torch.UntypedStorage (bytes; the tensor names its dtype)


class _Unsupported(NamedTuple):
    name: str  # e.g. "torch.complex64"


class _Storage(NamedTuple):
    raw: np.ndarray  # the storage's bytes, as uint8
    dtype: D.dtype | None
    key: str
    location: str


class _Marker(NamedTuple):
    name: str  # torch.Tensor / torch.nn.Parameter, as the tensor type _rebuild_from_type_v2 names


_TENSOR, _PARAMETER = _Marker("torch.Tensor"), _Marker("torch.nn.Parameter")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _encode_bytes(text, encoding: str = "latin1") -> bytes:
    # protocol 2 writes a bytes object as _codecs.encode(str, "latin1"); nothing else is allowed
    if not isinstance(text, str) or encoding != "latin1":
        raise CheckpointError(f"_codecs.encode is allowed only as (str, 'latin1') for bytes, got {text!r:.40}")
    return text.encode("latin1")


def _size(dims=()) -> Size:
    dims = tuple(dims)
    if not all(_is_int(d) and d >= 0 for d in dims):
        raise CheckpointError(f"torch.Size holds non-negative ints, got {dims!r:.80}")
    return Size(dims)


def _make_device(*args):
    try:
        return _device(*args)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"bad torch.device{args!r:.60} ({e})") from None


def _unsupported(file: str, what: str) -> CheckpointError:
    return CheckpointError(
        f"flow.load: '{file}' holds a tensor of {what}, which flow does not support (its dtypes: "
        f"{', '.join(d.name for d in D.ALL_DTYPES)})"
    )


_PLAIN = {
    "collections.OrderedDict": OrderedDict,
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "builtins.complex": complex,
    "builtins.slice": slice,
    "_codecs.encode": _encode_bytes,
    "torch.Size": _size,
    "torch.device": _make_device,
    "torch.Tensor": _TENSOR,
    "torch._tensor.Tensor": _TENSOR,
    "torch.nn.parameter.Parameter": _PARAMETER,
    "torch.nn.Parameter": _PARAMETER,
}


class _Archive:
    """The zip's entries: finds the record prefix, reads storages once each."""

    def __init__(self, zf: zipfile.ZipFile, name: str) -> None:
        self.zf, self.name = zf, name
        pickles = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if not pickles:
            names = zf.namelist()
            extra = " (TorchScript archives from torch.jit.save are not read)" if "constants.pkl" in str(names) else ""
            raise CheckpointError(
                f"flow.load: '{name}' is a zip archive but not a torch.save checkpoint: it has no "
                f"'<name>/data.pkl' record{extra}"
            )
        self.prefix = pickles[0][: -len("data.pkl")]
        if self.prefix + "constants.pkl" in zf.namelist():
            raise CheckpointError(
                f"flow.load: '{name}' is a TorchScript archive (torch.jit.save); flow.load reads torch.save "
                "checkpoints: save the model's state_dict() with torch.save instead"
            )
        order = self.read("byteorder", 16).decode("ascii", "replace") if self.has("byteorder") else "little"
        if order not in ("little", "big"):
            raise self.corrupt(f"its byteorder record says {order!r:.20}, expected 'little' or 'big'")
        self.big = order == "big"
        self.storages: dict[str, _Storage] = {}

    def corrupt(self, what: str) -> CheckpointError:
        return CheckpointError(f"flow.load: '{self.name}' is a corrupt PyTorch checkpoint: {what}")

    def has(self, record: str) -> bool:
        try:
            self.zf.getinfo(self.prefix + record)
        except KeyError:
            return False
        return True

    def read(self, record: str, limit: int, size: int | None = None) -> bytes:
        try:
            info = self.zf.getinfo(self.prefix + record)
        except KeyError:
            raise self.corrupt(f"the record '{self.prefix + record}' is missing") from None
        if info.file_size > limit or (size is not None and info.file_size != size):
            want = f"{size}" if size is not None else f"at most {limit}"
            raise self.corrupt(f"the record '{info.filename}' holds {info.file_size} bytes, expected {want}")
        try:
            return self.zf.read(info)  # checks the entry's CRC-32
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as e:
            raise self.corrupt(f"the record '{info.filename}' cannot be read ({e})") from None

    def storage(self, key: str, dtype: D.dtype | None, numel: int, location: str) -> _Storage:
        if key in self.storages:
            return self.storages[key]
        nbytes = numel * (1 if dtype is None else np.dtype(dtype.np).itemsize)
        raw = np.frombuffer(self.read(f"data/{key}", nbytes, nbytes), np.uint8)
        self.storages[key] = s = _Storage(raw, dtype, key, location)
        return s

    def typed(self, s: _Storage, dt: D.dtype) -> np.ndarray:
        """The storage's bytes as a 1-D array of ``dt`` in native byte order."""
        size = np.dtype(dt.np).itemsize
        if s.raw.size % size:
            raise self.corrupt(f"storage '{s.key}' holds {s.raw.size} bytes, not a whole number of {dt.name}")
        raw = s.raw
        if self.big and size > 1:
            raw = raw.view(np.dtype(f">u{size}")).astype(np.dtype(f"<u{size}")).view(np.uint8)
        return raw.view(dt.np)


class _Unpickler(pickle._Unpickler):
    """A pickle reader that resolves only allowed names (see the module docstring).

    The pure-Python unpickler is used because its opcode table can be changed: BUILD (set an
    object's state) is allowed only on OrderedDicts (state dicts carry ``_metadata``) and on
    instances of allow-listed classes, so a file cannot change attributes of flow's dtype or
    device objects. ``data.pkl`` holds only the structure, so its speed does not matter.
    """

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, data: bytes, archive: _Archive, place) -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self.archive, self.place = archive, place
        self.rebuilders = {
            "torch._utils._rebuild_tensor_v2": self._rebuild_v2,
            "torch._utils._rebuild_tensor_v3": self._rebuild_v3,
            "torch._utils._rebuild_parameter": self._rebuild_parameter,
            "torch._utils._rebuild_parameter_with_state": self._rebuild_parameter_with_state,
            "torch._tensor._rebuild_from_type_v2": self._rebuild_from_type_v2,
        }

    def refuse(self, full: str) -> CheckpointError:
        hint = ""
        if full.startswith("torch.nn.modules.") or full.startswith("torch.optim."):
            hint = " (the file holds a whole torch object: save its state_dict() with torch.save instead)"
        elif full.startswith("torch."):
            hint = " (a torch object flow cannot rebuild)"
        return CheckpointError(
            f"flow.load: '{self.archive.name}' refers to the global '{full}', which is not allowed{hint}: "
            "PyTorch checkpoints are read like torch.load(weights_only=True) and only tensors, plain "
            "containers and allow-listed globals load; if you trust the file and this is a plain-data "
            f"class, allow it with flow.serialization.add_safe_globals([{full}])"
        )

    def find_class(self, module: str, name: str):
        if self.proto < 3:  # protocol 2 (torch's) writes Python 2 names: __builtin__.set
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        full = f"{module}.{name}"
        if full in self.rebuilders:
            return self.rebuilders[full]
        if full in _PLAIN:
            return _PLAIN[full]
        if module in ("torch", "torch.storage", "torch.cuda"):
            if name in _STORAGES and module != "torch.cuda":
                return _StorageType(D.as_dtype(_STORAGES[name]))
            if name in ("UntypedStorage", "_UntypedStorage"):
                return _StorageType(None)
            if module == "torch" and name in _DTYPES:
                return D.as_dtype(_DTYPES[name])
            if name in _UNSUPPORTED:
                return _Unsupported(full)
            if name in _UNSUPPORTED_STORAGES:
                return _Unsupported(f"torch.{_UNSUPPORTED_STORAGES[name]} (a {name})")
        obj = _safe.lookup(full)
        if obj is not None:
            return obj
        raise self.refuse(full)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise self.archive.corrupt(f"unknown persistent id {pid!r:.100}")
        _, stype, key, location, numel = pid
        if isinstance(stype, _Unsupported):
            raise _unsupported(self.archive.name, stype.name)
        if not isinstance(stype, _StorageType) or not isinstance(key, str) or not isinstance(location, str):
            raise self.archive.corrupt(f"bad storage reference {pid!r:.100}")
        if not _is_int(numel) or numel < 0:
            raise self.archive.corrupt(f"storage '{key}' has a bad size {numel!r:.40}")
        return self.archive.storage(key, stype.dtype, numel, location)

    def _load_build(self) -> None:
        state = self.stack[-1]
        inst = self.stack[-2]
        if type(inst) is OrderedDict:
            self.stack.pop()
            if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
                raise self.archive.corrupt(f"an OrderedDict's state should be a dict of attributes, got {state!r:.80}")
            inst.__dict__.update(state)  # e.g. a state dict's _metadata
            return
        if _safe.is_allowed(type(inst)):
            pickle._Unpickler.load_build(self)
            return
        raise CheckpointError(
            f"flow.load: '{self.archive.name}' sets the state of a {type(inst).__module__}.{type(inst).__qualname__} "
            "object, which is not allowed (allow-list its class with flow.serialization.add_safe_globals)"
        )

    dispatch[pickle.BUILD[0]] = _load_build

    # -- tensors ---------------------------------------------------------------------------------------
    def _tensor(self, storage, dt, offset, size, stride, requires_grad) -> Tensor:
        arch = self.archive
        if not isinstance(storage, _Storage):
            raise arch.corrupt(f"a tensor's storage is {type(storage).__name__}, not a storage")
        if isinstance(dt, _Unsupported):
            raise _unsupported(arch.name, dt.name)
        if not isinstance(dt, D.dtype):
            raise arch.corrupt(f"a tensor's dtype is {dt!r:.60}")
        size, stride = tuple(size), tuple(stride)
        ok = all(_is_int(v) and v >= 0 for v in size + stride) and len(size) == len(stride)
        if not ok or not _is_int(offset) or offset < 0 or not isinstance(requires_grad, bool):
            raise arch.corrupt(
                f"a tensor on storage '{storage.key}' has bad geometry (offset {offset!r:.20}, size {size!r:.60}, "
                f"stride {stride!r:.60}, requires_grad {requires_grad!r:.10})"
            )
        flat = arch.typed(storage, dt)
        if 0 in size:
            arr = np.empty(size, dt.np)
        else:
            last = offset + sum((n - 1) * s for n, s in zip(size, stride))
            if last >= flat.size:
                raise arch.corrupt(
                    f"a tensor of size {list(size)} (offset {offset}, stride {list(stride)}) reaches element "
                    f"{last} of storage '{storage.key}', which holds {flat.size}"
                )
            item = flat.itemsize
            view = np.lib.stride_tricks.as_strided(flat[offset:], size, [s * item for s in stride], writeable=False)
            arr = np.array(view, order="C")  # its own memory: see the module docstring on shared storages
        t = self.place(Tensor._make(clean_bool(arr), dt, _device("cpu")), f"data/{storage.key}", storage.location)
        if requires_grad and dt.is_floating_point:
            t.requires_grad = True
        return t

    def _rebuild_v2(self, storage, offset, size, stride, requires_grad, hooks=None, metadata=None) -> Tensor:
        dt = storage.dtype if isinstance(storage, _Storage) else None
        return self._tensor(storage, D.uint8 if dt is None else dt, offset, size, stride, requires_grad)

    def _rebuild_v3(self, storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None) -> Tensor:
        return self._tensor(storage, dtype, offset, size, stride, requires_grad)

    def _parameter(self, data, requires_grad):
        from flow.nn.parameter import Parameter

        if not isinstance(data, Tensor) or not isinstance(requires_grad, bool):
            raise self.archive.corrupt(f"a Parameter's data is {type(data).__name__}, not a tensor")
        if requires_grad and not data.dtype.is_floating_point:
            raise self.archive.corrupt(f"a Parameter of dtype {data.dtype.name} requires grad")
        return Parameter(data.detach(), requires_grad=requires_grad)

    def _rebuild_parameter(self, data, requires_grad, hooks=None):
        return self._parameter(data, requires_grad)

    def _rebuild_parameter_with_state(self, data, requires_grad, hooks, state):
        self._no_state(state, "torch.nn.Parameter")
        return self._parameter(data, requires_grad)

    def _rebuild_from_type_v2(self, func, new_type, args, state):
        if func not in (self._rebuild_v2, self._rebuild_v3) or not isinstance(args, tuple):
            raise self.archive.corrupt(f"_rebuild_from_type_v2 with an unexpected rebuilder {func!r:.60}")
        t = func(*args)
        if new_type not in (_TENSOR, _PARAMETER):
            raise self.archive.corrupt(f"_rebuild_from_type_v2 of the type {new_type!r:.60}")
        self._no_state(state, new_type.name)
        return self._parameter(t, t.requires_grad) if new_type is _PARAMETER else t

    def _no_state(self, state, what: str) -> None:
        # a tensor with Python attributes set on it: flow tensors have no place for them
        empty = state is None or state == {} or (isinstance(state, tuple) and all(s in (None, {}) for s in state))
        if not empty:
            names = sorted(state) if isinstance(state, dict) else state
            raise CheckpointError(
                f"flow.load: '{self.archive.name}' holds a {what} with Python attributes {names!r:.80}, "
                "which flow tensors cannot carry"
            )


def load(reader, name: str, place):
    """The object a ``torch.save`` zip checkpoint in ``reader`` (a seekable binary file) holds."""
    try:
        zf = zipfile.ZipFile(reader)
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, struct.error) as e:
        raise CheckpointError(
            f"flow.load: '{name}' is a zip archive (PyTorch's torch.save format) that is truncated or corrupt ({e})"
        ) from None
    with zf:
        archive = _Archive(zf, name)
        data = archive.read("data.pkl", _MAX_PICKLE)
        try:
            return _Unpickler(data, archive, place).load()
        except FlowError:
            raise
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise archive.corrupt(f"its data.pkl cannot be read ({type(e).__name__}: {e})") from None
        except (struct.error, RecursionError, UnicodeDecodeError) as e:
            raise archive.corrupt(f"its data.pkl cannot be read ({type(e).__name__}: {e})") from None
