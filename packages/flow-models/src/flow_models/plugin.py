"""The ``models`` entry point of flow-models (group ``flow.plugins``).

flow's plugin manager imports this module and runs the hooks it defines. It
defines none yet; it will register, once written:

- ``flow_add_hookspecs``: a hook through which other packages add models to
  the zoo by name;
- ``flow_register_ops``: the few model-specific fused ops the zoo needs that
  the core does not have (each with its meta rule, gradient and samples for
  ``flow.testing.opcheck``);
- ``flow_register_rules``: SBP rules and AMP colours for those ops, when
  flow-dist and flow-amp are installed.
"""
