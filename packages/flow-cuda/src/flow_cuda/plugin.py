"""The ``cuda`` entry point of flow-cuda (group ``flow.plugins``).

flow's plugin manager imports this module and runs the hooks it defines. It
defines none yet; it will register, once written:

- ``flow_register_device_types``: the ``cuda`` device type with CuPy as its
  array module, a memory pool, streams, host transfers and synchronisation,
  reporting itself unavailable (not failing to import) where CuPy or a GPU is
  missing;
- ``flow_register_kernels``: CUDA kernels that override the generic NumPy-API
  kernels where a dedicated implementation is faster (cuBLAS/cuDNN calls,
  fused softmax, layer norm, attention, cross-entropy, optimizer updates);
- ``flow_register_rules``: the ``cuda`` rows of the graph pass tables
  (:mod:`flow.graph.pass_tables`): a ``FusionRule`` lowering elementwise groups
  to one NVRTC-compiled kernel each, an ``ArenaRule`` over the CuPy memory
  pool, and CUDA-graph capture of compiled plans as a ``PlanPhase``.

CuPy must only be imported inside those hooks or lazily, never at module import.
"""
