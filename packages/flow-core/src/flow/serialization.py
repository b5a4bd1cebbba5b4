"""``flow.save`` / ``flow.load``: checkpoints as one safetensors file, never pickle.

A checkpoint is a safetensors file: every tensor (and NumPy array, and generator state) is a
safetensors entry, and the structure around them — nested dicts / lists / tuples and plain
values (int, float incl. inf/nan, str, bool, None, flow dtypes and devices) — is JSON stored in
the safetensors metadata under ``"flow.structure"``. Loading therefore never executes code.

* Writes are atomic: the file is written to a temporary file in the target's directory,
  flushed and fsynced, moved over the target with ``os.replace`` and the directory is fsynced;
  a crash or kill during :func:`save` leaves the previous checkpoint intact.
* Each tensor's bytes carry a CRC-32 in the structure; a corrupt or truncated file raises
  :class:`CheckpointError` naming the file and what is wrong.
* Tensors are stored by value: the same tensor object appearing several times is stored once
  and loads as one object again, but views sharing storage with other tensors are stored as
  separate copies (storage sharing between distinct tensors is not preserved).
* :func:`load` of a plain safetensors file (e.g. written by ``safetensors.torch.save_file``)
  returns a flat ``{name: Tensor}`` dict.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections import Counter, OrderedDict

import ml_dtypes  # noqa: F401  - registers bfloat16 with NumPy before safetensors loads a file
import numpy as np
import safetensors
import safetensors.numpy

from flow import _dtype as D
from flow._device import CPU
from flow._device import device as _device
from flow._random import Generator
from flow._tensor import Tensor
from flow.errors import FlowError

__all__ = ["save", "load", "CheckpointError"]

STRUCTURE_KEY = "flow.structure"
FORMAT_VERSION = 1


class CheckpointError(FlowError):
    """A checkpoint could not be written or read (unsupported object, corrupt or truncated file)."""


# -- encoding -------------------------------------------------------------------------------------
class _Encoder:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self._by_id: dict[int, str] = {}
        self._keep: list = []  # keeps objects alive so ids stay unique while encoding

    def _name(self, path: str) -> str:
        base = path or "tensor"
        name, k = base, 1
        while name in self.arrays:
            name, k = f"{base}#{k}", k + 1
        return name

    def _store(self, obj, arr: np.ndarray, path: str) -> tuple[str, bool]:
        key = id(obj)
        if key in self._by_id:
            return self._by_id[key], False
        name = self._name(path)
        arr = _contiguous(arr)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        self.arrays[name] = arr
        self._by_id[key] = name
        self._keep.append(obj)
        return name, True

    def encode(self, obj, path: str):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"$f": repr(obj)}
        if isinstance(obj, Tensor):
            arr = obj.detach().numpy_host()
            name, new = self._store(obj, arr, path)
            node = {"$t": name}
            if new:
                node.update(dtype=obj.dtype.name, device=str(obj.device), crc=_crc(self.arrays[name]))
                if obj.requires_grad:
                    node["requires_grad"] = True
                if type(obj).__name__ == "Parameter":
                    node["parameter"] = True
            return node
        if isinstance(obj, np.ndarray):
            if obj.dtype.kind in "OSUVMm" or obj.dtype not in D.NP_TO_DTYPE:
                raise CheckpointError(f"flow.save: cannot save a NumPy array of dtype {obj.dtype} at {_where(path)}")
            name, new = self._store(obj, obj, path)
            return {"$nd": name, "crc": _crc(self.arrays[name])} if new else {"$nd": name}
        if isinstance(obj, np.generic):
            return self.encode(obj.item(), path)
        if isinstance(obj, Generator):
            state = obj.get_state().numpy_host()
            name, _ = self._store(obj, state, path)
            return {"$gen": name, "device": str(obj.device), "crc": _crc(self.arrays[name])}
        if isinstance(obj, D.dtype):
            return {"$dtype": obj.name}
        if isinstance(obj, _device):
            return {"$device": str(obj)}
        if isinstance(obj, dict):
            node = {"$d": [[self.encode(k, f"{path}[key]"), self.encode(v, _join(path, k))] for k, v in obj.items()]}
            if isinstance(obj, (Counter, OrderedDict)):
                node["type"] = type(obj).__name__
            return node
        if isinstance(obj, list):
            return [self.encode(v, _join(path, i)) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"$tu": [self.encode(v, _join(path, i)) for i, v in enumerate(obj)]}
        if isinstance(obj, (set, frozenset)):
            return {"$set": [self.encode(v, _join(path, i)) for i, v in enumerate(obj)]}
        raise CheckpointError(
            f"flow.save: cannot save an object of type {type(obj).__module__}.{type(obj).__qualname__} at "
            f"{_where(path)}; checkpoints hold tensors, NumPy arrays, generators and nested dicts / lists / tuples "
            "of int, float, str, bool and None (nothing is pickled)"
        )


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _where(path: str) -> str:
    return f"'{path}'" if path else "the top level"


def _contiguous(arr: np.ndarray) -> np.ndarray:
    """``arr`` as a C-contiguous array, keeping 0-d arrays 0-d (unlike ``np.ascontiguousarray``)."""
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


def _crc(arr: np.ndarray) -> int:
    return zlib.crc32(_contiguous(arr).reshape(-1).view(np.uint8).data)


# -- writing -----------------------------------------------------------------------------------------
def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _write_payload(path: str, arrays: dict, metadata: dict) -> None:
    """Write the safetensors file (a function of its own so tests can simulate a failure mid-write)."""
    safetensors.numpy.save_file(arrays, path, metadata=metadata)


def _fsync_path(path: str, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if directory:  # some platforms cannot open directories; the file itself was synced
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


def save(obj, f, *, metadata: dict | None = None) -> None:
    """Save ``obj`` (a state dict, or nested dicts / lists / tuples of tensors and plain values) to ``f``.

    ``f`` is a path (written atomically, see the module docstring) or a writable binary file
    object (written directly). ``metadata`` adds string entries to the safetensors header.
    """
    enc = _Encoder()
    structure = {"version": FORMAT_VERSION, "root": enc.encode(obj, "")}
    meta = {"format": "flow", STRUCTURE_KEY: json.dumps(structure, separators=(",", ":"), allow_nan=False)}
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str) or k in meta:
            raise CheckpointError(f"flow.save: metadata must map strings to strings (and not use '{k}')")
        meta[k] = v
    if hasattr(f, "write"):
        f.write(safetensors.numpy.save(enc.arrays, metadata=meta))
        return
    path = os.fspath(f)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CheckpointError(f"flow.save: the directory of '{path}' does not exist")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        _write_payload(tmp, enc.arrays, meta)
        os.chmod(tmp, 0o666 & ~_umask())
        _fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_path(directory, directory=True)


# -- reading -----------------------------------------------------------------------------------------
_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
              "U16": np.uint16, "U32": np.uint32, "U64": np.uint64}


def _read_path(path: str) -> tuple[dict, dict]:
    from safetensors import safe_open

    with safe_open(path, framework="np") as sf:
        meta = sf.metadata() or {}
        arrays = {k: sf.get_tensor(k) for k in sf.keys()}
    return meta, arrays


def _read_bytes(data: bytes) -> tuple[dict, dict]:
    if len(data) < 8:
        raise ValueError("header too small")
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise ValueError("invalid header length")
    meta = json.loads(data[8:8 + n].decode("utf-8")).get("__metadata__") or {}
    arrays = {}
    for name, info in safetensors.deserialize(data):
        dt = _ST_DTYPES.get(info["dtype"])
        if dt is None:
            raise ValueError(f"unsupported dtype {info['dtype']} of tensor '{name}'")
        arrays[name] = np.frombuffer(bytearray(info["data"]), dtype=dt).reshape(info["shape"])
    return meta, arrays


def load(f, map_location=None, *, verify: bool = True, weights_only: bool | None = None):
    """Load what :func:`save` wrote (or a plain safetensors file, as a flat ``{name: Tensor}`` dict).

    ``map_location``: ``None`` puts tensors back on the device they were saved from; a device
    (or its name) puts all of them there; a dict maps saved device names to devices; a callable
    ``fn(tensor, saved_device_name)`` returns the tensor to use. ``verify`` checks each tensor's
    CRC-32. ``weights_only`` is accepted for PyTorch compatibility: loading never runs code anyway.
    """
    name = getattr(f, "name", None) if hasattr(f, "read") else os.fspath(f)
    try:
        if hasattr(f, "read"):
            meta, arrays = _read_bytes(f.read())
        else:
            if os.path.isdir(name):
                raise IsADirectoryError(f"flow.load: '{name}' is a directory")
            if not os.path.exists(name):
                raise FileNotFoundError(f"flow.load: no such file: '{name}'")
            if os.path.getsize(name) == 0:
                raise CheckpointError(f"flow.load: '{name}' is empty (an interrupted write?)")
            meta, arrays = _read_path(name)
    except (OSError, CheckpointError):
        raise
    except Exception as e:
        raise CheckpointError(f"flow.load: '{name}' is not a valid checkpoint (corrupt or truncated "
                              f"safetensors file): {e}") from None
    dec = _Decoder(arrays, name, map_location, verify)
    text = meta.get(STRUCTURE_KEY)
    if text is None:  # a plain safetensors file
        return {k: dec.tensor(k, None, None, None) for k in arrays}
    try:
        structure = json.loads(text)
        root = structure["root"]
        version = structure.get("version", 1)
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"flow.load: '{name}' has a corrupt structure header: {e}") from None
    if version > FORMAT_VERSION:
        raise CheckpointError(f"flow.load: '{name}' uses checkpoint format {version}, newer than this flow "
                              f"({FORMAT_VERSION}); upgrade flow")
    try:
        return dec.decode(root)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise CheckpointError(f"flow.load: '{name}' has a corrupt structure header ({type(e).__name__}: {e})") \
            from None


class _Decoder:
    def __init__(self, arrays: dict, name, map_location, verify: bool) -> None:
        self.arrays, self.name, self.map_location, self.verify = arrays, name, map_location, verify
        self.objs: dict[str, object] = {}

    def array(self, key: str, crc) -> np.ndarray:
        if key not in self.arrays:
            raise CheckpointError(f"flow.load: '{self.name}' is corrupt: the structure names a tensor '{key}' "
                                  "that the file does not hold")
        arr = self.arrays[key]
        if self.verify and crc is not None and _crc(arr) != crc:
            raise CheckpointError(f"flow.load: '{self.name}' is corrupt: the data of tensor '{key}' does not match "
                                  "its checksum")
        if not arr.flags.writeable:
            arr = arr.copy()
        return arr

    def _device(self, saved: str):
        ml = self.map_location
        if ml is None:
            return saved
        if isinstance(ml, dict):
            return ml.get(saved, saved)
        return str(ml)

    def tensor(self, key: str, dtype, saved_device, crc) -> Tensor:
        if key in self.objs:
            return self.objs[key]
        arr = self.array(key, crc)
        try:
            dt = D.NP_TO_DTYPE[arr.dtype]
        except KeyError:
            raise CheckpointError(f"flow.load: '{self.name}': tensor '{key}' has dtype {arr.dtype}, "
                                  "which flow does not support") from None
        if dtype is not None and dtype != dt.name:
            raise CheckpointError(f"flow.load: '{self.name}' is corrupt: tensor '{key}' is {dt.name} in the data "
                                  f"but {dtype} in the structure")
        t = Tensor._make(arr, dt, CPU)
        saved = saved_device or "cpu"
        if callable(self.map_location) and not isinstance(self.map_location, (str, _device)):
            t = self.map_location(t, saved)
        else:
            target = _device(self._device(saved))
            if target is not CPU:
                try:
                    t = t.to(target)
                except Exception as e:
                    raise CheckpointError(f"flow.load: '{self.name}': cannot put tensor '{key}' on {target} "
                                          f"({e}); pass map_location='cpu'") from None
        self.objs[key] = t
        return t

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict):
            raise CheckpointError(f"flow.load: '{self.name}' has a corrupt structure header (unexpected {node!r})")
        if "$t" in node:
            if ("param", node["$t"]) in self.objs:  # a Parameter seen before
                return self.objs[("param", node["$t"])]
            t = self.tensor(node["$t"], node.get("dtype"), node.get("device"), node.get("crc"))
            if node.get("parameter"):
                t = self._parameter(node["$t"], t, node.get("requires_grad", True))
            elif node.get("requires_grad") and not t.requires_grad:
                t.requires_grad = True
            return t
        if "$nd" in node:
            return self.array(node["$nd"], node.get("crc"))
        if "$gen" in node:
            g = Generator(node.get("device", "cpu"))
            g.set_state(self.array(node["$gen"], node.get("crc")))
            return g
        if "$f" in node:
            return float(node["$f"])
        if "$tu" in node:
            return tuple(self.decode(v) for v in node["$tu"])
        if "$set" in node:
            return set(self.decode(v) for v in node["$set"])
        if "$dtype" in node:
            return D.as_dtype(node["$dtype"])
        if "$device" in node:
            return _device(node["$device"])
        if "$d" in node:
            items = [(self.decode(k), self.decode(v)) for k, v in node["$d"]]
            kind = node.get("type")
            if kind == "Counter":
                return Counter(dict(items))
            return OrderedDict(items) if kind == "OrderedDict" else dict(items)
        raise CheckpointError(f"flow.load: '{self.name}' has a corrupt structure header (unknown node {node!r})")

    def _parameter(self, key: str, t: Tensor, requires_grad: bool):
        cache = ("param", key)
        if cache not in self.objs:
            try:
                from flow.nn.parameter import Parameter
            except ImportError:
                t.requires_grad = bool(requires_grad)
                self.objs[cache] = t
            else:
                self.objs[cache] = Parameter(t, requires_grad=bool(requires_grad))
        return self.objs[cache]
