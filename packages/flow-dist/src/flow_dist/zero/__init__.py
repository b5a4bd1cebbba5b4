"""ZeRO (Rajbhandari et al.): optimizer state, gradients and parameters sharded over the
data-parallel ranks.

- :class:`ZeroRedundancyOptimizer` (torch.distributed.optim's name): wraps any flow optimizer on
  local tensors; ``stage=1`` shards the optimizer state (gradients averaged by
  ``flow.nn.parallel.DistributedDataParallel``), ``stage=2`` also the gradients (it reduce-scatters
  them itself during backward), ``stage=3`` also the parameters between steps (gathered by forward
  pre-hooks of the module's layers).
- :func:`memory_report`: bytes of parameters, gradients and optimizer state this rank holds.
"""

from flow_dist.zero.memory import memory_report
from flow_dist.zero.optimizer import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer", "memory_report"]
