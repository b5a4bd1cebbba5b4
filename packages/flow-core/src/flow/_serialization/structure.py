"""The structure of a checkpoint: nested Python values as JSON, with tensors referenced by name.

Nodes: JSON scalars stand for themselves, a JSON list is a Python list, and an object with one
``$`` key is anything else: ``{"$t": name, dtype, device, crc, requires_grad?, parameter?}`` a
tensor, ``{"$nd": name, crc}`` a NumPy array, ``{"$gen": name, device, crc}`` a generator,
``{"$f": "inf"}`` a non-finite float, ``{"$tu": [...]}`` a tuple, ``{"$set": [...]}`` a set,
``{"$d": [[key, value], ...], type?}`` a dict (``Counter`` / ``OrderedDict`` by ``type``),
``{"$dtype": name}`` and ``{"$device": name}``. A tensor saved twice is written once; later
references carry only its name. The decoder accepts exactly these shapes of node and nothing else,
so a damaged structure in a file without a header checksum is reported, not guessed at.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict

import numpy as np

from flow import _dtype as D
from flow._device import device as _device
from flow._random import Generator
from flow._serialization.container import clean_bool, crc
from flow._serialization.errors import CheckpointError
from flow._tensor import Tensor

__all__ = ["MAX_DEPTH", "Encoder", "Decoder"]

# Real checkpoints nest a handful of levels (state -> optimizer -> state -> index -> tensor). The
# limit keeps encoding, JSON and decoding well inside Python's recursion limit (each level is up to
# three JSON levels and two Python frames), so a deep structure gets this error, not a RecursionError.
MAX_DEPTH = 100


def _where(path: str) -> str:
    if not path:
        return "the top level"
    return f"'{path}'" if len(path) <= 120 else f"'{path[:50]}...{path[-50:]}'"


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


class Encoder:
    """Turns a value into its structure; the arrays to write collect in :attr:`arrays`."""

    def __init__(self, global_ok: bool = False) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.global_ok = global_ok  # global tensors allowed: gathered to their logical values
        self._by_id: dict[int, str] = {}
        self._keep: list = []  # keeps objects alive so ids stay unique while encoding
        self._open: set[int] = set()  # containers being encoded, to find reference cycles

    def _name(self, path: str) -> str:
        base = path or "tensor"
        name, k = base, 1
        while name in self.arrays or name == "__metadata__":
            name, k = f"{base}#{k}", k + 1
        return name

    def _store(self, obj, arr: np.ndarray, path: str) -> tuple[str, bool]:
        key = id(obj)
        if key in self._by_id:
            return self._by_id[key], False
        name = self._name(path)
        self.arrays[name] = arr if arr.flags.c_contiguous else np.array(arr, order="C")
        self._by_id[key] = name
        self._keep.append(obj)
        return name, True

    def encode(self, obj, path: str = "", depth: int = 0):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj) if math.isfinite(obj) else {"$f": repr(float(obj))}
        if isinstance(obj, Tensor):
            return self._tensor(obj, path)
        if isinstance(obj, np.ndarray):
            arr = obj if obj.dtype.isnative else obj.astype(obj.dtype.newbyteorder("="))
            if arr.dtype not in D.NP_TO_DTYPE:
                raise CheckpointError(f"flow.save: cannot save a NumPy array of dtype {obj.dtype} at {_where(path)}")
            name, new = self._store(obj, arr, path)
            return {"$nd": name, "crc": crc(self.arrays[name])} if new else {"$nd": name}
        if isinstance(obj, np.generic):
            return self.encode(obj.item(), path, depth)
        if isinstance(obj, Generator):
            name, new = self._store(obj, obj.get_state().numpy_host(), path)
            node = {"$gen": name, "device": str(obj.device)}
            return {**node, "crc": crc(self.arrays[name])} if new else node
        if isinstance(obj, D.dtype):
            return {"$dtype": obj.name}
        if isinstance(obj, _device):
            return {"$device": str(obj)}
        if isinstance(obj, (dict, list, tuple, set, frozenset)):
            return self._container(obj, path, depth)
        raise CheckpointError(
            f"flow.save: cannot save an object of type {type(obj).__module__}.{type(obj).__qualname__} at "
            f"{_where(path)}; checkpoints hold tensors, NumPy arrays, generators and nested dicts / lists / tuples "
            "of int, float, str, bool and None (nothing is pickled)"
        )

    def _tensor(self, t: Tensor, path: str) -> dict:
        if t._data.__class__ is not np.ndarray and t.is_global and not self.global_ok:
            raise CheckpointError(
                f"flow.save: {_where(path)} is a global tensor; pass global_dst_rank= (the rank that writes "
                "the file) so that every rank gathers it to its logical value"
            )
        # a global tensor's host value is its logical value (gathered: every rank of its placement saves)
        name, new = self._store(t, t.detach().numpy_host(), path)
        node = {"$t": name}
        if new:
            node.update(dtype=t.dtype.name, device=str(t.device), crc=crc(self.arrays[name]))
            if t.requires_grad:
                node["requires_grad"] = True
            if type(t).__name__ == "Parameter":
                node["parameter"] = True
        return node

    def _container(self, obj, path: str, depth: int):
        if depth >= MAX_DEPTH:
            raise CheckpointError(
                f"flow.save: {_where(path)} is nested more than {MAX_DEPTH} dicts / lists / tuples / "
                f"sets deep; checkpoints may nest at most {MAX_DEPTH} levels"
            )
        if id(obj) in self._open:
            raise CheckpointError(
                f"flow.save: {_where(path)} contains itself (a reference cycle); a checkpoint holds a tree of values"
            )
        self._open.add(id(obj))
        try:
            d = depth + 1
            if isinstance(obj, dict):
                node = {
                    "$d": [
                        [self.encode(k, f"{path}[key]", d), self.encode(v, _join(path, k), d)] for k, v in obj.items()
                    ]
                }
                if isinstance(obj, (Counter, OrderedDict)):
                    node["type"] = type(obj).__name__
                return node
            items = [self.encode(v, _join(path, i), d) for i, v in enumerate(obj)]
            if isinstance(obj, list):
                return items
            return {"$tu": items} if isinstance(obj, tuple) else {"$set": items}
        finally:
            self._open.discard(id(obj))


# node kind -> the other keys it may have
_NODES = {
    "$t": {"dtype", "device", "crc", "requires_grad", "parameter"},
    "$nd": {"crc"},
    "$gen": {"device", "crc"},
    "$f": set(),
    "$tu": set(),
    "$set": set(),
    "$dtype": set(),
    "$device": set(),
    "$d": {"type"},
}
_FIELD_TYPES = {
    "$t": str,
    "$nd": str,
    "$gen": str,
    "$f": str,
    "$tu": list,
    "$set": list,
    "$dtype": str,
    "$device": str,
    "$d": list,
    "dtype": str,
    "device": str,
    "crc": int,
    "requires_grad": bool,
    "parameter": bool,
    "type": str,
}
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class Decoder:
    """Rebuilds the value from a structure and the file's arrays.

    ``place(tensor, key, saved_device)`` puts a loaded (CPU) tensor where ``map_location`` says.
    """

    def __init__(self, arrays: dict, name: str, place, verify: bool) -> None:
        self.arrays, self.name, self.place, self.verify = arrays, name, place, verify
        self.objs: dict = {}

    def corrupt(self, what: str) -> CheckpointError:
        return CheckpointError(f"flow.load: '{self.name}' has a corrupt structure: {what}")

    def array(self, key: str, expected) -> np.ndarray:
        if key not in self.arrays:
            raise self.corrupt(f"it names a tensor '{key}' that the file does not hold")
        arr = self.arrays[key]
        if self.verify and expected is not None and crc(arr) != expected:
            raise CheckpointError(
                f"flow.load: '{self.name}' is corrupt: the data of tensor '{key}' does not match "
                "its checksum; pass verify=False to load it anyway"
            )
        return clean_bool(arr)

    def tensor(self, key: str, dtype, saved_device, expected) -> Tensor:
        if key in self.objs:
            return self.objs[key]
        arr = self.array(key, expected)
        dt = D.NP_TO_DTYPE.get(arr.dtype)
        if dt is None:
            raise CheckpointError(
                f"flow.load: '{self.name}': tensor '{key}' has dtype {arr.dtype}, which flow does not support"
            )
        if dtype is not None and dtype != dt.name:
            raise self.corrupt(f"tensor '{key}' is {dt.name} in the data but {dtype} in the structure")
        t = self.place(Tensor._make(arr, dt, _device("cpu")), key, saved_device or "cpu")
        self.objs[key] = t
        return t

    def _node(self, node: dict) -> str:
        kind = next(iter(node), None)  # the encoder writes the kind first
        if kind not in _NODES or sum(k in _NODES for k in node) != 1:
            raise self.corrupt(f"unknown node {node!r:.200}")
        allowed = _NODES[kind]
        for k, v in node.items():
            if k != kind and k not in allowed:
                raise self.corrupt(f"a '{kind}' node has an unknown field '{k}'")
            t = _FIELD_TYPES[k]
            if type(v) is not t:  # exact: a bool is no int here, and JSON gives no subclasses
                raise self.corrupt(f"field '{k}' of a '{kind}' node should be {t.__name__}, got {v!r:.100}")
        return kind

    def decode(self, node, depth: int = 0):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if depth > 3 * MAX_DEPTH:  # the encoder's limit, counted in JSON levels (a dict is three)
            raise self.corrupt(f"it is nested deeper than a checkpoint may be ({MAX_DEPTH} levels)")
        if isinstance(node, list):
            return [self.decode(v, depth + 1) for v in node]
        if not isinstance(node, dict):
            raise self.corrupt(f"unexpected {node!r:.200}")
        kind = self._node(node)
        value = node[kind]
        if kind == "$t":
            return self._tensor_node(node)
        if kind == "$nd":
            return self.array(value, node.get("crc"))
        if kind == "$gen":
            return self._generator(value, node.get("device", "cpu"), node.get("crc"))
        if kind == "$f":
            if value not in _NONFINITE:
                raise self.corrupt(f"'{value:.40}' is not a non-finite float")
            return _NONFINITE[value]
        if kind in ("$tu", "$set"):
            items = [self.decode(v, depth + 2) for v in value]
            return tuple(items) if kind == "$tu" else self._hashable(set, items)
        if kind == "$dtype":
            return self._dtype(value)
        if kind == "$device":
            try:
                return _device(value)
            except (TypeError, ValueError) as e:
                raise self.corrupt(f"bad device {value!r:.40} ({e})") from None
        return self._dict(node, value, depth)

    def _dict(self, node: dict, pairs: list, depth: int):
        items = []
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.corrupt(f"a dict item should be a [key, value] pair, got {pair!r:.100}")
            items.append((self.decode(pair[0], depth + 3), self.decode(pair[1], depth + 3)))
        kind = node.get("type")
        if kind not in (None, "Counter", "OrderedDict"):
            raise self.corrupt(f"unknown dict type {kind!r:.40}")
        cls = {"Counter": Counter, "OrderedDict": OrderedDict}.get(kind, dict)
        return self._hashable(lambda x: cls(dict(x)) if cls is Counter else cls(x), items)

    def _hashable(self, make, items):
        try:
            return make(items)
        except TypeError as e:  # a tensor, list or dict where a key or set element must be
            raise self.corrupt(f"an unhashable key or set element ({e})") from None

    def _dtype(self, name: str):
        try:
            return D.as_dtype(name)
        except (TypeError, ValueError, KeyError):
            raise self.corrupt(f"unknown dtype {name!r:.40}") from None

    def _tensor_node(self, node: dict):
        key = node["$t"]
        if ("param", key) in self.objs:  # a Parameter seen before
            return self.objs[("param", key)]
        if "dtype" in node:
            self._dtype(node["dtype"])
        t = self.tensor(key, node.get("dtype"), node.get("device"), node.get("crc"))
        if node.get("parameter"):
            return self._parameter(key, t, node.get("requires_grad", True))
        if node.get("requires_grad") and not t.requires_grad:
            if not t.dtype.is_floating_point:
                raise self.corrupt(f"tensor '{key}' of dtype {t.dtype.name} is marked requires_grad")
            t.requires_grad = True
        return t

    def _generator(self, key: str, device: str, expected) -> Generator:
        try:
            g = Generator(device)
            g.set_state(self.array(key, expected))
        except CheckpointError:
            raise
        except (TypeError, ValueError) as e:
            raise self.corrupt(f"generator '{key}' cannot take its saved state ({e})") from None
        return g

    def _parameter(self, key: str, t: Tensor, requires_grad: bool):
        cache = ("param", key)
        if cache not in self.objs:
            from flow.nn.parameter import Parameter

            if requires_grad and not t.dtype.is_floating_point:
                raise self.corrupt(f"parameter '{key}' of dtype {t.dtype.name} is marked requires_grad")
            self.objs[cache] = Parameter(t, requires_grad=requires_grad)
        return self.objs[cache]
