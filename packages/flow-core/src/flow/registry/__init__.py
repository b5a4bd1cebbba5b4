"""The registries: device types, ops, kernels, rule tables and passes.

Plugins fill them from their hooks (see :mod:`flow.plugins.hookspecs`); the
registry remembers which plugin made every entry. Reading a registry loads
plugins lazily on first use.
"""

from __future__ import annotations

from typing import Any, Callable

from flow._fpstate import quiet_module
from flow.errors import KernelNotFoundError, RegistrationError
from flow.registry.devices import DeviceType
from flow.registry.ops import Attr, Input, KernelEntry, OpDef, OpSchema, schema
from flow.registry.passes import PassEntry, PassRegistry
from flow.registry.tables import RuleTable

__all__ = [
    "Attr", "Input", "OpSchema", "OpDef", "DeviceType", "RuleTable", "PassEntry", "Registry",
    "REGISTRY", "schema", "get_op", "get_device_type",
]

# Devices whose kernels live in a known distribution: used to tell a user what to install.
KNOWN_DEVICE_PACKAGES = {"cuda": "flow-cuda"}


# name -> OpHandle: the Python functions' lazy references to ops (see flow.ops._define).
OP_HANDLES: dict = {}


class Registry:
    """All registries of one process. Hooks receive this object as ``registry``."""

    def __init__(self) -> None:
        self._device_types: dict[str, DeviceType] = {}
        self._ops: dict[str, OpDef] = {}
        self._tables: dict[str, RuleTable] = {}
        self._passes = PassRegistry()
        self.current_plugin = "<user>"
        # plugin name -> kind -> list of names, for `python -m flow plugins`
        self.provenance: dict[str, dict[str, list[str]]] = {}

    # -- reading loads plugins on first use ----------------------------------
    @property
    def ops(self) -> dict[str, OpDef]:
        """op name -> :class:`OpDef` (reading it loads the plugins on first use)."""
        _ensure_loaded()
        return self._ops

    @property
    def device_types(self) -> dict[str, DeviceType]:
        """device type name -> :class:`DeviceType` (loads the plugins on first use)."""
        _ensure_loaded()
        return self._device_types

    @property
    def tables(self) -> dict[str, RuleTable]:
        """table name -> :class:`RuleTable` (loads the plugins on first use)."""
        _ensure_loaded()
        return self._tables

    @property
    def passes(self) -> PassRegistry:
        """The graph passes (loads the plugins on first use)."""
        _ensure_loaded()
        return self._passes

    def get_table(self, name: str) -> RuleTable:
        """The rule table ``name``; the error says that the plugin owning it is not loaded."""
        t = self.tables.get(name)
        if t is None:
            raise KeyError(f"no rule table '{name}'; the plugin that owns it is not installed or not loaded "
                           f"(tables: {sorted(self._tables)})")
        return t

    # -- bookkeeping -----------------------------------------------------
    def _note(self, kind: str, name: str) -> None:
        self.provenance.setdefault(self.current_plugin, {}).setdefault(kind, []).append(name)

    # -- device types ----------------------------------------------------
    def register_device_type(self, spec: DeviceType, *, override: bool = False) -> None:
        if spec.name in self._device_types and not override:
            raise RegistrationError(
                f"device type '{spec.name}' is already registered by plugin "
                f"'{self._device_types[spec.name].plugin}'; pass override=True to replace it"
            )
        spec.plugin = self.current_plugin
        self._device_types[spec.name] = spec
        for op in self._ops.values():
            op._kcache.clear()
        self._note("device_types", spec.name)

    # -- ops -------------------------------------------------------------
    def register_op(self, schema: OpSchema, meta: Callable, grad: Callable | None = None, *,
                    override: bool = False, **kwargs: Any) -> OpDef:
        """Declare an op: its schema, meta rule (shapes/dtypes, no data) and gradient."""
        if schema.name in self._ops and not override:
            raise RegistrationError(
                f"op '{schema.name}' is already registered by plugin '{self._ops[schema.name].plugin}'; "
                "pass override=True to replace it"
            )
        old = self._ops.get(schema.name)
        op = OpDef(schema, meta, grad, plugin=self.current_plugin, **kwargs)
        if old is not None:
            # Update in place: op handles held by Python functions keep pointing at it.
            kernels = old.kernels
            for slot in OpDef.__slots__:
                setattr(old, slot, getattr(op, slot))
            old.kernels = kernels
            old._kcache.clear()
            old._mcache.clear()
            op = old
        self._ops[schema.name] = op
        handle = OP_HANDLES.get(schema.name)
        if handle is not None:
            handle.opdef = op
        self._note("ops", schema.name)
        return op

    def register_kernel(self, op_name: str, device_type: str, fn: Callable, *, dtypes=None,
                        override: bool = False, generic: bool = False, name: str = "default") -> None:
        """Attach a kernel to an op for a device type (``"generic"`` = any NumPy-like device).

        ``dtypes`` restricts it to those input dtypes. A second kernel under a
        different ``name`` is an alternative the graph executor may time and
        pick; the same name twice is a duplicate unless ``override=True``.
        """
        op = self._ops.get(op_name)
        if op is None:
            raise RegistrationError(
                f"kernel for unknown op '{op_name}' (plugin '{self.current_plugin}'); register the op first"
            )
        if device_type == "generic":
            generic = True
        quiet_module(getattr(fn, "__module__", None) or "")  # its NumPy warnings are flow's (flow._fpstate)
        keys = [(device_type, None)] if dtypes is None else [(device_type, d) for d in dtypes]
        for key in keys:
            lst = op.kernels.setdefault(key, [])
            for i, e in enumerate(lst):
                if e.name == name:
                    if not override:
                        raise RegistrationError(
                            f"op '{op_name}' already has kernel '{name}' for device '{device_type}'"
                            f"{'' if key[1] is None else ' dtype ' + str(key[1])} from plugin '{e.plugin}'; "
                            "pass override=True to replace it"
                        )
                    lst[i] = KernelEntry(fn, self.current_plugin, name, generic)
                    break
            else:
                lst.append(KernelEntry(fn, self.current_plugin, name, generic))
        op._kcache.clear()
        self._note("kernels", f"{op_name}[{device_type}]")

    def kernel_entries(self, op: OpDef, device_type: str, dtype) -> list[KernelEntry]:
        """All kernels usable for (op, device type, dtype), most specific first."""
        dev = self._device_types.get(device_type)
        out = list(op.kernels.get((device_type, dtype), ())) + list(op.kernels.get((device_type, None), ()))
        if dev is not None and dev.use_generic_kernels:
            out += list(op.kernels.get(("generic", dtype), ())) + list(op.kernels.get(("generic", None), ()))
        return out

    def resolve_kernel(self, op: OpDef, device_type: str, dtype) -> Callable:
        """The kernel the dispatcher calls, cached on the op per (device type, dtype)."""
        key = (device_type, dtype)
        fn = op._kcache.get(key)
        if fn is not None:
            return fn
        dev = self._device_types.get(device_type)
        if dev is None:
            raise _missing_device(device_type)
        guard = op.dtype_guard(dtype)  # a dtype the schema rejects resolves to the schema's error
        if guard is not None:
            op._kcache[key] = guard
            return guard
        entries = self.kernel_entries(op, device_type, dtype)
        if entries:
            e = entries[0]
            fn = e.fn(dev.xp) if e.generic else e.fn
        elif dev.kernel_fallback is not None:
            fn = dev.kernel_fallback(op)
        else:
            raise _missing_kernel(self, op, device_type, dtype)
        op._kcache[key] = fn
        return fn

    # -- rule tables -----------------------------------------------------
    def declare_table(self, name: str, doc: str = "") -> RuleTable:
        """Create a table owned by the current plugin (idempotent for its owner)."""
        t = self._tables.get(name)
        if t is not None:
            if t.owner != self.current_plugin:
                raise RegistrationError(f"rule table '{name}' is already owned by plugin '{t.owner}'")
            return t
        t = self._tables[name] = RuleTable(name, self.current_plugin, doc)
        self._note("tables", name)
        return t

    def register_rule(self, table: str, op: str, rule: Any, *, override: bool = False) -> None:
        t = self._tables.get(table)
        if t is None:
            raise RegistrationError(
                f"no rule table '{table}' (plugin '{self.current_plugin}'); the plugin that owns it is not loaded"
            )
        t.register(op, rule, plugin=self.current_plugin, override=override)
        self._note("rules", f"{table}:{op}")

    # -- passes ----------------------------------------------------------
    def register_pass(self, name: str, fn: Callable, *, before=(), after=(), override: bool = False,
                      enabled_by_default: bool = True) -> None:
        self._passes.register(name, fn, before=before, after=after, plugin=self.current_plugin,
                             override=override, enabled_by_default=enabled_by_default)
        self._note("passes", name)


