"""The ``dist`` entry point of flow-dist (group ``flow.plugins``).

flow's plugin manager imports this module and runs its hooks:

- ``flow_register_ops`` / ``flow_register_kernels``: ``sbp_boxing``, a one-axis conversion as an
  op, which is how a compiled graph holds boxing (:mod:`flow_dist.boxing_op`), and the two ops of
  gradient buckets (:mod:`flow_dist.grad_buckets`);
- ``flow_register_passes``: the ``gradient_buckets`` and ``zero`` graph passes;
- ``flow_register_tables``: the ``"sbp"`` rule table (op name -> rule, see :mod:`flow_dist.rules`),
  which any plugin fills with ``registry.register_rule("sbp", op, rule)`` in its own
  ``flow_register_rules`` (queued until flow-dist loads, so op packages need not depend on it);
- ``flow_register_rules``: the SBP rules of flow-core's ops;
- ``flow_register_api``: ``flow.placement``, ``flow.sbp``, ``flow.env``, ``flow.comm``,
  ``Tensor.to_global`` / ``to_local``, ``nn.Module.to_global``, the factories' ``placement=``;
  and the global array kind with its handler (:mod:`flow_dist.handler`); ``"distributed.impl"``, what
  ``flow.distributed`` (torch.distributed's API) runs on (:mod:`flow_dist.torch_api`).

mpi4py is imported when flow loads its plugins in a process of a multi-process job (started by
mpiexec or flow-launch), so that an exception on one rank aborts the job; a single process never
imports it. CuPy (for NCCL) comes with flow-cuda.
"""

from __future__ import annotations

from flow.plugins import hookimpl


@hookimpl
def flow_register_ops(registry) -> None:
    from flow_dist import boxing_op, grad_buckets

    boxing_op.register(registry)
    grad_buckets.register(registry)
    from flow_dist.zero import buckets as zero_buckets

    zero_buckets.register(registry)  # the reduce-scatter buckets of the zero pass


@hookimpl
def flow_register_kernels(registry) -> None:
    from flow_dist import boxing_op, grad_buckets

    boxing_op.register_kernels(registry)
    grad_buckets.register_kernels(registry)
    from flow_dist.zero import buckets as zero_buckets

    zero_buckets.register_kernels(registry)


@hookimpl
def flow_register_passes(registry) -> None:
    from flow_dist import grad_buckets
    from flow_dist.zero import graph_pass as zero_graph_pass

    grad_buckets.register_pass(registry)
    zero_graph_pass.register_pass(registry)  # ZeRO in graph mode (graph.config.enable_zero)


@hookimpl
def flow_register_tables(registry) -> None:
    from flow_dist.rules import TABLE

    registry.declare_table(TABLE, "SBP signatures of each op on global tensors (flow-dist)")


@hookimpl
def flow_register_rules(registry) -> None:
    from flow_dist.rules import TABLE, core_rules

    for name, rule in core_rules(registry).items():
        if name in registry.ops:
            registry.register_rule(TABLE, name, rule)


@hookimpl
def flow_register_api(registry) -> None:
    import os

    from flow import array_kinds
    from flow.graph.tracer import register_library_dir
    from flow_dist import api, auto_parallel, checkpoint, comm, dcp, env, sbp, torch_api
    from flow_dist.ddp import DistributedDataParallel
    from flow_dist.global_array import GlobalArray
    from flow_dist.handler import global_handler
    from flow_dist.pipeline import graph as pipeline_graph
    from flow_dist.placement import placement

    registry.register_api("placement", placement)
    registry.register_api("sbp", sbp)
    registry.register_api("env", env)
    registry.register_api("comm", comm)
    registry.register_api("Tensor.to_global", api.to_global)
    registry.register_api("Tensor.to_local", api.to_local)
    registry.register_api("Module.to_global", api.module_to_global)
    registry.register_api("global_factory", api.global_factory)
    registry.register_api("global_constant", api.global_constant)
    registry.register_api("global_load", checkpoint.global_load)
    registry.register_api("nn.parallel.DistributedDataParallel", DistributedDataParallel)
    registry.register_api("distributed.impl", torch_api)  # what flow.distributed (torch's API) runs on
    registry.register_api("distributed.checkpoint", dcp)  # flow.distributed.checkpoint runs on it
    registry.register_api("graph.auto_parallel", auto_parallel.graph_prepare)  # graph.config.enable_auto_parallel
    registry.register_api("graph.pipeline", pipeline_graph.run_pipeline_graph)  # blocks with set_stage
    array_kinds.register_array_kind(GlobalArray, global_handler)
    register_library_dir(os.path.dirname(os.path.abspath(__file__)))  # graph nodes name the user's lines
    if env.get_world_size() > 1:
        # under mpiexec: initialise MPI now; `python -m mpi4py` aborts the whole job on an uncaught
        # exception only once MPI is imported, and flow imports it at the first communication
        import mpi4py.MPI  # noqa: F401
