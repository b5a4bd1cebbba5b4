"""Plugin discovery and loading: entry points in ``flow.plugins``, loaded lazily and loudly.

The core's own ops and CPU kernels are plugins too (``BUILTIN_PLUGINS``),
registered through exactly the same hooks; they always load. Entry-point
plugins load on the first use of a registry unless
``FLOW_DISABLE_PLUGIN_AUTOLOAD=1``; ``FLOW_PLUGINS=a,b`` loads only the named
ones (by entry-point or distribution name).
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import threading
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from flow.errors import PluginError
from flow.plugins import hookspecs

ENTRY_POINT_GROUP = "flow.plugins"

BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (
    ("flow.cpu", "flow.backends.cpu.plugin"),
    ("flow.ops", "flow.ops.plugin"),
    ("flow.graph", "flow.graph.plugin"),
)

PHASES = (
    "flow_register_device_types",
    "flow_register_ops",
    "flow_register_tables",
    "flow_register_kernels",
    "flow_register_rules",
    "flow_register_passes",
    "flow_register_api",
    "flow_plugin_loaded",
)


@dataclass
class PluginInfo:
    """One loaded (or skipped) plugin, for listings and error messages."""

    name: str
    distribution: str
    version: str
    module: str
    builtin: bool = False
    loaded: bool = False
    skipped_reason: str = ""
    registered: dict[str, list[str]] = field(default_factory=dict)


_pm: pluggy.PluginManager | None = None
_infos: dict[str, PluginInfo] = {}
_state = "new"  # new -> loading -> loaded
_lock = threading.RLock()


def get_plugin_manager() -> pluggy.PluginManager:
    """The process's pluggy manager with flow's hookspecs added."""
    global _pm
    if _pm is None:
        _pm = pluggy.PluginManager("flow")
        _pm.add_hookspecs(hookspecs)
    return _pm


def _registry():
    from flow.registry import REGISTRY

    return REGISTRY


def _selected() -> set[str] | None:
    raw = os.environ.get("FLOW_PLUGINS", "").strip()
    if not raw:
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


def _discover() -> list[tuple[metadata.EntryPoint, str, str]]:
    eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    out = []
    seen = set()
    for ep in sorted(eps, key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        dname = dist.metadata["Name"] if dist is not None else "?"
        dver = dist.version if dist is not None else "?"
        if (ep.name, ep.value) in seen:  # the same distribution seen twice on sys.path
            continue
        seen.add((ep.name, ep.value))
        out.append((ep, dname, dver))
    return out


def _run_phase(pm: pluggy.PluginManager, hook_name: str, names: list[str]) -> None:
    reg = _registry()
    impls = {i.plugin_name: i for i in getattr(pm.hook, hook_name).get_hookimpls()}
    for name in names:
        impl = impls.get(name)
        if impl is None:
            continue
        reg.current_plugin = name
        kwargs: dict[str, Any] = {"registry": reg, "plugin_manager": pm}
        try:
            impl.function(**{a: kwargs[a] for a in impl.argnames})
        except PluginError:
            raise
        except Exception as e:
            info = _infos.get(name)
            dist = f" (distribution '{info.distribution}')" if info else ""
            raise PluginError(
                f"flow plugin '{name}'{dist} failed in {hook_name}: {type(e).__name__}: {e}. "
                "Set FLOW_DISABLE_PLUGIN_AUTOLOAD=1 or list the plugins you want in FLOW_PLUGINS=a,b "
                "to skip it."
            ) from e
        finally:
            reg.current_plugin = "<user>"


def _register_object(pm, obj, name: str) -> None:
    try:
        pm.register(obj, name=name)
    except ValueError as e:
        raise PluginError(f"flow plugin '{name}' could not be registered: {e}") from e


def _load_all() -> None:
    global _state
    pm = get_plugin_manager()
    names: list[str] = []
    for name, modname in BUILTIN_PLUGINS:
        mod = importlib.import_module(modname)
        _infos[name] = PluginInfo(name, "flow-core", _core_version(), modname, builtin=True)
        _register_object(pm, mod, name)
        names.append(name)
    autoload = os.environ.get("FLOW_DISABLE_PLUGIN_AUTOLOAD", "") not in ("1", "true", "yes")
    selected = _selected()
    builtin_modules = {m for _, m in BUILTIN_PLUGINS}
    for ep, dname, dver in _discover():
        if ep.value in builtin_modules:
            continue
        info = PluginInfo(ep.name, dname, dver, ep.value)
        _infos[ep.name] = info
        if selected is not None:
            if ep.name not in selected and dname not in selected:
                info.skipped_reason = "not named in FLOW_PLUGINS"
                continue
        elif not autoload:
            info.skipped_reason = "FLOW_DISABLE_PLUGIN_AUTOLOAD is set"
            continue
        try:
            obj = ep.load()
        except Exception as e:
            raise PluginError(
                f"flow plugin '{ep.name}' from distribution '{dname}' {dver} failed to import "
                f"({ep.value}): {type(e).__name__}: {e}. Set FLOW_DISABLE_PLUGIN_AUTOLOAD=1 or "
                "FLOW_PLUGINS=... to skip it."
            ) from e
        _register_object(pm, obj, ep.name)
        names.append(ep.name)
    if selected is not None:
        unknown = selected - {n for n in _infos} - {i.distribution for i in _infos.values()}
        if unknown:
            raise PluginError(f"FLOW_PLUGINS names plugins that are not installed: {sorted(unknown)}")
    _call_hookspec_phase(pm, names)
    _check_hooks(pm, names)
    for phase in PHASES:
        _run_phase(pm, phase, names)
    reg = _registry()
    for n in names:
        _infos[n].loaded = True
        _infos[n].registered = reg.provenance.get(n, {})


def _call_hookspec_phase(pm, names) -> None:
    impls = {i.plugin_name: i for i in pm.hook.flow_add_hookspecs.get_hookimpls()}
    for n in names:
        impl = impls.get(n)
        if impl is not None:
            try:
                impl.function(**{a: pm for a in impl.argnames})
            except Exception as e:
                raise PluginError(f"flow plugin '{n}' failed in flow_add_hookspecs: {e}") from e


def _core_version() -> str:
    try:
        return metadata.version("flow-core")
    except metadata.PackageNotFoundError:
        return "dev"


def ensure_loaded() -> None:
    """Load all plugins once (the first registry use calls this)."""
    global _state
    if _state != "new":
        return
    with _lock:
        if _state != "new":
            return
        _state = "loading"
        try:
            _load_all()
        except BaseException:
            _state = "new"
            _reset_after_failure()
            raise
        _state = "loaded"


def _reset_after_failure() -> None:
    # A failed load must not leave half a registry: the next call retries from scratch.
    global _pm
    from flow import registry as regmod

    regmod.REGISTRY.__init__()
    _pm = None
    _infos.clear()


def register(plugin: Any, name: str | None = None) -> str:
    """Register a plugin object at run time (tests, notebooks); its hooks run now.

    If one of its hooks raises, everything it registered so far is removed again
    and a :class:`PluginError` naming it is raised.
    """
    ensure_loaded()
    pm = get_plugin_manager()
    name = name or getattr(plugin, "__name__", None) or repr(plugin)
    if name in _infos:
        raise PluginError(f"a flow plugin named '{name}' is already registered; unregister it first")
    _register_object(pm, plugin, name)
    _infos[name] = PluginInfo(name, "<runtime>", "", getattr(plugin, "__name__", type(plugin).__name__))
    try:
        _call_hookspec_phase(pm, [name])
        _check_hooks(pm, [name])
        for phase in PHASES:
            _run_phase(pm, phase, [name])
    except BaseException:
        unregister(name)
        raise
    _infos[name].loaded = True
    _infos[name].registered = _registry().provenance.get(name, {})
    return name


def unregister(name: str) -> None:
    """Forget a run-time plugin and every op, kernel, device type, table, rule and pass it registered.

    What it overrode comes back (:meth:`flow.registry.Registry.remove_plugin`). Built-in
    plugins cannot be unregistered.
    """
    info = _infos.get(name)
    if info is not None and info.builtin:
        raise PluginError(f"'{name}' is a built-in flow plugin and cannot be unregistered")
    pm = get_plugin_manager()
    if pm.get_plugin(name) is None and info is None:
        raise PluginError(f"no flow plugin named '{name}' is registered")
    if pm.get_plugin(name) is not None:
        pm.unregister(name=name)
    _registry().remove_plugin(name)
    _infos.pop(name, None)


def check_pending() -> None:
    """Raise if a loaded plugin implements a hook that no spec declares (a misspelled hook name).

    Loading runs this check for every plugin (and :func:`register` for the one it
    registers), so a misspelled hook stops the load. A hook another plugin declares
    (through ``flow_add_hookspecs``) counts once that plugin is loaded; mark an
    implementation ``@hookimpl(optionalhook=True)`` when that plugin may be missing.
    """
    ensure_loaded()
    pm = get_plugin_manager()
    _check_hooks(pm, [pm.get_name(p) for p in pm.get_plugins()])


def _check_hooks(pm: pluggy.PluginManager, names: list[str]) -> None:
    declared = _declared_hooks(pm)
    bad = []
    for hook_name, caller in vars(pm.hook).items():
        if hook_name.startswith("_") or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if impl.plugin_name in names and not impl.optionalhook:
                bad.append((impl.plugin_name, hook_name))
    if not bad:
        return
    lines = []
    for plugin, hook_name in sorted(bad):
        info = _infos.get(plugin)
        dist = f" (distribution '{info.distribution}')" if info and info.distribution != "<runtime>" else ""
        close = difflib.get_close_matches(hook_name, declared, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        lines.append(f"flow plugin '{plugin}'{dist} implements hook '{hook_name}', which no hookspec declares{hint}")
    raise PluginError(
        "; ".join(lines) + ". Mark a hook of a plugin that may be absent @hookimpl(optionalhook=True). "
        f"The hooks flow declares are: {', '.join(sorted(declared))}"
    )


def _declared_hooks(pm) -> list[str]:
    return [n for n in vars(pm.hook) if not n.startswith("_") and getattr(pm.hook, n).has_spec()]


def list_plugins() -> list[PluginInfo]:
    """Every plugin found, loaded or skipped, with what each registered."""
    ensure_loaded()
    return list(_infos.values())


def unloaded_plugins() -> list[str]:
    """Installed plugins that were found but not loaded, as ``"name (distribution)"``."""
    return [f"{i.name} ({i.distribution})" for i in _infos.values() if not i.loaded]


def is_loaded() -> bool:
    return _state == "loaded"


def describe() -> list[dict]:
    """Every plugin found (loaded or skipped) as plain data: what ``python -m flow plugins --json`` prints."""
    from flow.plugins.listing import describe as _describe

    return _describe(list_plugins(), _registry())


def discovered() -> list[dict]:
    """The entry points of group ``flow.plugins`` that are installed, without loading any."""
    return [{"name": ep.name, "distribution": d, "version": v, "module": ep.value} for ep, d, v in _discover()]


def _dump(out=None, as_json: bool = False, verbose: bool = False) -> None:
    """Print every plugin found (see :func:`flow.plugins.listing.dump`)."""
    from flow.plugins.listing import dump

    dump(describe(), _registry(), sys.stdout if out is None else out, as_json=as_json, verbose=verbose)
