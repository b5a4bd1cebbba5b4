"""Built-in plugin ``flow.ops``: registers the core's ops and their reference (generic) kernels.

It uses the same hooks as any third-party plugin; the specs come from the
``defop``/``kernel`` records the op modules make at import.
"""

from __future__ import annotations

import importlib

from flow.plugins import hookimpl

# Every module that declares core ops; importing them fills the spec lists.
OP_MODULES = (
    "flow.ops.conversion",
    "flow.ops.arith",
    "flow.ops.unary",
    "flow.ops.clamp_where",
    "flow.ops.compare",
    "flow.ops.reduction",
    "flow.ops.reduction_minmax",
    "flow.ops.reduction_stats",
    "flow.ops.movement",
    "flow.ops.linalg",
    "flow.ops.sorting",
    "flow.ops.shape_ops",
    "flow.ops.indexing",
    "flow.ops.views", "flow.ops.subscript", "flow.ops.padding",
    "flow.ops.nn_conv",
    "flow.ops.nn_pool",
    "flow.ops.nn_norm",
    "flow.ops.nn_loss",
    "flow.ops.nn_bce",
    "flow.ops.nn_misc",
)


def _import_all() -> None:
    for m in OP_MODULES:
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
