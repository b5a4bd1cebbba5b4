"""``flow.save`` / ``flow.load``: checkpoints as one safetensors file, never pickle.

A checkpoint is a safetensors file: every tensor (and NumPy array, and generator state) is a
safetensors entry, and the structure around them — nested dicts / lists / tuples / sets and plain
values (int, float incl. inf/nan, str, bool, None, flow dtypes and devices) — is JSON stored in
the safetensors metadata under ``"flow.structure"``. Loading therefore never executes code.

* Everything is checksummed: the header (structure, names, tensor table, metadata) by a CRC-32
  that the header itself carries, each tensor's bytes by a CRC-32 kept in the structure. A
  corrupt, truncated or foreign file raises :class:`CheckpointError` naming the file and what is
  wrong; ``verify=False`` skips the checksums (to salvage a damaged file), not the other checks.
* Writes are atomic: the file is written to a temporary file in the target's directory, fsynced,
  moved over the target with ``os.replace`` and the directory is fsynced; a failed or killed save
  leaves the previous checkpoint intact, and the next save removes the temp files of killed ones.
* Failures the operating system reports (missing directory, permission, read-only file system,
  no space) raise :class:`CheckpointOSError`, which is both a ``CheckpointError`` and an ``OSError``
  with ``errno`` and ``filename`` set (and a ``FileNotFoundError`` / ``PermissionError`` ... where
  Python has one for the errno).
* Tensors are stored by value: the same tensor object appearing several times is stored once
  and loads as one object again, but views sharing storage with other tensors are stored as
  separate copies. Structures nest at most :data:`MAX_DEPTH` levels and may not contain themselves.
* :func:`load` of a plain safetensors file (e.g. written by ``safetensors.torch.save_file``)
  returns a flat ``{name: Tensor}`` dict, and :func:`load` of a ``torch.save`` file (PyTorch's zip
  format, ``.pt`` / ``.pth`` / ``.bin``) returns what it holds, read without torch and without running
  code (see :mod:`flow._serialization.torch_zip`).
* A whole ``nn.Module`` is saved (and loaded) only if its class, and every module class it holds, is
  allow-listed with :func:`add_safe_globals` (see :mod:`flow._serialization.module_state`); otherwise
  :func:`save` asks for ``module.state_dict()``.

Format versions: 2 (this flow) adds the header checksum; files of version 1 (no header checksum)
still load, with their tensor data checked.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

from flow._device import device as _device
from flow._serialization import container, torch_zip
from flow._serialization.atomic import write_atomic
from flow._serialization.errors import (
    CheckpointError,
    CheckpointFileNotFoundError,
    CheckpointIsADirectoryError,
    CheckpointNotADirectoryError,
    CheckpointOSError,
    CheckpointPermissionError,
    os_error,
)
from flow._serialization.module_state import ModuleDecoder, ModuleEncoder
from flow._serialization.safe_globals import add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals
from flow._serialization.structure import MAX_DEPTH
from flow._tensor import Tensor
from flow.errors import OpError, OpTypeError

__all__ = [
    "save",
    "load",
    "CheckpointError",
    "CheckpointOSError",
    "CheckpointFileNotFoundError",
    "CheckpointPermissionError",
    "CheckpointIsADirectoryError",
    "CheckpointNotADirectoryError",
    "MAX_DEPTH",
    "add_safe_globals",
    "get_safe_globals",
    "clear_safe_globals",
    "safe_globals",
]

STRUCTURE_KEY = "flow.structure"
FORMAT_VERSION = 2
_RESERVED = ("format", container.CHECKSUM_KEY)


def _encode(obj, metadata: dict | None, global_ok: bool = False) -> tuple[list, dict]:
    """The arrays to write (in file order) and the header metadata; raises before anything is written."""
    enc = ModuleEncoder(global_ok)
    try:
        root = enc.encode(obj)
        text = json.dumps({"version": FORMAT_VERSION, "root": root}, separators=(",", ":"), allow_nan=False)
    except RecursionError:
        raise CheckpointError(
            f"flow.save: the object is nested too deeply for Python's recursion limit "
            f"(checkpoints may nest at most {MAX_DEPTH} levels)"
        ) from None
    except ValueError as e:  # an int too large for Python to write as text
        raise CheckpointError(f"flow.save: cannot write the structure as JSON: {e}") from None
    meta = {"format": "flow", STRUCTURE_KEY: text}
    if metadata is not None and not isinstance(metadata, dict):
        raise OpTypeError("flow.save", f"metadata must be a dict of str to str, got {type(metadata).__name__}")
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise OpTypeError("flow.save", f"metadata must map str to str, got {k!r:.60}: {type(v).__name__}")
        if k in meta or k in _RESERVED or k.startswith("flow."):
            raise OpError("flow.save", f"metadata key '{k}' is reserved for flow's own entries")
        meta[k] = v
    return container.layout(enc.arrays), meta


def save(obj, f, *, metadata: dict | None = None, global_dst_rank: int | None = None) -> None:
    """Save ``obj`` (a state dict, or nested dicts / lists / tuples of tensors and plain values) to ``f``.

    A whole ``nn.Module`` raises :class:`CheckpointError` (save ``module.state_dict()``) unless its
    class and every module class inside it are allow-listed with :func:`add_safe_globals`; then it
    is saved as data (its attributes and tensors) and :func:`load` rebuilds it without ``__init__``.

    ``f`` is a path (written atomically, see the module docstring) or a writable binary file
    object (written directly). ``metadata`` adds string entries to the safetensors header.
    ``global_dst_rank`` (OneFlow's name; needs flow-dist): every rank calls ``save``, global
    tensors are gathered to their logical values and only that rank writes ``f``, so the
    checkpoint loads at any world size (:func:`load` with ``global_src_rank``).

    >>> flow.save({"model": model.state_dict(), "epoch": 3}, "ckpt.safetensors")
    """
    if not (hasattr(f, "write") or isinstance(f, (str, bytes, os.PathLike))):
        raise OpTypeError("flow.save", f"f must be a path or a writable binary file object, got {type(f).__name__}")
    if isinstance(f, io.TextIOBase):
        raise OpTypeError("flow.save", "the file object is open in text mode; open it with 'wb'")
    if global_dst_rank is not None:
        from flow import provided

        env = provided.require("env", "flow.save(global_dst_rank=...)")
        if not isinstance(global_dst_rank, int) or not 0 <= global_dst_rank < env.get_world_size():
            raise OpError(
                "flow.save",
                f"global_dst_rank must be a rank of the job (0..{env.get_world_size() - 1}), got {global_dst_rank!r}",
            )
    arrays, meta = _encode(obj, metadata, global_ok=global_dst_rank is not None)
    if global_dst_rank is not None and env.get_rank() != global_dst_rank:
        return  # the values are gathered (a collective); one rank writes
    header = container.build_header(arrays, meta)
    if not hasattr(f, "write"):
        path = os.fsdecode(os.fspath(f))

        def body(write) -> None:
            write(header)
            container.write_arrays(write, arrays)

        write_atomic(path, body)
        return
    name = getattr(f, "name", "<file object>")
    try:
        f.write(header)
        container.write_arrays(f.write, arrays)
    except OSError as e:
        raise os_error(e, "flow.save: cannot write the checkpoint to the file object", name) from e


class _Placer:
    """Puts loaded tensors where ``map_location`` says (validated once, before anything is read)."""

    def __init__(self, map_location) -> None:
        self.fn = self.mapping = self.target = None
        self.name = ""  # the file's, for messages; set once it is known
        ml = map_location
        if ml is None:
            pass
        elif isinstance(ml, (str, _device)):
            self.target = self._device(ml, "map_location")
        elif isinstance(ml, dict):
            self.mapping = {}
            for k, v in ml.items():
                if not isinstance(k, (str, _device)) or not isinstance(v, (str, _device)):
                    raise OpTypeError(
                        "flow.load",
                        f"map_location as a dict maps saved device names to devices, got {k!r:.40}: {v!r:.40}",
                    )
                try:
                    saved = str(_device(k))  # a device the file names, which need not be installed here
                except (TypeError, ValueError) as e:
                    raise OpError("flow.load", f"map_location key {k!r}: {e}") from None
                self.mapping[saved] = self._device(v, f"map_location[{k!r}]")
        elif callable(ml):
            self.fn = ml
        else:
            raise OpTypeError(
                "flow.load",
                "map_location must be None, a device (or its name), a dict of device "
                f"names, or a callable (tensor, saved_device) -> Tensor; got {type(ml).__name__}",
            )

    @staticmethod
    def _device(d, what: str):
        try:
            dev = _device(d)
        except (TypeError, ValueError) as e:
            raise OpError("flow.load", f"{what}: {e}") from None
        from flow.registry import REGISTRY

        if dev.type not in REGISTRY.device_types:
            raise OpError(
                "flow.load",
                f"{what} names device type '{dev.type}', which no installed plugin provides "
                f"(installed: {', '.join(sorted(REGISTRY.device_types))})",
            )
        return dev

    def __call__(self, t: Tensor, key: str, saved: str) -> Tensor:
        if self.fn is not None:
            out = self.fn(t, saved)
            if not isinstance(out, Tensor):
                raise OpTypeError(
                    "flow.load",
                    f"map_location returned {type(out).__name__} for tensor '{key}'; it must return a Tensor",
                )
            return out
        if self.target is not None:
            target = self.target
        elif self.mapping is not None:
            target = self.mapping.get(saved, None)
            target = _device(saved) if target is None else target
        else:
            target = _device(saved)
        if target.type == "cpu":
            return t
        try:
            return t.to(target)
        except Exception as e:
            raise CheckpointError(
                f"flow.load: '{self.name}': cannot put tensor '{key}' on {target} ({e}); pass map_location='cpu'"
            ) from None


def _remaining(f) -> int | None:
    """The bytes left in a seekable stream (a bound on what a header may claim), or None."""
    try:
        if not f.seekable():
            return None
        pos = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(pos)
        return end - pos
    except (AttributeError, OSError, ValueError):
        return None


def _open(f):
    """(reader, name, size or None, whether size is the exact file size, whether to close it)."""
    if hasattr(f, "read") or hasattr(f, "readinto"):
        if isinstance(f, io.TextIOBase):
            raise OpTypeError("flow.load", "the file object is open in text mode; open it with 'rb'")
        return f, str(getattr(f, "name", "<file object>")), _remaining(f), False, False
    if not isinstance(f, (str, bytes, os.PathLike)):
        raise OpTypeError("flow.load", f"f must be a path or a readable binary file object, got {type(f).__name__}")
    name = os.fsdecode(os.fspath(f))
    try:
        reader = open(name, "rb", buffering=0)
    except FileNotFoundError as e:
        raise os_error(e, "flow.load: no such checkpoint", name) from e
    except OSError as e:
        raise os_error(e, "flow.load: cannot open the checkpoint", name) from e
    try:
        size = os.fstat(reader.fileno()).st_size
    except OSError as e:
        reader.close()
        raise os_error(e, "flow.load: cannot read the checkpoint", name) from e
    return reader, name, size, True, True


class _Prefixed:
    """A non-seekable stream with the bytes already read from it put back in front."""

    def __init__(self, head: bytes, reader) -> None:
        self.head, self.reader = head, reader

    def readinto(self, view) -> int:
        if self.head:
            n = min(len(view), len(self.head))
            view[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        if hasattr(self.reader, "readinto"):
            return self.reader.readinto(view)
        chunk = self.reader.read(len(view))
        if isinstance(chunk, str):
            raise OpTypeError("flow.load", "the file object is open in text mode; open it with 'rb'")
        view[: len(chunk)] = chunk
        return len(chunk)


def _sniff(reader) -> tuple:
    """(the reader to use, whether it holds a zip archive: a PyTorch checkpoint); consumes nothing."""
    seekable = False
    try:
        seekable = reader.seekable()
    except (AttributeError, OSError, ValueError):
        pass
    if seekable:
        pos = reader.tell()
        head = reader.read(8) or b""
        reader.seek(pos)
    else:
        head = b""
        while len(head) < 8:
            chunk = reader.read(8 - len(head))
            if not chunk:
                break
            if isinstance(chunk, str):
                raise OpTypeError("flow.load", "the file object is open in text mode; open it with 'rb'")
            head += chunk
    if not head.startswith(torch_zip.ZIP_MAGIC):
        return (reader if seekable else _Prefixed(head, reader)), False
    if not seekable:  # zipfile reads the directory at the end first
        return io.BytesIO(head + reader.read()), True
    # a safetensors header length can begin with the zip magic only for a header of 64-100 MiB: only
    # then does the archive have to prove itself by its end-of-directory record
    if int.from_bytes(head.ljust(8, b"\0"), "little") > container.MAX_HEADER:
        return reader, True
    ok = zipfile.is_zipfile(reader)
    reader.seek(pos)
    return reader, ok


def load(
    f, map_location=None, *, verify: bool = True, weights_only: bool | None = None, global_src_rank: int | None = None
):
    """Load what :func:`save` wrote, a plain safetensors file, or a PyTorch ``torch.save`` checkpoint.

    The format is told by the file's first bytes: a safetensors file (what :func:`save` writes)
    loads as before, and a plain one as a flat ``{name: Tensor}`` dict. A zip archive is read as
    PyTorch's checkpoint format (``torch.save`` since 1.6: ``.pt`` / ``.pth`` / ``.bin``), without
    torch installed and the way ``torch.load(weights_only=True)`` reads it: its pickle may name only
    tensors (with their dtype, shape, strides and storage offset; float32/64/16, bfloat16, int8/16/32/64,
    uint8 and bool), ``nn.Parameter`` (loaded as :class:`flow.nn.Parameter`), ``OrderedDict``, plain
    containers and scalars, ``torch.Size`` (as :class:`flow.Size`), dtypes and devices (as flow's),
    and the globals allow-listed with :func:`add_safe_globals`. Any other global (a function such
    as ``os.system``, a class, a whole torch module) raises :class:`CheckpointError` naming it,
    before anything of it is imported or run. Tensors that shared a storage in PyTorch load as
    separate tensors with the same values. A truncated or corrupt file raises :class:`CheckpointError`.

    ``map_location``: ``None`` puts tensors back on the device they were saved from; a device
    (or its name) puts all of them there; a dict maps saved device names (``"cuda:0"``) to devices;
    a callable ``fn(tensor, saved_device_name)`` returns the tensor to use. ``verify`` checks the
    header's and each tensor's CRC-32 (a zip checkpoint's records are always checked by their own
    CRC-32). ``weights_only`` is accepted for PyTorch compatibility and changes nothing: flow never
    runs code from a checkpoint, so every load is weights-only.

    ``global_src_rank`` (OneFlow's name; needs flow-dist): every rank calls ``load``, that rank
    reads ``f`` and sends it to the others, and each gets the logical values;
    ``load_state_dict`` into a global module then keeps each rank's piece.

    >>> state = flow.load("ckpt.safetensors", map_location="cpu")
    >>> model.load_state_dict(flow.load("pytorch_model.bin", map_location="cpu"))
    """
    if global_src_rank is not None:
        from flow import provided

        spread = provided.require("global_load", "flow.load(global_src_rank=...)")
        return spread(f, global_src_rank, lambda g: load(g, map_location, verify=verify))
    if not isinstance(verify, bool):
        raise OpTypeError("flow.load", f"verify must be a bool, got {type(verify).__name__}")
    if weights_only is not None and not isinstance(weights_only, bool):
        raise OpTypeError("flow.load", f"weights_only must be a bool or None, got {type(weights_only).__name__}")
    place = _Placer(map_location)
    reader, name, size, exact, owned = _open(f)
    place.name = name
    try:
        reader, is_zip = _sniff(reader)
        if is_zip:
            return torch_zip.load(reader, name, place)
        header = container.read_header(reader, name, size, verify, exact)
        arrays = container.read_arrays(reader, name, header)
    except OSError as e:
        if isinstance(e, CheckpointOSError):
            raise
        raise os_error(e, "flow.load: cannot read the checkpoint", name) from e
    finally:
        if owned:
            reader.close()
    dec = ModuleDecoder(arrays, name, place, verify)
    meta = header.metadata
    if not (STRUCTURE_KEY in meta or container.CHECKSUM_KEY in meta or meta.get("format") == "flow"):
        return {k: dec.tensor(k, None, None, None) for k in arrays}  # a plain safetensors file
    version, root = _structure(meta, name)
    if verify and not header.checked and (version >= 2 or container.CHECKSUM_KEY in meta):
        raise CheckpointError(
            f"flow.load: '{name}' is corrupt: its header checksum is missing or damaged; pass "
            "verify=False to try anyway"
        )
    try:
        return dec.decode(root)
    except RecursionError:
        raise CheckpointError(f"flow.load: '{name}' has a corrupt structure: it is nested too deeply") from None


def _structure(meta: dict, name: str) -> tuple[int, object]:
    text = meta.get(STRUCTURE_KEY)
    if text is None:
        raise CheckpointError(
            f"flow.load: '{name}' is a flow checkpoint without its structure entry "
            f"'{STRUCTURE_KEY}' (a damaged header?)"
        )
    try:
        structure = json.loads(text)
    except RecursionError:
        raise CheckpointError(f"flow.load: '{name}' has a corrupt structure: it is nested too deeply") from None
    except ValueError as e:
        raise CheckpointError(f"flow.load: '{name}' has a corrupt structure (not valid JSON: {e})") from None
    if not isinstance(structure, dict) or set(structure) != {"version", "root"}:
        raise CheckpointError(
            f"flow.load: '{name}' has a corrupt structure: expected an object with 'version' and 'root'"
        )
    version = structure["version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CheckpointError(
            f"flow.load: '{name}' has a corrupt structure: the format version is {version!r:.40}, "
            "expected a positive int"
        )
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"flow.load: '{name}' uses checkpoint format {version}, newer than this flow's "
            f"({FORMAT_VERSION}); upgrade flow"
        )
    return version, structure["root"]
