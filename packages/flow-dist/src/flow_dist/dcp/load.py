"""``load``: fill a state dict in place from a sharded checkpoint, each rank reading only the
chunks that overlap its own piece.

The target decides the layout: a global tensor receives its piece of the logical value in its
own placement and SBP (any world size, placement or split, even or uneven); a partial-sum axis
gets the value on its first rank and zeros on the others, as ``to_global`` of a broadcast value
to ``partial_sum`` does; a local tensor receives the whole value. Loading needs no communication,
so a rank that fails (a corrupt chunk) cannot leave the others waiting.
"""

from __future__ import annotations

import copy
import os

import numpy as np

from flow_dist.dcp._flatten import flatten, is_tensor
from flow_dist.dcp.format import CheckpointError, ShardReader, read_metadata, resolve

__all__ = ["load"]

_WHAT = "flow.distributed.checkpoint.load"


def _list(keys: list) -> str:
    return ", ".join(repr(k) for k in keys[:20]) + (f" and {len(keys) - 20} more" if len(keys) > 20 else "")


def _target(t) -> tuple:
    """``(logical shape, dtype, region, dest, zero)`` of a target tensor: the slices of the logical
    value this rank receives, the array to write them into, and whether this rank's piece is zeros
    (a partial-sum axis off its first rank)."""
    from flow_dist.layout import local_slice
    from flow_dist.sbp import PartialSum, broadcast

    data = t.detach()._data
    if getattr(data, "is_global", False):
        nd = tuple(broadcast if s.__class__ is PartialSum else s for s in data.sbp)
        region = local_slice(data.shape, data.placement, nd, data.coord)
        zero = any(s.__class__ is PartialSum and data.coord[a] != 0 for a, s in enumerate(data.sbp))
        return tuple(data.shape), np.dtype(data.dtype), region, data.local, zero
    a = np.asarray(data)
    return tuple(a.shape), a.dtype, tuple(slice(0, n) for n in a.shape), None, False


def _fill(key: str, entry: dict, region: tuple, dtype: np.dtype, reader: ShardReader) -> np.ndarray:
    """The values of ``region`` of key ``key``, from the chunks that overlap it."""
    out = np.empty(tuple(s.stop - s.start for s in region), dtype)
    covered = 0
    for c in entry["chunks"]:
        lo = [max(s.start, o) for s, o in zip(region, c["offsets"])]
        hi = [min(s.stop, o + n) for s, o, n in zip(region, c["offsets"], c["lengths"])]
        if any(a >= b for a, b in zip(lo, hi)):
            continue  # no overlap: this rank never reads that chunk
        a = reader.chunk(key, c, dtype)
        src = tuple(slice(x - o, y - o) for x, y, o in zip(lo, hi, c["offsets"]))
        dst = tuple(slice(x - s.start, y - s.start) for x, y, s in zip(lo, hi, region))
        out[dst] = a[src]
        covered += int(np.prod([y - x for x, y in zip(lo, hi)]))
    if covered != out.size:
        raise CheckpointError(
            f"{_WHAT}: the chunks of {key!r} cover {covered} of the {out.size} values this rank needs"
        )
    return out


def _check(leaves: list, tensors: dict, values: dict, path: str, strict: bool) -> None:
    """Every check before the first write, so that a mismatch changes nothing."""
    have = {leaf.key for leaf in leaves}
    missing = [leaf.key for leaf in leaves if leaf.key not in tensors and leaf.key not in values]
    unexpected = [k for k in (*tensors, *values) if k not in have] if strict else []
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing from the checkpoint: {_list(missing)}")
        if unexpected:
            parts.append(f"in the checkpoint but not in the state dict: {_list(unexpected)}")
        raise CheckpointError(f"{_WHAT}: keys of {path!r} do not match the state dict ({'; '.join(parts)})")
    for leaf in leaves:
        entry = tensors.get(leaf.key)
        if is_tensor(leaf.value) != (entry is not None):
            kind = "a tensor" if entry is not None else "a value"
            raise CheckpointError(
                f"{_WHAT}: {leaf.key!r} is saved as {kind} but the state dict holds a {type(leaf.value).__name__}"
            )
        if entry is not None:
            shape, dtype, _, _, _ = _target(leaf.value)
            if list(shape) != entry["shape"]:
                raise CheckpointError(
                    f"{_WHAT}: shape mismatch for {leaf.key!r}: saved {tuple(entry['shape'])}, "
                    f"the state dict's tensor is {shape}"
                )
            if dtype.name != entry["dtype"]:
                raise CheckpointError(
                    f"{_WHAT}: dtype mismatch for {leaf.key!r}: saved {entry['dtype']}, "
                    f"the state dict's tensor is {dtype.name}"
                )


def load(state_dict: dict, checkpoint_id: str | os.PathLike, strict: bool = True) -> None:
    """Load the checkpoint directory ``checkpoint_id`` into ``state_dict`` in place: its tensors
    (global or local) receive the saved values in their own layout, its other values are replaced.
    Keys the checkpoint lacks are an error; so are keys of the checkpoint the state dict lacks
    unless ``strict=False``. Shapes and dtypes must match the saved ones."""
    import flow

    if not isinstance(checkpoint_id, (str, os.PathLike)):
        raise TypeError(f"{_WHAT}: checkpoint_id must be a path, got {type(checkpoint_id).__name__}")
    path = resolve(os.path.abspath(os.fspath(checkpoint_id)), _WHAT)
    leaves = flatten(state_dict, _WHAT)
    meta = read_metadata(path, _WHAT)
    tensors, values = meta.get("tensors", {}), meta.get("values", {})
    _check(leaves, tensors, values, path, strict)
    reader = ShardReader(path, _WHAT)
    for leaf in leaves:
        if leaf.key in values:
            v = copy.deepcopy(values[leaf.key])
            leaf.assign(tuple(v) if isinstance(leaf.value, tuple) and isinstance(v, list) else v)
            continue
        shape, dtype, region, dest, zero = _target(leaf.value)
        if dest is not None:  # a global tensor: its local piece, in place
            if zero:
                dest[...] = 0
            else:
                dest[...] = _fill(leaf.key, tensors[leaf.key], region, dtype, reader)
            leaf.value._version[0] += 1  # an in-place write, as copy_ would count it
        else:
            whole = _fill(leaf.key, tensors[leaf.key], region, dtype, reader)
            with flow.no_grad():
                leaf.value.copy_(flow.from_numpy(whole))
