"""The ``amp`` entry point of flow-amp (group ``flow.plugins``).

flow's plugin manager imports this module and runs the hooks it defines. It
defines none yet; it will register, once written:

- ``flow_register_tables``: the ``amp_color`` rule table (op name -> allow,
  deny, infer or clear), which any op package may fill;
- ``flow_register_rules``: the colours of the core ops;
- ``flow_register_passes``: the AMP graph pass, which inserts casts only at
  colour boundaries.
"""
