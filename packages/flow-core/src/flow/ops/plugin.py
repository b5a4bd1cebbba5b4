"""Built-in plugin ``flow.ops``: registers the core's ops and their reference (generic) kernels.

It uses the same hooks as any third-party plugin; the specs come from the
``defop``/``kernel`` records the op modules make at import.

The op modules are found, not listed: every public module of the ``flow.ops``
package (its directory, walked once when the plugins load) is imported, and
importing one records its ops and kernels. A new op module is picked up by
being there.
``import flow`` is not slowed: nothing here runs before a registry is first used,
and ``import flow`` already imports nearly all of these modules.
"""

from __future__ import annotations

import importlib
import pkgutil

from flow.plugins import hookimpl

# Modules outside the flow.ops package that declare core ops with ``defop`` (dropout declares its mask op
# next to the functions that draw it); names of modules inside it may be listed too, they are imported
# once either way.
OP_MODULES: tuple[str, ...] = ("flow.nn.functional.dropout",)

# Modules of flow.ops that are machinery, not op declarations (underscore modules are skipped too).
_NOT_OP_MODULES = frozenset({"plugin"})


def op_modules() -> list[str]:
    """Every module that may declare core ops: the public modules of ``flow.ops``, then ``OP_MODULES``."""
    import flow.ops

    found = [
        f"flow.ops.{m.name}"
        for m in pkgutil.iter_modules(flow.ops.__path__)
        if not m.ispkg and not m.name.startswith("_") and m.name not in _NOT_OP_MODULES
    ]
    return sorted(found) + [m for m in OP_MODULES if m not in found]


def _import_all() -> None:
    for m in op_modules():
        importlib.import_module(m)


@hookimpl
def flow_register_ops(registry) -> None:
    from flow.ops._define import OP_SPECS

    _import_all()
    for spec in OP_SPECS:
        spec = dict(spec)
        registry.register_op(spec.pop("schema"), spec.pop("meta"), spec.pop("grad"), **spec)


@hookimpl
def flow_register_kernels(registry) -> None:
    from flow.ops._define import KERNEL_SPECS

    for k in KERNEL_SPECS:
        registry.register_kernel(k["op"], k["device"], k["fn"], dtypes=k["dtypes"], name=k["name"])
