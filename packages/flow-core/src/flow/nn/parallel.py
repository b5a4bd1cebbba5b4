"""``flow.nn.parallel``: data-parallel wrappers.

``flow.nn.parallel.DataParallel`` (also ``flow.nn.DataParallel``) is PyTorch's single-process wrapper,
which without an accelerator calls the module unchanged (see :mod:`flow.nn._data_parallel`).
``flow.nn.parallel.DistributedDataParallel(module, bucket_size_mb=25)`` averages the gradients of
the replicas of ``module`` on every process of the job (see flow-dist's ``flow_dist.ddp``);
without flow-dist it raises FeatureNotInstalledError naming the package.
"""

from __future__ import annotations

from typing import Any

from flow import provided


def __getattr__(name: str) -> Any:
    if name == "DataParallel":
        # imported on first use: flow.nn imports this module before its layers exist
        from flow.nn._data_parallel import DataParallel

        globals()["DataParallel"] = DataParallel
        return DataParallel
    if name == "DistributedDataParallel":
        return provided.require("nn.parallel.DistributedDataParallel", "flow.nn.parallel.DistributedDataParallel")
    raise AttributeError(f"module 'flow.nn.parallel' has no attribute '{name}'")