def _install_hint(device_type: str | None) -> str:
    """Which installed plugin could provide what is missing, or that none does."""
    from flow.plugins.manager import unloaded_plugins

    skipped = unloaded_plugins()
    pkg = KNOWN_DEVICE_PACKAGES.get(device_type) if device_type else None
    if skipped:
        return (f"installed plugins that were not loaded and may provide it: {', '.join(skipped)} "
                "(check FLOW_PLUGINS / FLOW_DISABLE_PLUGIN_AUTOLOAD)")
    if pkg:
        from importlib import metadata

        try:
            metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return f"install the '{pkg}' package, which provides the '{device_type}' device"
        return f"the installed '{pkg}' package provides the '{device_type}' device but did not register this"
    return "no installed plugin provides it"


def _missing_device(device_type: str) -> KernelNotFoundError:
    return KernelNotFoundError(f"unknown device type '{device_type}'; {_install_hint(device_type)}")


def _missing_kernel(reg: Registry, op: OpDef, device_type: str, dtype) -> KernelNotFoundError:
    have = sorted({d for d, _ in op.kernels})
    return KernelNotFoundError(
        f"no kernel for op '{op.name}' on device '{device_type}' (dtype {dtype}); "
        f"it has kernels for: {', '.join(have) if have else 'no device'}; {_install_hint(device_type)}"
    )


def _ensure_loaded() -> None:
    from flow.plugins import manager

    if manager._state == "new":
        manager.ensure_loaded()


REGISTRY = Registry()


def get_op(name: str) -> OpDef:
    """The registered op named ``name`` (loads plugins on first use)."""
    op = REGISTRY.ops.get(name)
    if op is None:
        raise KeyError(f"no op named '{name}' is registered")
    return op


def get_device_type(name: str) -> DeviceType:
    """The registered device type ``name``; the error names the package that provides it."""
    dt = REGISTRY._device_types.get(name)
    if dt is None:
        dt = REGISTRY.device_types.get(name)
        if dt is None:
            raise _missing_device(name)
    return dt
