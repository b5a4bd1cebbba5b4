"""flow-dist: global tensors, SBP and parallel training for flow.

Owns the communication backends (MPI through mpi4py, NCCL through CuPy),
placements and SBP signatures, boxing, DDP, tensor and pipeline parallelism,
ZeRO, the launcher and the cost model. flow finds it through the
``flow.plugins`` entry point ``dist`` (module :mod:`flow_dist.plugin`). It is a
skeleton for now: the plugin registers nothing yet.

mpi4py is an optional dependency (``pip install flow-dist[mpi]``).
"""

__version__ = "0.1.0"
