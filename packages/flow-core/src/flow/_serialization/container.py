"""The file container: a safetensors file whose header carries flow's CRC-32.

The layout is safetensors': 8 bytes of little-endian header length N, N bytes of JSON header (padded
with spaces to a multiple of 8), then every tensor's bytes, little-endian, back to back in offset
order. flow writes its metadata first in the header and its checksum as the first metadata entry::

    {"__metadata__":{"flow.checksum":"1a2b3c4d","flow.structure":"...","format":"flow",...},"w":{...}}

The 8 hex digits are the CRC-32 of the 8 length bytes followed by every header byte after the
digits. Because the field sits at a fixed place, a reader checks the raw bytes before it parses
anything, so no change to the header can slip through as a different but valid header (a renamed
key, a changed number, a tensor table that moved): CRC-32 detects every burst of up to 32 flipped
bits. Each tensor's bytes are checked by a CRC-32 of their own, which the structure holds.
"""

from __future__ import annotations

import json
import math
import sys
import zlib
from typing import NamedTuple

import ml_dtypes
import numpy as np

from flow._serialization.errors import CheckpointError
from flow.errors import OpTypeError

__all__ = [
    "CHECKSUM_KEY",
    "Header",
    "Entry",
    "crc",
    "clean_bool",
    "file_bytes",
    "layout",
    "build_header",
    "write_arrays",
    "read_header",
    "read_arrays",
]

CHECKSUM_KEY = "flow.checksum"
_PREFIX = b'{"__metadata__":{"' + CHECKSUM_KEY.encode() + b'":"'
_DIGITS = len(_PREFIX) + 8  # end of the checksum's hex digits
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on the header's size
_LITTLE = sys.byteorder == "little"

_ST_TO_NP = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "I16": np.int16,
    "U16": np.uint16,
    "I32": np.int32,
    "U32": np.uint32,
    "I64": np.int64,
    "U64": np.uint64,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "F32": np.float32,
    "F64": np.float64,
}
_ST_TO_NP = {k: np.dtype(v) for k, v in _ST_TO_NP.items()}
_NP_TO_ST = {v: k for k, v in _ST_TO_NP.items()}

# What the first bytes of common files that are not safetensors look like, to say what was given.
_FOREIGN = (
    (b"PK\x03\x04", "a zip archive (the format of PyTorch's torch.save?)"),
    (b"\x93NUMPY", "a NumPy .npy file"),
    (b"\x89HDF", "an HDF5 file"),
    (b"\x1f\x8b", "a gzip file"),
    (b"\x80\x02", "a pickle"),
    (b"\x80\x03", "a pickle"),
    (b"\x80\x04", "a pickle"),
    (b"\x80\x05", "a pickle"),
)


class Entry(NamedTuple):
    name: str
    dtype: np.dtype
    shape: tuple
    begin: int
    end: int


class Header(NamedTuple):
    metadata: dict  # str -> str
    entries: list  # [Entry], in the order the header lists them
    data_len: int  # bytes of tensor data after the header
    size: int  # bytes of the whole file
    checked: bool  # the header carried flow's checksum and it matched


def st_dtype(dt: np.dtype) -> str:
    return _NP_TO_ST[np.dtype(dt)]


def file_bytes(arr: np.ndarray) -> np.ndarray:
    """``arr``'s bytes as the file holds them: C order, little-endian, as a flat uint8 array (a view where possible)."""
    if not arr.flags.c_contiguous:
        arr = np.array(arr, order="C")
    if not _LITTLE and arr.dtype.itemsize > 1:
        arr = arr.byteswap()
    return arr.reshape(-1).view(np.uint8)


def crc(arr: np.ndarray) -> int:
    return zlib.crc32(file_bytes(arr))


def clean_bool(arr: np.ndarray) -> np.ndarray:
    """A bool array read from a file, with any byte other than 0 and 1 (which NumPy would keep as is) made True."""
    if arr.dtype == np.bool_ and arr.size and arr.view(np.uint8).max() > 1:
        return arr.view(np.uint8) != 0
    return arr


