"""Model parallelism on global tensors: tensor parallelism (:mod:`flow_dist.parallel.tensor_parallel`)
and a count of the collectives a step runs (:func:`count_collectives`)."""

from flow_dist.parallel.tensor_parallel import (
    STYLES,
    ColwiseParallel,
    ParallelStyle,
    Replicate,
    RowwiseParallel,
    TensorParallelError,
    VocabParallel,
    gpt_plan,
    tensor_parallel,
)
from flow_dist.parallel.trace import count_collectives

__all__ = [
    "STYLES",
    "ColwiseParallel",
    "ParallelStyle",
    "Replicate",
    "RowwiseParallel",
    "TensorParallelError",
    "VocabParallel",
    "count_collectives",
    "gpt_plan",
    "tensor_parallel",
]
