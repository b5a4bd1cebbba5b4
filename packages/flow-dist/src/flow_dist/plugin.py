"""The ``dist`` entry point of flow-dist (group ``flow.plugins``).

flow's plugin manager imports this module and runs the hooks it defines. It
defines none yet; it will register, once written:

- ``flow_add_hookspecs``: flow-dist's own hook specs, so other plugins (a
  third-party op package) can contribute SBP rules for their ops;
- ``flow_register_tables``: the ``sbp`` rule table (op name -> the SBP
  signatures the op supports);
- ``flow_register_rules``: the SBP rules of the core ops;
- ``flow_register_passes``: SBP inference and boxing insertion in graph mode,
  and the pipeline-parallel stage split.

mpi4py and CuPy (for NCCL) must only be imported when a communicator is
created, never at module import.
"""
