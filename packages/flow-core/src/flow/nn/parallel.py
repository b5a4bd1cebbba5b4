"""``flow.nn.parallel``: data-parallel wrappers, provided by flow-dist.

``flow.nn.parallel.DistributedDataParallel(module, bucket_size_mb=25)`` averages the gradients of
the replicas of ``module`` on every process of the job (see flow-dist's ``flow_dist.ddp``);
without flow-dist it raises FeatureNotInstalledError naming the package.
"""

from __future__ import annotations

from typing import Any

from flow import provided


def __getattr__(name: str) -> Any:
    if name == "DistributedDataParallel":
        return provided.require("nn.parallel.DistributedDataParallel", "flow.nn.parallel.DistributedDataParallel")
    raise AttributeError(f"module 'flow.nn.parallel' has no attribute '{name}'")
