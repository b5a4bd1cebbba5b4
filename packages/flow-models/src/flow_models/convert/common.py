"""Loading foreign state dicts into zoo models: reading, renaming, shape checks and clear errors.

Every converter follows the same steps: read the file into ``{name: numpy array}``
(:func:`read_state_dict`, safetensors only: nothing is unpickled and nothing is downloaded),
map each checkpoint key to a model key (possibly transforming the array, e.g. HF GPT-2's
transposed ``Conv1D`` weights), then :func:`load_mapped` checks every shape against the model
and copies the arrays in, raising :class:`ConversionError` that names the keys and both shapes.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import ml_dtypes  # noqa: F401  - registers bfloat16 with NumPy before safetensors reads a bf16 file
import numpy as np

import flow
from flow import nn
from flow.errors import FlowError

__all__ = ["ConversionError", "LoadResult", "Mapped", "read_state_dict", "load_mapped", "tied_groups"]


class ConversionError(FlowError, ValueError):
    """A checkpoint does not fit the model: a shape differs, a key is missing or unexpected."""


@dataclass
class Mapped:
    """One checkpoint entry mapped onto a model key. ``note`` says how the array was transformed."""

    source: str
    array: np.ndarray
    source_shape: tuple
    note: str = ""


@dataclass
class LoadResult:
    """What a converter did: model keys it filled, model keys left as they were (``missing``, allowed
    ones only) and checkpoint keys it did not use (``skipped``, with the reason)."""

    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _to_numpy(value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, flow.Tensor):
        return value.detach().numpy()
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def read_state_dict(source) -> dict[str, np.ndarray]:
    """``{name: numpy array}`` from a safetensors file path or from a mapping of arrays/tensors."""
    if isinstance(source, Mapping):
        return {str(k): _to_numpy(v) for k, v in source.items()}
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"expected a safetensors file path or a state dict, got {type(source).__name__}")
    path = os.fspath(source)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no checkpoint file at '{path}' (converters read local safetensors files; nothing is downloaded)"
        )
    import safetensors.numpy

    try:
        return dict(safetensors.numpy.load_file(path))
    except Exception as e:  # safetensors raises its own error types for corrupt or non-safetensors files
        raise ConversionError(f"'{path}' could not be read as a safetensors file: {type(e).__name__}: {e}") from e


def tied_groups(model: nn.Module) -> list[set[str]]:
    """Sets of parameter names that share one Parameter (tied embeddings), each with at least two names."""
    by_id: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), set()).add(name)
    return [names for names in by_id.values() if len(names) > 1]


def _shape(t) -> tuple:
    return tuple(int(s) for s in t.shape)


def load_mapped(
    model: nn.Module,
    mapped: dict[str, Mapped],
    *,
    what: str,
    skipped: dict[str, str] | None = None,
    strict: bool = True,
    allow_missing: tuple[str, ...] = ("*num_batches_tracked",),
    unmapped_error: Callable[[list[str]], str] | None = None,
) -> LoadResult:
    """Check ``mapped`` (model key -> :class:`Mapped`) against ``model`` and copy it in.

    Raises :class:`ConversionError` for any shape mismatch (naming the checkpoint key, the model
    key and both shapes) and, with ``strict``, for model keys without a value (except those
    matching ``allow_missing`` glob patterns, or tied to a loaded key) and mapped keys the model
    does not have.
    """
    target = model.state_dict()
    result = LoadResult(skipped=dict(skipped or {}))
    unexpected = sorted(k for k in mapped if k not in target)
    if unexpected and strict:
        srcs = ", ".join(f"'{mapped[k].source}' (as '{k}')" for k in unexpected[:8])
        more = f" and {len(unexpected) - 8} more" if len(unexpected) > 8 else ""
        raise ConversionError(f"{what}: checkpoint keys the model does not have: {srcs}{more}")
    for k in unexpected:
        result.skipped[mapped[k].source] = "no such key in the model"
    mismatched = []
    for key, m in mapped.items():
        if key in target and _shape(m.array) != _shape(target[key]):
            how = f" ({m.note}: {_shape(m.array)})" if m.note else ""
            mismatched.append(
                f"checkpoint key '{m.source}' has shape {m.source_shape}{how} but model key '{key}' "
                f"has shape {_shape(target[key])}"
            )
    if mismatched:
        raise ConversionError(f"{what}: shape mismatch: " + "; ".join(mismatched))
    for group in tied_groups(model):  # one name of a tied group given is enough; two must agree
        given = sorted(k for k in group if k in mapped)
        for other in given[1:]:
            if not np.array_equal(mapped[other].array, mapped[given[0]].array):
                raise ConversionError(
                    f"{what}: the model ties '{given[0]}' and '{other}' but the checkpoint's "
                    f"'{mapped[given[0]].source}' and '{mapped[other].source}' differ"
                )
            result.skipped[mapped.pop(other).source] = f"tied to '{given[0]}'"
        if given:
            for k in group - {given[0]}:
                target.pop(k, None)
    missing = [k for k in target if k not in mapped]
    required = [k for k in missing if not any(fnmatch.fnmatchcase(k, pat) for pat in allow_missing)]
    if required and strict:
        msg = unmapped_error(required) if unmapped_error else ""
        shown = ", ".join(f"'{k}'" for k in required[:8]) + (
            f" and {len(required) - 8} more" if len(required) > 8 else ""
        )
        raise ConversionError(f"{what}: the checkpoint has no value for model key(s) {shown}{msg}")
    result.missing = missing
    state = {}
    for key, m in mapped.items():
        if key not in target:
            continue
        arr = m.array
        dt = target[key].dtype
        state[key] = np.ascontiguousarray(arr.astype(dt.np if hasattr(dt, "np") else arr.dtype, copy=False))
        result.loaded.append(key)
    model.load_state_dict(state, strict=False)
    return result