# -- writing ---------------------------------------------------------------------------------------------------
def build_header(arrays: list, metadata: dict) -> bytes:
    """The length prefix and checksummed header for ``arrays`` (``[(name, ndarray)]``, written in that order)."""
    header: dict = {"__metadata__": {CHECKSUM_KEY: "00000000", **metadata}}
    offset = 0
    for name, arr in arrays:
        if name in header:
            raise CheckpointError(f"flow.save: a tensor may not be named '{name}' (it is the header's metadata key)")
        header[name] = {
            "dtype": st_dtype(arr.dtype),
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("ascii")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    length = len(text).to_bytes(8, "little")
    digits = b"%08x" % zlib.crc32(text[_DIGITS:], zlib.crc32(length))
    return length + text[: len(_PREFIX)] + digits + text[_DIGITS:]


def layout(arrays: dict) -> list:
    """``arrays`` in the order to write them: widest elements first, so every tensor starts aligned to its itemsize."""
    return sorted(arrays.items(), key=lambda kv: -kv[1].dtype.itemsize)


def write_arrays(write, arrays: list) -> None:
    for _, arr in arrays:
        if arr.nbytes:
            write(file_bytes(arr))


# -- reading ---------------------------------------------------------------------------------------------------
def read_exact(reader, n: int, name: str, what: str) -> bytearray:
    buf = bytearray(n)
    read_into(reader, memoryview(buf), name, what)
    return buf


def read_into(reader, view: memoryview, name: str, what: str) -> None:
    """Fill ``view`` from ``reader`` (a file object); a file that ends first is a truncated checkpoint."""
    pos, n = 0, len(view)
    readinto = getattr(reader, "readinto", None)
    while pos < n:
        if readinto is not None:
            got = readinto(view[pos:])
        else:
            chunk = reader.read(n - pos)
            if isinstance(chunk, str):
                raise OpTypeError("flow.load", f"the file object for '{name}' is open in text mode; open it with 'rb'")
            got = len(chunk)
            view[pos : pos + got] = chunk
        if not got:
            raise CheckpointError(
                f"flow.load: '{name}' is truncated: {what} needs {n} bytes but the file ends after "
                f"{pos} (an interrupted write or copy?)"
            )
        pos += got


def _not_safetensors(name: str, head: bytes, reason: str) -> CheckpointError:
    kind = next((k for magic, k in _FOREIGN if head.startswith(magic)), None)
    what = f"it looks like {kind}" if kind else reason
    return CheckpointError(
        f"flow.load: '{name}' is not a flow checkpoint or safetensors file: {what}; flow.load reads "
        "only safetensors files (see safetensors.torch.save_file for PyTorch weights)"
    )


def read_header(reader, name: str, size: int | None, verify: bool, exact: bool = True) -> Header:
    """Read and check the length prefix and header.

    ``size`` is the file's size (``exact``), or the bytes left in a seekable stream, which may hold
    more after the checkpoint (not ``exact``), or None for a stream of unknown length.
    """
    if size == 0:
        raise CheckpointError(f"flow.load: '{name}' is empty (an interrupted write?)")
    if size is not None and size < 8:
        raise _not_safetensors(name, b"", f"it is only {size} bytes long")
    head = bytes(read_exact(reader, 8, name, "the header length"))
    n = int.from_bytes(head, "little")
    limit = MAX_HEADER if size is None else min(MAX_HEADER, size - 8)
    if n < 2 or n > limit:
        held = "" if size is None else f" of a {size}-byte file"
        raise _not_safetensors(name, head, f"its first 8 bytes give a header length of {n} bytes{held}")
    text = bytes(read_exact(reader, n, name, "the header"))
    checked = False
    if text.startswith(_PREFIX) and verify:
        # compared as bytes: parsing the digits as a number would accept "ABCD..." for "abcd..."
        if text[len(_PREFIX) : _DIGITS] != b"%08x" % zlib.crc32(text[_DIGITS:], zlib.crc32(head)):
            raise CheckpointError(
                f"flow.load: '{name}' is corrupt: its header does not match its checksum (the "
                "structure, names or tensor table were damaged); pass verify=False to try anyway"
            )
        checked = True
    elif not text.startswith(b"{"):
        raise _not_safetensors(name, head, "it has no JSON header")
    header = _parse_json(text, name)
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"flow.load: '{name}' has a corrupt header: '__metadata__' must map strings to strings")
    entries = [_entry(name, k, v) for k, v in header.items()]
    data_len = _check_offsets(name, entries)
    total = 8 + n + data_len
    if size is not None and (size < total or (exact and size != total)):
        if size < total:
            raise CheckpointError(
                f"flow.load: '{name}' is truncated: its header describes {total} bytes but the file "
                f"holds {size} (an interrupted write or copy?)"
            )
        raise CheckpointError(
            f"flow.load: '{name}' is corrupt: it holds {size - total} bytes after the last tensor "
            "that its header does not describe"
        )
    return Header(metadata, entries, data_len, total, checked)


