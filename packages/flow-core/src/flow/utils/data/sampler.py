"""Samplers: which indices a DataLoader reads, in which order, in which batches."""

from __future__ import annotations

import math
import os
from typing import Iterator, Sequence

import numpy as np

from flow._random import Generator, default_generator

__all__ = [
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "DistributedSampler",
]


def _fresh_generator(generator: Generator | None) -> Generator:
    """``generator`` itself, or a new one seeded from flow's default generator (as PyTorch does)."""
    if generator is not None:
        if not isinstance(generator, Generator):
            raise TypeError(f"generator must be a flow.Generator, got {type(generator).__name__}")
        return generator
    seed = int(default_generator._rng.integers(0, 2**63 - 1))
    return Generator().manual_seed(seed)


class Sampler:
    """Base class: an iterable of indices (or of lists of indices, for a batch sampler)."""

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices, or ``num_samples`` draws with ``replacement``.

    Each ``iter()`` draws a new order from ``generator`` (a :class:`flow.Generator`); without one,
    a generator seeded from flow's default generator is made per iteration.
    """

    def __init__(
        self, data_source, replacement: bool = False, num_samples: int | None = None, generator: Generator | None = None
    ) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        rng = _fresh_generator(self.generator)._rng
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from rng.integers(0, n, size=32).tolist()
            yield from rng.integers(0, n, size=self.num_samples % 32).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from rng.permutation(n).tolist()
            yield from rng.permutation(n).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order."""

    def __init__(self, indices: Sequence[int], generator: Generator | None = None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        rng = _fresh_generator(self.generator)._rng
        for i in rng.permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator: Generator | None = None) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {w.shape}")
        if np.any(w < 0) or not np.all(np.isfinite(w)) or w.sum() <= 0:
            raise ValueError("weights must be finite, non-negative and not all zero")
        if not replacement and num_samples > np.count_nonzero(w):
            raise ValueError("cannot draw more samples than there are nonzero weights without replacement")
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        rng = _fresh_generator(self.generator)._rng
        p = self.weights / self.weights.sum()
        yield from rng.choice(len(p), size=self.num_samples, replace=self.replacement, p=p).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Group the indices of ``sampler`` into lists of ``batch_size`` (the last one shorter unless ``drop_last``)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size


def _dist_env(name: str, *keys: str) -> int:
    for k in keys:
        if k in os.environ:
            return int(os.environ[k])
    raise ValueError(
        f"DistributedSampler: {name} was not given and could not be found in the environment "
        f"({', '.join(keys)}); pass num_replicas= and rank= explicitly"
    )


class DistributedSampler(Sampler):
    """The share of the indices of rank ``rank`` out of ``num_replicas`` (data parallel training).

    Every rank sees a disjoint set of ``ceil(len / num_replicas)`` indices (padded by repeating
    indices, or truncated with ``drop_last``); with ``shuffle`` the order is a permutation seeded
    by ``seed + epoch``, the same on every rank: call :meth:`set_epoch` at the start of each
    epoch. Defaults for ``num_replicas`` / ``rank`` come from ``WORLD_SIZE`` / ``RANK`` (or Open
    MPI's / PMI's variables).
    """

    def __init__(
        self,
        dataset,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None:
            num_replicas = _dist_env("num_replicas", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
        if rank is None:
            rank = _dist_env("rank", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
        if num_replicas <= 0:
            raise ValueError(f"num_replicas must be positive, got {num_replicas}")
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            g = Generator().manual_seed(self.seed + self.epoch)
            indices = g._rng.permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad <= len(indices):
                indices += indices[:pad]
            else:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[: self.total_size]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch, so that each epoch gets a different (but rank-consistent) shuffle."""
        self.epoch = epoch
