"""``flow-train --nproc N``: data-parallel training on N processes (flow-dist with MPI).

``flow-train MODEL --nproc N ...`` starts itself again under ``flow-launch -n N``; each rank then
trains a DistributedDataParallel replica on its share of every batch: ``--batch-size`` stays the
batch of one step over all ranks (each rank takes ``batch_size / N`` consecutive samples of it, so
the run sees the samples a single process would, step for step, and an incomplete last batch of
an epoch is dropped). Every rank evaluates; rank 0 alone logs and writes the run folder
(checkpoints, metrics, plots).
"""

from __future__ import annotations

import os

import numpy as np

from flow_models.train.config import TrainError

__all__ = ["world", "relaunch", "ShardSampler", "wrap", "mean_over_ranks"]


def world() -> tuple[int, int]:
    """``(rank, world size)`` of this process (0 of 1 without an MPI launcher)."""
    for r, s in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if s in os.environ:
            return int(os.environ.get(r, 0)), int(os.environ[s])
    return 0, 1


def relaunch(nproc: int, argv: list[str]) -> int:
    """Run ``flow-train argv`` on ``nproc`` ranks (flow-launch); returns the job's exit status."""
    try:
        from flow_dist.launch import main as launch
    except ImportError:
        raise TrainError("--nproc needs flow-dist with MPI: pip install flow-dist[mpi]") from None
    return launch(["-n", str(nproc), "-m", "flow_models.train", *argv])


def check(cfg, size: int) -> None:
    if cfg.nproc != size:
        raise TrainError(f"--nproc {cfg.nproc}, but this job has {size} processes")
    if cfg.graph:
        raise TrainError("--nproc > 1 runs eagerly (DistributedDataParallel); drop --graph")
    if cfg.batch_size % size:
        raise TrainError(f"--batch-size {cfg.batch_size} must be divisible by --nproc {size}")
    if cfg.device != "cpu":
        raise TrainError("--nproc > 1 runs on the CPU (NCCL comes with flow-cuda)")


class ShardSampler:
    """This rank's part of each batch of an :class:`EpochSampler`'s order (full batches only)."""

    def __init__(self, base, batch_size: int, rank: int, size: int) -> None:
        self.base, self.batch, self.rank, self.size = base, batch_size, rank, size
        self.per_rank = batch_size // size

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.base.set_epoch(epoch, start)

    def _mine(self) -> np.ndarray:
        order = self.base.order()[self.base.start :]
        full = len(order) // self.batch * self.batch
        batches = order[:full].reshape(-1, self.batch)
        return batches[:, self.rank * self.per_rank : (self.rank + 1) * self.per_rank].reshape(-1)

    def __iter__(self):
        return iter(self._mine().tolist())

    def __len__(self) -> int:
        return len(self._mine())


def wrap(model):
    import flow

    return flow.nn.parallel.DistributedDataParallel(model)


def mean_over_ranks(value: float) -> float:
    from flow_dist.comm.backend import get_backend

    return float(get_backend("cpu").all_reduce(np.array([value], dtype=np.float64), op="avg")[0])


def quiet(*args, **kwargs) -> None:
    """What ranks other than 0 log: nothing."""


def on_main() -> bool:
    return world()[0] == 0
