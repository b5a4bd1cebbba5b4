"""The ``dist`` entry point of flow-dist (group ``flow.plugins``).

flow's plugin manager imports this module and runs its hooks:

- ``flow_add_hookspecs``: :mod:`flow_dist.hookspecs` (``flow_dist_register_rules``), for plugins
  that add SBP rules only where flow-dist is installed;
- ``flow_register_tables``: the ``"sbp"`` rule table (op name -> rule, see :mod:`flow_dist.rules`);
- ``flow_register_rules``: the SBP rules of flow-core's ops;
- ``flow_register_api``: ``flow.placement``, ``flow.sbp``, ``flow.env``, ``flow.comm``,
  ``Tensor.to_global`` / ``to_local``, ``nn.Module.to_global``, the factories' ``placement=``;
  and the global array kind with its handler (:mod:`flow_dist.handler`).

mpi4py and CuPy (for NCCL) are only imported when a communicator is created, never here.
"""

from __future__ import annotations

from flow.plugins import hookimpl


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
    from flow import array_kinds
    from flow_dist import api, checkpoint, comm, env, sbp
    from flow_dist.global_array import GlobalArray
    from flow_dist.handler import global_handler
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
    array_kinds.register_array_kind(GlobalArray, global_handler)
