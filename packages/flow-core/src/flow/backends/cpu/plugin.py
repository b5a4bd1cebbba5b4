"""Built-in plugin ``flow.cpu``: the ``cpu`` device type and native CPU kernels.

The generic NumPy kernels (registered by ``flow.ops``) serve the CPU; this
plugin overrides the hot ones with native kernels from ``flow._C`` when the
extension is built, and fills the graph pass tables for ``cpu`` (:mod:`flow.backends.cpu.fusion`).
"""

from __future__ import annotations

from flow.plugins import hookimpl
from flow.registry.devices import CPU_DEVICE_TYPE


@hookimpl
def flow_register_device_types(registry) -> None:
    registry.register_device_type(CPU_DEVICE_TYPE)


@hookimpl
def flow_register_kernels(registry) -> None:
    from flow.backends.cpu import fusion, kernels, lowp

    kernels.register(registry)
    lowp.register(registry)
    fusion.register_kernels(registry)


@hookimpl
def flow_register_rules(registry) -> None:
    """The CPU's rows of the graph pass tables (fusion lowering to C, NumPy arenas)."""
    from flow.backends.cpu import fusion

    fusion.register_rules(registry)
