"""``save``: every rank writes its shard, rank 0 the metadata, and the directory swaps in at once.

The steps, so that a crash anywhere leaves the previous checkpoint loadable:

1. rank 0 makes a fresh temporary directory next to the target (its name, with a random token,
   is broadcast), every rank waits for it;
2. each rank writes its owned chunks to its shard file and fsyncs it;
3. the ranks all-gather what they wrote (or the error that stopped them): if any rank failed, every
   rank raises, and rank 0 removes the temporary directory;
4. rank 0 writes ``.metadata`` (fsynced), moves the old checkpoint aside, renames the temporary
   directory to the target, removes the old one, and tells the others it is done.

A rank that dies (not an exception it can report) leaves the others in a collective; under
mpiexec / flow-launch the job is aborted, and the comm layer's timeout bounds the wait otherwise.
Load refuses a directory without ``.metadata``, so a half-written temporary directory is never
taken for a checkpoint.

``FLOW_DCP_FAIL_AT=<rank>:<n>`` (for tests only) makes rank ``<rank>`` crash after writing ``n``
chunks of its shard (the file is left torn) without reporting to the others.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from typing import Any

import numpy as np

from flow_dist import env
from flow_dist.dcp._flatten import flatten, is_tensor
from flow_dist.dcp.format import FORMAT, METADATA, VERSION, CheckpointError, checksum, owned_chunks, shard_name

__all__ = ["save"]

_WHAT = "flow.distributed.checkpoint.save"


class _InjectedCrash(CheckpointError):
    """The failure ``FLOW_DCP_FAIL_AT`` injects."""


def _fail_at() -> tuple | None:
    spec = os.environ.get("FLOW_DCP_FAIL_AT")
    if not spec:
        return None
    try:
        rank, n = (int(x) for x in spec.split(":"))
    except ValueError:
        raise ValueError(f"FLOW_DCP_FAIL_AT must be '<rank>:<chunks>', got {spec!r}") from None
    return rank, n


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _pieces(key: str, t: Any, rank: int) -> tuple:
    """``(entry, mine)``: the metadata entry of tensor ``t`` (chunks without checksums) and the
    arrays of the chunks this rank owns, by chunk index. Partial sums are reduced first (a
    collective: every rank saves the same keys in the same order)."""
    from flow_dist import boxing
    from flow_dist.sbp import PartialSum, broadcast

    data = t.detach()._data
    if getattr(data, "is_global", False):
        if any(s.__class__ is PartialSum for s in data.sbp):
            data = boxing.box(data, tuple(broadcast if s.__class__ is PartialSum else s for s in data.sbp))
        shape = tuple(data.shape)
        chunks = owned_chunks(shape, data.placement, data.sbp)
        local = np.asarray(data.local)
        dtype = data.dtype
    else:
        local = np.asarray(data)
        shape, dtype = tuple(local.shape), local.dtype
        chunks = [([0] * len(shape), list(shape), 0)] if local.size else []  # replicated: rank 0 writes it
    entry = {"shape": list(shape), "dtype": np.dtype(dtype).name, "chunks": []}
    mine = {}
    for i, (offsets, lengths, owner) in enumerate(chunks):
        entry["chunks"].append(
            {"file": shard_name(owner), "name": f"{key}/{i}", "offsets": offsets, "lengths": lengths, "rank": owner}
        )
        if owner == rank:
            # a global tensor's local piece starts at its own offsets; a local tensor is whole
            mine[i] = np.ascontiguousarray(local)
    return entry, mine


def _values(leaves: list) -> dict:
    """The non-tensor leaves, checked on every rank before any communication (so that every rank
    raises alike)."""
    values = {}
    for leaf in leaves:
        if not is_tensor(leaf.value):
            try:
                json.dumps(leaf.value, allow_nan=True)
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"{_WHAT}: {leaf.key!r} is a {type(leaf.value).__name__}, which a checkpoint cannot hold "
                    f"(tensors, numbers, strings, lists, dicts and None can): {e}"
                ) from None
            values[leaf.key] = leaf.value
    return values


def _gather_json(comm, obj: Any) -> list:
    """``obj`` of every rank, in rank order."""
    out = comm.all_gather(np.frombuffer(json.dumps(obj).encode(), np.uint8))
    return [json.loads(bytes(np.asarray(r, np.uint8))) for r in out]


def _rank0_status(comm, failure: str) -> str:
    """Rank 0's failure message ("" when it went well), on every rank."""
    got = comm.broadcast(np.frombuffer(failure.encode() or b"\0", np.uint8).copy(), src=0)
    return "" if bytes(got) == b"\0" else bytes(got).decode()


def _make_tmp(comm, rank: int, path: str) -> str:
    """Step 1: a fresh temporary directory next to ``path``, made by rank 0, named alike everywhere."""
    token = comm.broadcast(np.array([secrets.randbits(62) if rank == 0 else 0], np.int64), src=0)
    parent, name = os.path.split(path)
    tmp = os.path.join(parent, f".{name}.tmp-{int(token[0]):x}")
    failure = ""
    if rank == 0:
        try:
            os.makedirs(tmp)
        except OSError as e:
            failure = f"cannot make {tmp!r}: {e}"
    failure = _rank0_status(comm, failure)
    if failure:
        raise CheckpointError(f"{_WHAT}: rank 0 {failure}")
    return tmp


