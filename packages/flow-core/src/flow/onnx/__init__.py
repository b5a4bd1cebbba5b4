"""ONNX export: ``flow.onnx.export(model, args, f, ...)`` with ``torch.onnx.export``'s signature.

The op of every node of the traced forward is written as ONNX nodes by its rule in the rule table
``"onnx_export"`` (declared by the ``flow.onnx`` plugin on the first export). A rule is
``rule(node, ctx) -> list[onnx.NodeProto]``: ``node`` is the :class:`~flow.graph.ir.Node`
(``node.inputs``, ``node.attrs``, ``node.outputs``), ``ctx`` the :class:`ExportContext`:
``ctx.name(value)`` is the ONNX name of an input (parameters and constants become initializers),
``ctx.out(node, i)`` the name output ``i`` must get, ``ctx.const(array)`` / ``ctx.ints(list)`` /
``ctx.scalar(x, like)`` add initializers, ``ctx.fresh(hint)`` gives a temporary name and
``ctx.error(msg)`` an error naming the node. An op package adds rules for its ops in its plugin::

    @hookimpl
    def flow_register_rules(registry):
        registry.register_rule("onnx_export", "my_op", my_op_to_onnx)

Rules for the table wait in the registry until it is declared, so such a package needs neither
``onnx`` nor an export to have run. Importing this package does not import ``onnx``.
"""

from __future__ import annotations

from flow.onnx._context import ExportContext, OnnxExportError
from flow.onnx.export import TABLE, export, export_table

__all__ = ["export", "export_table", "ExportContext", "OnnxExportError", "TABLE"]