def _parse_json(text: bytes, name: str) -> dict:
    def pairs(items):
        d = dict(items)
        if len(d) != len(items):
            raise ValueError("a key appears twice")
        return d

    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=pairs)
    except RecursionError:
        raise CheckpointError(f"flow.load: '{name}' has a corrupt header: its JSON is nested too deeply") from None
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CheckpointError(f"flow.load: '{name}' has a corrupt header (not valid JSON: {e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"flow.load: '{name}' has a corrupt header: it is JSON but not an object")
    return header


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _entry(name: str, key: str, info) -> Entry:
    bad = f"flow.load: '{name}' has a corrupt header: the entry of tensor '{key}'"
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise CheckpointError(f"{bad} must hold exactly 'dtype', 'shape' and 'data_offsets', got {info!r:.200}")
    dt, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dt not in _ST_TO_NP:
        raise CheckpointError(
            f"flow.load: '{name}': tensor '{key}' has dtype {dt!r:.40}, which flow cannot load "
            f"(it reads {', '.join(_ST_TO_NP)})"
        )
    if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
        raise CheckpointError(f"{bad} has shape {shape!r:.200}; expected a list of non-negative ints")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_int(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise CheckpointError(f"{bad} has data_offsets {offsets!r:.200}; expected [begin, end] with 0 <= begin <= end")
    dtype = _ST_TO_NP[dt]
    nbytes = dtype.itemsize * math.prod(shape)  # Python ints: a huge shape cannot overflow
    if offsets[1] - offsets[0] != nbytes:
        raise CheckpointError(
            f"{bad} is inconsistent: shape {shape} of {dt} needs {nbytes} bytes but data_offsets "
            f"{offsets} span {offsets[1] - offsets[0]}"
        )
    return Entry(key, dtype, tuple(shape), offsets[0], offsets[1])


def _check_offsets(name: str, entries: list) -> int:
    end = 0
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin != end:
            kind = "overlaps another" if e.begin < end else f"leaves a gap of {e.begin - end} bytes before it"
            raise CheckpointError(
                f"flow.load: '{name}' has a corrupt header: the data of tensor '{e.name}' {kind} "
                f"(data_offsets [{e.begin}, {e.end}])"
            )
        end = e.end
    return end


def read_arrays(reader, name: str, header: Header) -> dict:
    """Every tensor of the file as a NumPy array that owns its memory, read straight into place."""
    arrays = {}
    for e in sorted(header.entries, key=lambda e: e.begin):
        arr = np.empty(e.shape, e.dtype)
        if arr.nbytes:
            read_into(reader, memoryview(arr.reshape(-1).view(np.uint8)), name, f"the data of tensor '{e.name}'")
        if not _LITTLE and arr.dtype.itemsize > 1:
            arr = arr.byteswap()
        arrays[e.name] = arr
    return {e.name: arrays[e.name] for e in header.entries}