def _write_shard(tmp: str, rank: int, tensors: dict, entries: dict) -> dict:
    """Step 2: this rank's shard file, fsynced; returns the report for the others (its size and
    checksums, or the error that stopped it)."""
    import safetensors.numpy

    try:
        fail = _fail_at()
        if fail is not None and fail[0] == rank:
            names = list(tensors)[: fail[1]]
            blob = safetensors.numpy.save({n: tensors[n] for n in names}) if names else b""
            _write_file(os.path.join(tmp, shard_name(rank)), blob[: max(len(blob) - 8, 0)])  # torn
            raise _InjectedCrash(f"FLOW_DCP_FAIL_AT: rank {rank} crashes after {len(names)} chunks (test-only)")
        report: dict = {"crc": {k: [c.get("crc32") for c in e["chunks"]] for k, e in entries.items()}}
        if tensors:
            blob = safetensors.numpy.save(tensors)
            _write_file(os.path.join(tmp, shard_name(rank)), blob)
            report["size"] = len(blob)
        return report
    except _InjectedCrash:
        raise  # a crash does not report to the others
    except Exception as e:  # an unwritable directory, a dtype safetensors cannot hold: every rank raises it
        return {"error": f"{type(e).__name__}: {e}"}


def _commit(tmp: str, path: str, world: int, entries: dict, values: dict, reports: list) -> None:
    """Step 4 (rank 0): the metadata, with every rank's checksums, then the swap."""
    for key, entry in entries.items():
        for i, c in enumerate(entry["chunks"]):
            c["crc32"] = reports[c.pop("rank")]["crc"][key][i]
    files = {shard_name(r): rep["size"] for r, rep in enumerate(reports) if "size" in rep}
    meta = {"format": FORMAT, "version": VERSION, "world_size": world, "tensors": entries, "values": values}
    meta["files"] = files
    _write_file(os.path.join(tmp, METADATA), json.dumps(meta, allow_nan=True).encode())
    _fsync_dir(tmp)
    _swap(tmp, path)


def save(state_dict: dict, checkpoint_id: str | os.PathLike) -> None:
    """Save ``state_dict`` (nested dicts / lists of tensors, global or local, and plain values) as
    the sharded checkpoint directory ``checkpoint_id``. Every rank of the job calls it with the same
    keys; a directory already there is replaced only once the new checkpoint is complete.

    >>> flow_dist.dcp.save({"model": model.state_dict(), "epoch": 3}, "ckpt/epoch_3")
    """
    from flow_dist.comm.backend import get_backend

    if not isinstance(checkpoint_id, (str, os.PathLike)):
        raise TypeError(f"{_WHAT}: checkpoint_id must be a path, got {type(checkpoint_id).__name__}")
    path = os.path.abspath(os.fspath(checkpoint_id))
    leaves = flatten(state_dict, _WHAT)
    values = _values(leaves)
    rank, world = env.get_rank(), env.get_world_size()
    comm = get_backend("cpu", None)
    # the ranks must agree on the keys before the collectives that reducing a partial sum needs
    keys = [leaf.key for leaf in leaves]
    if any(k != keys for k in _gather_json(comm, keys)):
        raise CheckpointError(f"{_WHAT}: the ranks' state dicts have different keys; every rank must save the same")

    tmp = _make_tmp(comm, rank, path)
    entries: dict = {}
    tensors: dict = {}
    for leaf in leaves:
        if is_tensor(leaf.value):
            entry, mine = _pieces(leaf.key, leaf.value, rank)
            entries[leaf.key] = entry
            for i, a in mine.items():
                tensors[entry["chunks"][i]["name"]] = a
                entry["chunks"][i]["crc32"] = checksum(a)
    reports = _gather_json(comm, _write_shard(tmp, rank, tensors, entries))  # step 3
    errors = [f"rank {r}: {rep['error']}" for r, rep in enumerate(reports) if "error" in rep]
    if errors:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"{_WHAT}: writing {path!r} failed ({'; '.join(errors)}); the previous checkpoint is kept"
        )
    failure = ""
    if rank == 0:
        try:
            _commit(tmp, path, world, entries, values, reports)
        except (OSError, CheckpointError) as e:
            failure = f"{type(e).__name__}: {e}"
            shutil.rmtree(tmp, ignore_errors=True)
    failure = _rank0_status(comm, failure)  # no rank returns before the checkpoint is in place
    if failure:
        raise CheckpointError(f"{_WHAT}: rank 0 could not put the checkpoint in place at {path!r}: {failure}")


def _swap(tmp: str, path: str) -> None:
    """``tmp`` (complete) becomes ``path``; an old checkpoint there is moved aside first and removed
    after, so until the rename one complete checkpoint is always on disk."""
    parent = os.path.dirname(path)
    old = None
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise CheckpointError(f"{_WHAT}: {path!r} exists and is not a checkpoint directory")
        old = f"{tmp}.old"
        os.rename(path, old)
    os.rename(tmp, path)
    _fsync_dir(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    # what saves that crashed left behind (never taken for a checkpoint: they have no .metadata)
    stale = f".{os.path.basename(path)}.tmp-"
    for entry in os.listdir(parent):
        if entry.startswith(stale):
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
