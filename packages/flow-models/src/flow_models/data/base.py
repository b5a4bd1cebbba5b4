"""What every dataset reader of flow-models returns, and the error it raises.

A reader builds a :class:`DatasetSplits`: a ``train`` and a ``test`` dataset (each a
``flow.utils.data.Dataset`` of NumPy samples, which ``DataLoader``'s default collation stacks
into tensors), the ``task`` the data is for (which loss and which metric ``flow-train`` uses),
and ``model_args``: what a model needs to fit the data (number of classes, vocabulary size,
input size...), under the names of the zoo's config fields.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flow.errors import FlowError
from flow.utils.data import Dataset

__all__ = ["DataError", "DatasetSplits", "ArrayDataset", "TASKS", "split_indices", "stable_fraction", "data_root"]

# classification: (input, label) -> cross-entropy, accuracy
# lm: (tokens, next tokens) -> cross-entropy per token, perplexity
# recsys: (dense, sparse, label) -> binary cross-entropy, AUC
# ctc: (features, feature length, targets, target length) -> CTC loss, token error rate
TASKS = ("classification", "lm", "recsys", "ctc")


class DataError(FlowError, OSError):
    """A data file is missing, unreadable or corrupt; the message names the file and what is wrong."""

    def __init__(self, path: str | os.PathLike | None, message: str) -> None:
        self.path = None if path is None else str(path)
        super().__init__(f"{self.path}: {message}" if self.path else message)


@dataclass
class DatasetSplits:
    """A dataset ready to train on: ``train`` and ``test`` splits, the ``task`` and what the model needs.

    >>> splits = flow_models.get_dataset("digits")
    >>> x, y = splits.train[0]; x.shape, splits.model_args
    ((1, 8, 8), {'num_classes': 10, 'in_channels': 1, 'image_size': 8})
    """

    name: str
    task: str
    train: Dataset
    test: Dataset
    model_args: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)  # classes, vocabulary, sample rate... (plain JSON-able values)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"dataset '{self.name}': task must be one of {TASKS}, got {self.task!r}")

    def describe(self) -> str:
        return f"{self.name} ({self.task}): {len(self.train)} train / {len(self.test)} test samples"


class ArrayDataset(Dataset):
    """Samples are rows of equally long NumPy arrays: ``ds[i] == (a[i], b[i], ...)``."""

    def __init__(self, *arrays: np.ndarray) -> None:
        if not arrays:
            raise ValueError("ArrayDataset needs at least one array")
        n = len(arrays[0])
        if any(len(a) != n for a in arrays):
            raise ValueError(f"ArrayDataset: arrays differ in length: {[len(a) for a in arrays]}")
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)

    def subset(self, idx: np.ndarray) -> ArrayDataset:
        return ArrayDataset(*(a[idx] for a in self.arrays))


def split_indices(n: int, test_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A deterministic shuffled train/test split of ``range(n)`` (same seed, same split, on every machine)."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    perm = np.random.Generator(np.random.Philox(seed)).permutation(n)
    n_test = max(1, int(round(n * test_fraction)))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def stable_fraction(key: str) -> float:
    """A number in [0, 1) fixed by ``key``: split membership that does not change when files are added."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:12], 16) / float(1 << 48)


def data_root(root: str | os.PathLike | None, default_name: str) -> Path:
    """``root`` if given, else ``$FLOW_DATA/<default_name>`` (``~/.flow/data`` when FLOW_DATA is unset)."""
    if root is not None:
        return Path(root).expanduser()
    base = os.environ.get("FLOW_DATA") or os.path.join("~", ".flow", "data")
    return Path(base).expanduser() / default_name


def as_int_list(value: Any, n: int, what: str) -> list[int]:
    """``value`` (an int, or a sequence / comma-separated string of ``n`` ints) as a list of ``n`` ints."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
        value = value[0] if len(value) == 1 else value
    if isinstance(value, (int, np.integer, str)):
        return [int(value)] * n
    out = [int(v) for v in value]
    if len(out) != n:
        raise ValueError(f"{what}: expected {n} values, got {len(out)}")
    return out
