"""The hooks a flow plugin can implement (pluggy project name ``flow``).

A plugin is a module (or object) named by an entry point in the group
``flow.plugins``; it implements any subset of these hooks, decorated with
:data:`flow.plugins.hookimpl`. Hooks run once, when a registry is first used,
in this order: ``flow_add_hookspecs``, ``flow_register_device_types``,
``flow_register_ops``, ``flow_register_tables``, ``flow_register_kernels``,
``flow_register_rules``, ``flow_register_passes``, ``flow_register_api``,
``flow_plugin_loaded``.
Each plugin runs a phase before the next phase starts, so a kernel can
target an op from any plugin and a rule can go into any plugin's table.

Example::

    from flow.plugins import hookimpl

    @hookimpl
    def flow_register_ops(registry):
        registry.register_op(schema("my_op", ["x"]), meta=same_as_input, grad=my_grad)
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("flow")


@hookspec
def flow_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Called first. A plugin that owns hooks of its own (a model zoo, a table of
    rules that other plugins fill) adds its hookspec module here with
    ``plugin_manager.add_hookspecs(module)``."""


@hookspec
def flow_register_device_types(registry) -> None:
    """Register device types with ``registry.register_device_type(DeviceType(...))``.

    Called before any op is registered. A device type gives its array module,
    host transfers, allocation and synchronisation."""


@hookspec
def flow_register_ops(registry) -> None:
    """Declare ops with ``registry.register_op(schema, meta, grad, samples=...)``.

    ``meta(*inputs, **attrs)`` receives objects with ``shape``, ``dtype`` and
    ``device`` and returns the same for each output, raising
    :class:`flow.errors.OpError` for invalid input; it must depend on nothing
    else (eager dispatch runs it once per input signature). ``grad(ctx,
    *grad_outputs)`` returns one gradient (a flow Tensor or None) per input,
    written with flow ops. ``samples()`` yields :class:`flow.testing.SampleInput`
    for :func:`flow.testing.opcheck`, which flow-core's tests run over every
    registered op (an op without samples fails them). ``dynamic_shape=True``
    marks an op whose output shape depends on the input values."""


@hookspec
def flow_register_tables(registry) -> None:
    """Declare rule tables this plugin owns with ``registry.declare_table(name)``
    (flow-dist: ``"sbp"``; flow-amp: ``"amp_color"``)."""


@hookspec
def flow_register_kernels(registry) -> None:
    """Attach kernels with ``registry.register_kernel(op, device_type, fn)``.

    A kernel for a slot another plugin holds (same op, device type, dtype and kernel name) must
    say ``override=True`` or give a different ``priority=`` (the higher wins in any load order).

    A kernel takes and returns raw arrays of its device's array module.
    ``device_type="generic"`` registers a factory ``fn(xp) -> kernel`` that
    serves every device whose array module follows NumPy's API."""


@hookspec
def flow_register_rules(registry) -> None:
    """Fill other plugins' tables with ``registry.register_rule(table, op, rule)``.

    A table that no loaded plugin declares (flow-dist's ``"sbp"`` where flow-dist is not
    installed) is no error: the rule is queued and goes into the table when its owner declares
    it; ``python -m flow plugins`` lists the queued ones."""


@hookspec
def flow_register_passes(registry) -> None:
    """Add graph passes with ``registry.register_pass(name, fn, before=..., after=...)``;
    ``fn(ir, config) -> ir``."""


@hookspec
def flow_register_api(registry) -> None:
    """Provide names of the ``flow`` namespace and Tensor/Module methods with
    ``registry.register_api(name, obj)`` (see :mod:`flow.provided`): flow-dist's
    ``flow.placement``, ``flow.sbp``, ``flow.env``, ``flow.comm`` and ``Tensor.to_global``."""


@hookspec
def flow_plugin_loaded(registry) -> None:
    """Called once all plugins have registered; a last chance to check or link entries."""
