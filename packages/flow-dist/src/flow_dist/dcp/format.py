"""The on-disk format of a sharded checkpoint (a directory).

- ``__<rank>_0.safetensors``: the chunks rank ``<rank>`` owns; chunk ``i`` of key ``k`` is the
  safetensors entry ``"k/i"``. A rank that owns no chunk writes no file.
- ``.metadata`` (JSON, written last, so a directory without it is not a checkpoint)::

      {"format": "flow-dcp", "version": 1, "world_size": 4,
       "tensors": {"fc.weight": {"shape": [8, 4], "dtype": "float64",
                                 "chunks": [{"file": "__0_0.safetensors", "name": "fc.weight/0",
                                             "offsets": [0, 0], "lengths": [4, 4], "crc32": 1234}, ...]}},
       "values": {"optimizer.param_groups.0.lr": 0.001, ...},
       "files": {"__0_0.safetensors": 1024, ...}}

  ``offsets`` / ``lengths`` place a chunk in the logical tensor; ``crc32`` is zlib's checksum of
  the chunk's bytes (C order); ``values`` holds the non-tensor leaves (numbers, strings, lists,
  None); ``files`` the size of every shard file.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import numpy as np

from flow.errors import FlowError

__all__ = ["CheckpointError", "METADATA", "FORMAT", "VERSION", "shard_name", "checksum", "owned_chunks"]

METADATA = ".metadata"
FORMAT = "flow-dcp"
VERSION = 1


class CheckpointError(FlowError):
    """A sharded checkpoint that cannot be written or read into the given state dict (missing or
    unexpected keys, a shape or dtype mismatch, a corrupt chunk, an incomplete directory)."""


def shard_name(rank: int) -> str:
    return f"__{rank}_0.safetensors"


def checksum(a: np.ndarray) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B")) if a.size else 0


def owned_chunks(shape: tuple, placement: Any, nd_sbp: tuple) -> list:
    """``(offsets, lengths, owner rank)`` of every distinct piece of a global tensor laid out as
    ``nd_sbp`` (no partial sums) over ``placement``; a piece held by several ranks belongs to the
    first of them in the placement's order. Empty pieces (uneven splits of short dims) are left out."""
    from flow_dist.layout import local_slice

    owners: dict = {}
    for r in placement.rank_list:
        sl = local_slice(shape, placement, nd_sbp, placement.rank_index(r))
        owners.setdefault(tuple((s.start, s.stop) for s in sl), r)
    out = []
    for bounds, r in owners.items():
        lengths = [b - a for a, b in bounds]
        if all(n > 0 for n in lengths):
            out.append(([a for a, _ in bounds], lengths, r))
    return out


def resolve(path: str, what: str) -> str:
    """``path``, or, when nothing is there, the previous checkpoint a save had just moved aside
    (``.<name>.tmp-<token>.old``) when it stopped before renaming the new one into place: the one
    moment of a save (:func:`flow_dist.dcp.save._swap`) without a checkpoint at ``path``."""
    if os.path.lexists(path):
        return path
    parent, name = os.path.split(path)
    try:
        entries = os.listdir(parent)
    except OSError:
        return path
    prefix = f".{name}.tmp-"
    aside = sorted(
        os.path.join(parent, e)
        for e in entries
        if e.startswith(prefix) and e.endswith(".old") and os.path.exists(os.path.join(parent, e, METADATA))
    )
    if len(aside) != 1:
        return path
    import warnings

    warnings.warn(
        f"{what}: no checkpoint at {path!r}; loading the previous one, which a save that did not finish "
        f"left at {aside[0]!r} (the next save puts a new one in place and removes it)",
        stacklevel=3,
    )
    return aside[0]


def read_metadata(path: str, what: str) -> dict:
    """The checked ``.metadata`` of the checkpoint directory ``path``."""
    if not os.path.isdir(path):
        raise CheckpointError(f"{what}: no checkpoint directory at {path!r}")
    meta_path = os.path.join(path, METADATA)
    if not os.path.exists(meta_path):
        raise CheckpointError(
            f"{what}: {path!r} is not a complete checkpoint (no {METADATA}; a save that did not finish leaves none)"
        )
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{what}: cannot read {meta_path!r}: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{what}: {meta_path!r} is not a flow sharded checkpoint's metadata")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{what}: checkpoint format version {meta.get('version')!r}; this flow reads {VERSION}")
    for name, size in meta.get("files", {}).items():
        p = os.path.join(path, name)
        if not os.path.exists(p) or os.path.getsize(p) != size:
            raise CheckpointError(f"{what}: shard file {name} of {path!r} is missing or has the wrong size")
    return meta


class ShardReader:
    """Reads chunks out of a checkpoint's shard files, each file opened once, each chunk checked
    against its checksum."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        self._files: dict = {}

    def chunk(self, key: str, chunk: dict, dtype: np.dtype) -> np.ndarray:
        from safetensors import safe_open

        name = chunk["file"]
        try:
            f = self._files.get(name)
            if f is None:
                f = self._files[name] = safe_open(os.path.join(self.path, name), framework="np")
            a = f.get_tensor(chunk["name"])
        except Exception as e:  # safetensors raises its own errors on a torn or corrupt file
            raise CheckpointError(
                f"{self.what}: cannot read chunk {chunk['name']!r} of {key!r} from {name}: {e}"
            ) from e
        if not chunk["lengths"] and a.shape == (1,):
            a = a.reshape(())  # safetensors' numpy reader gives a 0-d entry back as shape (1,)
        if list(a.shape) != list(chunk["lengths"]) or a.dtype != dtype:
            raise CheckpointError(
                f"{self.what}: chunk {chunk['name']!r} of {key!r} in {name} has shape {list(a.shape)} {a.dtype}, "
                f"the metadata says {chunk['lengths']} {dtype}"
            )
        if checksum(a) != chunk["crc32"]:
            raise CheckpointError(f"{self.what}: chunk {chunk['name']!r} of {key!r} in {name} is corrupt (checksum)")
        return a
