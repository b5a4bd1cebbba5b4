"""Data loading (``flow.utils.data``): datasets, samplers and the DataLoader, as in PyTorch."""

from flow.utils.data._worker import WorkerInfo, get_worker_info
from flow.utils.data.collate import CollateError, CollateTypeError
from flow.utils.data.dataloader import DataLoader, DataLoaderWorkerError, default_collate, default_convert
from flow.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from flow.utils.data.sampler import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "DataLoader",
    "DataLoaderWorkerError",
    "CollateError",
    "CollateTypeError",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "WorkerInfo",
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "Subset",
    "ConcatDataset",
    "ChainDataset",
    "random_split",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "DistributedSampler",
]
