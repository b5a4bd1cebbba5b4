"""The registries: device types, ops, kernels, rule tables and passes.

Plugins fill them from their hooks (see :mod:`flow.plugins.hookspecs`); the
registry remembers which plugin made every entry. Reading a registry loads
plugins lazily on first use.
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Callable

from flow._fpstate import quiet_module
from flow.errors import KernelNotFoundError, RegistrationError
from flow.registry.claims import ClaimBook
from flow.registry.devices import DeviceType
from flow.registry.ops import (
    ANY,
    BOOL,
    FLOAT,
    FLOAT_PROMOTE,
    INDEX,
    INTEGER,
    INTEGRAL,
    NUMERIC,
    Attr,
    Dtypes,
    Input,
    KernelEntry,
    OpDef,
    OpSchema,
    dtypes,
    schema,
)
from flow.registry.passes import PassEntry, PassRegistry
from flow.registry.tables import RuleTable

__all__ = [
    "Attr",
    "Input",
    "OpSchema",
    "OpDef",
    "DeviceType",
    "RuleTable",
    "PassEntry",
    "Registry",
    "REGISTRY",
    "schema",
    "get_op",
    "get_device_type",
    # dtype rules of an op's inputs (schema(..., dtypes=...)): the common ones, and dtypes() for others
    "Dtypes",
    "dtypes",
    "ANY",
    "FLOAT",
    "FLOAT_PROMOTE",
    "NUMERIC",
    "INTEGRAL",
    "INTEGER",
    "BOOL",
    "INDEX",
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
        self._api: dict[str, Any] = {}  # flow.provided: names plugins add to flow's API
        self.current_plugin = "<user>"
        # plugin name -> kind -> list of names, for `python -m flow plugins`
        self.provenance: dict[str, dict[str, list[str]]] = {}
        self._claims = ClaimBook()  # every registration, winners and shadowed ones (flow.registry.claims)

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
            raise KeyError(
                f"no rule table '{name}'; the plugin that owns it is not installed or not loaded "
                f"(tables: {sorted(self._tables)})"
            )
        return t

    # -- bookkeeping -----------------------------------------------------
    def _claim(self, slot: tuple, value: Any, what: str, priority: int | None, override: bool):
        """Claim ``slot`` for the current plugin (see :mod:`flow.registry.claims`); a taken slot
        without ``override``/a higher ``priority`` is an error naming ``what`` and its owner."""
        return self._claims.claim(
            slot,
            value,
            self.current_plugin,
            priority=priority,
            override=override,
            duplicate=lambda w: (
                f"{what} is already registered by plugin '{w.plugin}'; "
                "pass override=True (or a higher priority=) to replace it"
            ),
        )

    def _note(self, kind: str, name: str) -> None:
        self.provenance.setdefault(self.current_plugin, {}).setdefault(kind, []).append(name)

    # -- device types ----------------------------------------------------
    def register_device_type(self, spec: DeviceType, *, override: bool = False, priority: int | None = None) -> None:
        """Add a device type. A second one of the same name needs ``override=True`` (it wins at
        the same priority) or a different ``priority`` (the higher wins); the one it shadows
        comes back when its plugin is removed (:meth:`remove_plugin`)."""
        win = self._claim(("device_type", spec.name), spec, f"device type '{spec.name}'", priority, override)
        spec.plugin = self.current_plugin
        self._set_device_type(spec.name, win.value)
        self._note("device_types", spec.name)

    def _set_device_type(self, name: str, spec: DeviceType | None) -> None:
        if spec is None:
            self._device_types.pop(name, None)
        else:
            self._device_types[name] = spec
        for op in self._ops.values():
            op._kcache.clear()

    # -- ops -------------------------------------------------------------
    def register_op(
        self,
        schema: OpSchema,
        meta: Callable,
        grad: Callable | None = None,
        *,
        override: bool = False,
        priority: int | None = None,
        **kwargs: Any,
    ) -> OpDef:
        """Declare an op: its schema, meta rule (shapes/dtypes, no data) and gradient.

        Declaring a name again needs ``override=True`` or a different ``priority``; the op is
        replaced in place (handles and kernels stay) and restored when the overriding plugin
        is removed.
        """
        if "origin" not in kwargs:
            f = sys._getframe(1)  # registration time only: where the op was declared, for `python -m flow op`
            kwargs["origin"] = (f.f_code.co_filename, f.f_lineno)
        op = OpDef(schema, meta, grad, plugin=self.current_plugin, **kwargs)
        win = self._claim(("op", schema.name), op, f"op '{schema.name}'", priority, override)
        live = self._set_op(schema.name, win.value)
        self._note("ops", schema.name)
        return live

    def _set_op(self, name: str, src: OpDef | None) -> OpDef | None:
        """Make ``src``'s declaration the live op ``name`` (in place: handles and kernels stay)."""
        live = self._ops.get(name)
        if src is None:
            self._ops.pop(name, None)
            handle = OP_HANDLES.get(name)
            if handle is not None:
                handle.opdef = None
            return None
        if live is None:
            # the live object is a copy, so every claim keeps its own declaration for restoring
            live = self._ops[name] = copy.copy(src)
            live.kernels, live._kcache, live._mcache = {}, {}, set()
        elif live is not src:
            for slot in OpDef.__slots__:
                if slot not in ("kernels", "_kcache", "_mcache"):
                    setattr(live, slot, getattr(src, slot))
            live._kcache.clear()
            live._mcache.clear()
        handle = OP_HANDLES.get(name)
        if handle is not None:
            handle.opdef = live
        return live

    def register_kernel(
        self,
        op_name: str,
        device_type: str,
        fn: Callable,
        *,
        dtypes=None,
        override: bool = False,
        priority: int | None = None,
        generic: bool = False,
        name: str = "default",
        out: Callable | None = None,
    ) -> None:
        """Attach a kernel to an op for a device type (``"generic"`` = any NumPy-like device).

        ``dtypes`` restricts it to those input dtypes. A second kernel under a
        different ``name`` is an alternative the graph executor may time and
        pick; the same name twice is a duplicate unless ``override=True`` (the later one
        wins) or the two have different ``priority`` (the higher one wins, in any load
        order). The kernel that lost comes back when the winner's plugin is removed.
        ``out`` is the kernel's out-variant (the same arguments plus ``out=``; a factory like
        ``fn`` when generic) that graph memory planning may call instead.
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
        plugin = self.current_plugin
        for key in keys:  # check every slot first, so a duplicate changes nothing
            w = self._claims.winner(("kernel", op_name, key[0], key[1], name))
            if w is not None and not override and (priority or 0) == w.priority:
                raise RegistrationError(
                    f"op '{op_name}' already has kernel '{name}' for device '{device_type}'"
                    f"{'' if key[1] is None else ' dtype ' + str(key[1])} from plugin '{w.plugin}'; "
                    "pass override=True (or a higher priority=) to replace it"
                )
        for key in keys:
            slot = ("kernel", op_name, key[0], key[1], name)
            win = self._claims.claim(
                slot,
                KernelEntry(fn, plugin, name, generic, out),
                plugin,
                priority=priority,
                override=override,
                duplicate=str,
            )  # checked above
            self._set_kernel(op, key, name, win.value)
        self._note("kernels", f"{op_name}[{device_type}]")

    def _set_kernel(self, op: OpDef, key: tuple, name: str, entry: KernelEntry | None) -> None:
        lst = op.kernels.setdefault(key, [])
        i = next((i for i, e in enumerate(lst) if e.name == name), None)
        if entry is None:
            if i is not None:
                del lst[i]
        elif i is None:
            lst.append(entry)
        else:
            lst[i] = entry
        if not lst:
            del op.kernels[key]
        op._kcache.clear()

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
            if dev.kernel_adapter is not None and (device_type, dtype) not in op.kernels:
                if ("generic", dtype) not in op.kernels:
                    fn = dev.kernel_adapter(op, dtype, fn)
        elif dev.kernel_fallback is not None:
            fn = dev.kernel_fallback(op)
        else:
            raise _missing_kernel(self, op, device_type, dtype)
        op._kcache[key] = fn
        return fn

    # -- rule tables -----------------------------------------------------
    def declare_table(self, name: str, doc: str = "") -> RuleTable:
        """Create a table owned by the current plugin (idempotent for its owner).

        Rules other plugins registered for it before it existed (queued, see
        :meth:`register_rule`) go into it now.
        """
        t = self._tables.get(name)
        if t is not None:
            if t.owner != self.current_plugin:
                raise RegistrationError(f"rule table '{name}' is already owned by plugin '{t.owner}'")
            return t
        t = self._tables[name] = RuleTable(name, self.current_plugin, doc)
        for slot in self._claims.slots("rule"):
            if slot[1] == name:
                w = self._claims.winner(slot)
                t.register(slot[2], w.value, plugin=w.plugin)
        self._note("tables", name)
        return t

    def register_rule(
        self, table: str, op: str, rule: Any, *, override: bool = False, priority: int | None = None
    ) -> None:
        """Put ``rule`` for ``op`` into ``table`` (an SBP rule, an AMP colour, a fusion lowering).

        A table no loaded plugin has declared yet is no error: the rule is queued and goes
        into the table when its owner declares it (:meth:`pending_rules` lists the queue), so
        an op package can ship rules for plugins that may be absent.
        """
        t = self._tables.get(table)
        win = self._claims.claim(
            ("rule", table, op),
            rule,
            self.current_plugin,
            priority=priority,
            override=override,
            duplicate=lambda w: (
                f"rule table '{table}': op '{op}' already has a rule from plugin "
                f"'{w.plugin}'; pass override=True (or a higher priority=) to replace it"
            ),
        )
        if t is not None:
            t.register(op, win.value, plugin=win.plugin, override=True)
        self._note("rules", f"{table}:{op}")

    def pending_rules(self) -> list[tuple[str, str, str]]:
        """Rules waiting for their table to be declared, as ``(table, op, plugin)``."""
        out = []
        for slot in self._claims.slots("rule"):
            if slot[1] not in self._tables:
                out.append((slot[1], slot[2], self._claims.winner(slot).plugin))
        return sorted(out)

    # -- passes ----------------------------------------------------------
    def register_pass(
        self,
        name: str,
        fn: Callable,
        *,
        before=(),
        after=(),
        override: bool = False,
        enabled_by_default: bool = True,
        priority: int | None = None,
    ) -> None:
        """Add a graph pass ``fn(ir, config) -> ir`` (see :class:`PassRegistry` for the ordering).
        A second pass of the same name needs ``override=True`` or a different ``priority``."""
        staged = PassRegistry()  # builds the entry (normalised constraints, doc) without touching ours
        staged.register(
            name, fn, before=before, after=after, plugin=self.current_plugin, enabled_by_default=enabled_by_default
        )
        win = self._claim(("pass", name), staged[name], f"pass '{name}'", priority, override)
        self._set_pass(name, win.value)
        self._note("passes", name)

    def _set_pass(self, name: str, e: PassEntry | None) -> None:
        if e is None:
            self._passes.remove(name)
            return
        order = self._passes[name].order if name in self._passes else None
        self._passes.register(
            name,
            e.fn,
            before=e.before,
            after=e.after,
            plugin=e.plugin,
            override=True,
            enabled_by_default=e.enabled_by_default,
            doc=e.doc,
        )
        if order is not None:
            self._passes[name].order = order  # an override keeps the pass's place in the pipeline

    # -- API provided by plugins (flow.provided) ---------------------------
    @property
    def api(self) -> dict[str, Any]:
        """name -> object of the API plugins provide (loads the plugins on first use)."""
        _ensure_loaded()
        return self._api

    def register_api(self, name: str, obj: Any, *, override: bool = False, priority: int | None = None) -> None:
        """Provide ``flow.<name>`` (``name`` without a dot) or a hook of :mod:`flow.provided`
        (``"Tensor.to_global"``, ``"Module.to_global"``, ``"global_factory"``, ...)."""
        if not isinstance(name, str) or not name or name.startswith("_"):
            raise RegistrationError(f"register_api: expected a public name, got {name!r}")
        if obj is None:  # None is how a removed name reads (_set_api)
            raise RegistrationError(f"register_api: '{name}' needs an object, got None")
        win = self._claim(("api", name), obj, f"API name '{name}'", priority, override)
        self._set_api(name, win.value)
        self._note("api", name)

    def _set_api(self, name: str, obj: Any) -> None:
        if obj is None:
            self._api.pop(name, None)
        else:
            self._api[name] = obj
        from flow import provided

        provided.forget(name)

    # -- overrides and removal ---------------------------------------------
    def contested(self) -> list[dict]:
        """Every registration more than one plugin claimed: what, who won, who lost (and priorities)."""
        return contested(self)

    def remove_plugin(self, name: str) -> None:
        """Remove everything plugin ``name`` registered, giving back what it overrode.

        Its ops (with every kernel attached to them), kernels, device types, rule tables,
        rules and passes go; an entry it had overridden is restored. The rules other plugins
        put into a table it owned are queued again (see :meth:`register_rule`).
        """
        remove_plugin(self, name)


def _install_hint(device_type: str | None) -> str:
    """Which installed plugin could provide what is missing, or that none does."""
    from flow.plugins.manager import unloaded_plugins

    skipped = unloaded_plugins()
    pkg = KNOWN_DEVICE_PACKAGES.get(device_type) if device_type else None
    if skipped:
        return (
            f"installed plugins that were not loaded and may provide it: {', '.join(skipped)} "
            "(check FLOW_PLUGINS / FLOW_DISABLE_PLUGIN_AUTOLOAD)"
        )
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


from flow.registry.removal import contested, remove_plugin  # noqa: E402

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
