"""Collation: turning a list of samples into a batch (``default_collate``) or converting one (``default_convert``).

A batch that cannot be stacked (samples of different shapes, lengths or keys, or of types that
cannot become a tensor) raises :class:`CollateError` / :class:`CollateTypeError` naming the field
(``[0]``, ``['image']``, ``.label``), the two samples that differ and what differs, instead of
whatever NumPy says from deep inside ``np.stack``. The checks run only once stacking has failed,
or are a comparison per sample where stacking would not notice, so a good batch costs nothing extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from flow import _dtype as D
from flow._device import CPU
from flow._tensor import Tensor
from flow.errors import FlowError

__all__ = ["default_collate", "default_convert", "CollateError", "CollateTypeError"]

_HINT = "give the DataLoader a collate_fn that pads or packs them, or make the samples equal size"


class CollateError(FlowError, ValueError):
    """A batch could not be collated: its samples differ in shape, length or keys.

    ``field`` names where in the sample (``""`` for the sample itself), ``samples`` the positions in the
    batch of the two samples that differ (``None`` when one sample alone is at fault).
    """

    def __init__(self, message: str, field: str = "", samples: tuple[int, ...] | None = None) -> None:
        self.field, self.samples = field, samples
        super().__init__(message)

    def __reduce__(self):  # rebuilt as it was in a DataLoader worker's parent
        return (type(self), (str(self), self.field, self.samples))


class CollateTypeError(CollateError, TypeError):
    """A batch could not be collated: a sample holds a type that cannot become a tensor, or samples differ in type."""


def _where(field: str) -> str:
    return f"field {field} of the samples" if field else "the samples"


def _np_to_tensor(a: np.ndarray, field: str = "") -> Tensor:
    try:
        dt = D.NP_TO_DTYPE[a.dtype]
    except KeyError:
        raise CollateTypeError(
            f"default_collate: cannot make a tensor of {_where(field)}: NumPy dtype {a.dtype} has no flow dtype", field
        ) from None
    return Tensor._make(a, dt, CPU)


def _type_name(x) -> str:
    if isinstance(x, np.ndarray):
        return f"a NumPy array of dtype {x.dtype} and shape {x.shape}"
    if isinstance(x, Tensor):
        return f"a tensor of dtype {x.dtype} and shape {tuple(x.shape)}"
    return type(x).__name__


def _first_other(batch, same) -> int | None:
    """Index of the first sample for which ``same(sample)`` is false (None if all agree)."""
    for k in range(1, len(batch)):
        if not same(batch[k]):
            return k
    return None


def _stack_tensors(batch, field: str) -> Tensor:
    elem = batch[0]
    shape, dtype = tuple(elem.shape), elem.dtype
    for k, t in enumerate(batch):
        if not isinstance(t, Tensor):
            raise CollateTypeError(
                f"default_collate: cannot stack {_where(field)}: sample 0 is a tensor but "
                f"sample {k} is {_type_name(t)}",
                field,
                (0, k),
            )
        if tuple(t.shape) != shape:
            raise CollateError(
                f"default_collate: cannot stack {_where(field)}: tensors must be of equal size, but "
                f"sample 0 has shape {shape} and sample {k} has shape {tuple(t.shape)} ({_HINT})",
                field,
                (0, k),
            )
        if t.dtype is not dtype:
            raise CollateTypeError(
                f"default_collate: cannot stack {_where(field)}: sample 0 has dtype {dtype} and "
                f"sample {k} has dtype {t.dtype}",
                field,
                (0, k),
            )
    out = Tensor._make(np.stack([t.numpy_host() for t in batch]), dtype, CPU)
    return out if elem.device is CPU else out.to(elem.device)


def _stack_arrays(batch, field: str) -> Tensor:
    elem = batch[0]
    if elem.dtype.kind in "OSUV":
        raise CollateTypeError(
            f"default_collate: cannot make a tensor of {_where(field)}: sample 0 is a NumPy "
            f"array of dtype {elem.dtype} (tensors hold numbers)",
            field,
            (0,),
        )
    try:
        stacked = np.stack(batch)
    except (ValueError, TypeError):
        k = _first_other(batch, lambda a: isinstance(a, np.ndarray) and a.shape == elem.shape)
        if k is None:
            raise
        other = batch[k]
        if not isinstance(other, np.ndarray):
            raise CollateTypeError(
                f"default_collate: cannot stack {_where(field)}: sample 0 is {_type_name(elem)} "
                f"but sample {k} is {_type_name(other)}",
                field,
                (0, k),
            ) from None
        raise CollateError(
            f"default_collate: cannot stack {_where(field)}: arrays must be of equal size, but "
            f"sample 0 has shape {elem.shape} and sample {k} has shape {other.shape} ({_HINT})",
            field,
            (0, k),
        ) from None
    if stacked.dtype.kind in "OSUV":
        k = _first_other(batch, lambda a: isinstance(a, np.ndarray) and a.dtype.kind not in "OSUV")
        raise CollateTypeError(
            f"default_collate: cannot make a tensor of {_where(field)}: sample {k} is {_type_name(batch[k])}",
            field,
            (k,),
        )
    return _np_to_tensor(stacked, field)


_PY_KINDS = {"b": np.bool_, "i": np.int64, "u": np.int64, "f": np.float64}  # Python scalars -> bool, int64, float64
_NUMBER_TYPES = (bool, int, float, np.number, np.bool_)
_INT64 = np.iinfo(np.int64)


def _numbers(batch, field: str) -> Tensor:
    """Scalars: NumPy scalars keep their dtype; Python bools become bool, ints int64, floats (or ints
    mixed with floats, as in PyTorch, never truncated) float64."""
    numpy_scalars = isinstance(batch[0], np.generic)
    try:
        a = np.asarray(batch)
    except (ValueError, TypeError, OverflowError):
        a = None
    if a is not None and a.ndim == 1:
        if numpy_scalars and a.dtype in D.NP_TO_DTYPE:
            return _np_to_tensor(a, field)
        kind = a.dtype.kind
        if not numpy_scalars and kind in _PY_KINDS and not (kind == "u" and a.size and a.max() > _INT64.max):
            return _np_to_tensor(a.astype(_PY_KINDS[kind], copy=False), field)
    for k, x in enumerate(batch):
        if not isinstance(x, _NUMBER_TYPES):
            raise CollateTypeError(
                f"default_collate: cannot make a tensor of {_where(field)}: sample 0 is a number "
                f"({type(batch[0]).__name__}) but sample {k} is {_type_name(x)}",
                field,
                (0, k),
            )
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and not _INT64.min <= int(x) <= _INT64.max:
            raise CollateTypeError(
                f"default_collate: cannot make a tensor of {_where(field)}: sample {k} is {x}, "
                "which does not fit in int64",
                field,
                (k,),
            )
    dtype = a.dtype if a is not None else "object"
    raise CollateTypeError(
        f"default_collate: cannot make a tensor of {_where(field)}: the numbers make a NumPy "
        f"array of dtype {dtype}, which has no flow dtype",
        field,
    )


def _mapping(batch, field: str):
    """Field by field, by the keys of the first sample (as PyTorch's; keys only later samples have are not
    collated); a sample that lacks one, or is no mapping, is diagnosed only once gathering failed."""
    elem = batch[0]
    out = {}
    for key in elem:
        try:
            values = [d[key] for d in batch]
        except (KeyError, TypeError, IndexError):
            _diagnose_mapping(batch, field, key)
            raise
        out[key] = _collate(values, f"{field}[{key!r}]")
    try:
        return type(elem)(out)
    except TypeError:
        return out


def _diagnose_mapping(batch, field: str, key) -> None:
    elem = batch[0]
    for k, d in enumerate(batch):
        if not isinstance(d, Mapping):
            raise CollateTypeError(
                f"default_collate: cannot collate {_where(field)}: sample 0 is a "
                f"{type(elem).__name__} but sample {k} is {_type_name(d)}",
                field,
                (0, k),
            )
        if key not in d:
            missing = [x for x in elem if x not in d]
            raise CollateError(
                f"default_collate: cannot collate {_where(field)}: sample {k} lacks {missing} "
                f"compared with sample 0 (keys {list(elem)})",
                field,
                (0, k),
            )


def _sequence(batch, field: str):
    elem = batch[0]
    n = len(elem)
    elem_type = type(elem)
    for k, s in enumerate(batch):
        if type(s) is not elem_type and (isinstance(s, (str, bytes)) or not isinstance(s, Sequence)):
            raise CollateTypeError(
                f"default_collate: cannot collate {_where(field)}: sample 0 is a "
                f"{type(elem).__name__} but sample {k} is {_type_name(s)}",
                field,
                (0, k),
            )
        if len(s) != n:
            raise CollateError(
                f"default_collate: cannot collate {_where(field)}: each element in list of batch "
                f"should be of equal size, but sample 0 has {n} items and sample {k} has {len(s)} "
                f"({_HINT})",
                field,
                (0, k),
            )
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(_collate([s[i] for s in batch], f"{field}.{name}") for i, name in enumerate(elem._fields)))
    transposed = [_collate([s[i] for s in batch], f"{field}[{i}]") for i in range(n)]
    if isinstance(elem, tuple):
        return transposed
    try:
        return type(elem)(transposed)
    except TypeError:
        return transposed


def _collate(batch, field: str):
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _stack_tensors(batch, field)
    if isinstance(elem, np.ndarray):
        return _stack_arrays(batch, field)
    if isinstance(elem, _NUMBER_TYPES):
        return _numbers(batch, field)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, Mapping):
        return _mapping(batch, field)
    if isinstance(elem, Sequence):
        return _sequence(batch, field)
    raise CollateTypeError(
        f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        f"found {type(elem).__name__} in {_where(field)}",
        field,
        (0,),
    )


def default_collate(batch):
    """Stack a list of samples into a batch, recursively.

    Flow tensors and NumPy arrays are stacked into a tensor with a new first dimension; Python
    bools become a bool tensor, ints an int64 tensor, floats (or ints mixed with floats) a float64
    tensor; strings stay a list; dicts, (named) tuples and lists are collated field by field.
    Samples that cannot be stacked raise :class:`CollateError` (a ``ValueError``) or
    :class:`CollateTypeError` (a ``TypeError``) naming the field and the two samples::

        >>> default_collate([np.zeros(3), np.zeros(4)])
        CollateError: default_collate: cannot stack the samples: arrays must be of equal size, but sample 0
        has shape (3,) and sample 1 has shape (4,) (...)
    """
    if len(batch) == 0:
        raise CollateError("default_collate: the batch is empty")
    return _collate(batch, "")


def default_convert(data):
    """Without batching (``batch_size=None``): NumPy arrays become tensors, containers are converted recursively."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "OSUV":
        return _np_to_tensor(data)
    if isinstance(data, np.generic) and not isinstance(data, (np.str_, np.bytes_)):
        return _np_to_tensor(np.asarray(data))
    if isinstance(data, Mapping):
        try:
            return type(data)({k: default_convert(v) for k, v in data.items()})
        except TypeError:
            return {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(default_convert(d) for d in data)
    return data
