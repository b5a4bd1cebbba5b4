"""API that plugins provide: names of the ``flow`` namespace and hooks that core functions call.

The core names some of its public API without implementing it: ``flow.placement``, ``flow.sbp``,
``flow.env`` and ``flow.comm`` belong to flow-dist, ``flow.autocast`` and ``flow.amp`` to flow-amp,
``flow.cuda`` to flow-cuda. A plugin provides them in its ``flow_register_api`` hook::

    @hookimpl
    def flow_register_api(registry):
        registry.register_api("placement", Placement)      # flow.placement
        registry.register_api("Tensor.to_global", to_global)  # a hook the core calls

``flow.<name>`` then answers with the registered object (looked up once, then cached). Without the
plugin, the name raises :class:`flow.errors.FeatureNotInstalledError` (an ``AttributeError`` too,
so ``hasattr(flow, "placement")`` is False) saying which package to install. A plugin may provide
names the core does not know as well.

Hooks the core calls (dotted names, never ``flow.*`` attributes):

- ``"Tensor.to_global"(tensor, placement, sbp, **kwargs)`` and ``"Tensor.to_local"(tensor)``:
  ``Tensor.to_global`` / ``to_local``;
- ``"Module.to_global"(module, placement, sbp)``: ``nn.Module.to_global``;
- ``"global_factory"(tensor, placement, sbp)``: a factory (``zeros``, ``randn``, ... with
  ``placement=`` and ``sbp=``) built the whole logical tensor ``tensor`` on every rank (so a random
  tensor's value does not depend on the placement or SBP); the hook returns the global tensor;
- ``"global_constant"(tensor, like)``: a constant a composite op made (a mask, a band matrix) for
  the global tensor ``like``, as a broadcast global tensor on ``like``'s placement
  (:func:`flow._creation.constant_for`);
- ``"global_load"(f, src_rank, load)``: ``flow.load(f, global_src_rank=src_rank)``: rank ``src_rank``
  reads ``f``, the others get its bytes, and every rank returns ``load(file_object)``.
"""

from __future__ import annotations

from typing import Any

from flow.errors import FeatureNotInstalledError

__all__ = ["KNOWN_PROVIDERS", "get", "require", "forget", "flow_getattr"]

# Which distribution provides each name the core refers to: for the error a user gets without it.
KNOWN_PROVIDERS: dict[str, str] = {
    "placement": "flow-dist",
    "sbp": "flow-dist",
    "env": "flow-dist",
    "comm": "flow-dist",
    "Tensor.to_global": "flow-dist",
    "Tensor.to_local": "flow-dist",
    "Module.to_global": "flow-dist",
    "global_factory": "flow-dist",
    "global_constant": "flow-dist",
    "global_load": "flow-dist",
    "nn.parallel.DistributedDataParallel": "flow-dist",
    "autocast": "flow-amp",
    "amp": "flow-amp",
    "is_autocast_enabled": "flow-amp",
    "cuda": "flow-cuda",
}

_WHAT = {"flow-dist": "global tensors and communication", "flow-amp": "mixed precision", "flow-cuda": "the cuda device"}
_CACHE: dict[str, Any] = {}
_MISSING = object()
_ON_FLOW: set[str] = set()  # names flow_getattr put into flow's namespace


def get(name: str, default: Any = None) -> Any:
    """The object registered as ``name``, or ``default``."""
    obj = _CACHE.get(name, _MISSING)
    if obj is _MISSING:
        from flow.registry import REGISTRY

        obj = REGISTRY.api.get(name, _MISSING)
        if obj is _MISSING:
            return default
        _CACHE[name] = obj
    return obj


def require(name: str, what: str | None = None) -> Any:
    """The object registered as ``name``; raises FeatureNotInstalledError naming its package."""
    obj = get(name, _MISSING)
    if obj is _MISSING:
        raise _missing(name, what or (f"flow.{name}" if "." not in name else name))
    return obj


def forget(name: str) -> None:
    """Drop a cached lookup (the registry calls this when ``name`` is registered or removed)."""
    _CACHE.pop(name, None)
    import flow

    if name in _ON_FLOW:
        _ON_FLOW.discard(name)
        flow.__dict__.pop(name, None)


def flow_getattr(name: str) -> Any:
    """``flow.__getattr__``: a name a plugin provides, else AttributeError."""
    if name.startswith("_"):
        raise AttributeError(f"module 'flow' has no attribute '{name}'")
    import flow

    if not flow.__dict__.get("_IMPORTED", False):
        # while flow itself is importing, `from flow import submodule` asks here first:
        # answer as a plain module would, and never load plugins half-way through the import
        raise AttributeError(f"module 'flow' has no attribute '{name}'")
    obj = get(name, _MISSING)
    if obj is _MISSING:
        if name in KNOWN_PROVIDERS:
            raise _missing(name, f"flow.{name}")
        raise AttributeError(f"module 'flow' has no attribute '{name}'")
    _ON_FLOW.add(name)
    flow.__dict__[name] = obj  # later lookups are plain module attributes
    return obj


def _missing(name: str, what: str) -> FeatureNotInstalledError:
    pkg = KNOWN_PROVIDERS.get(name)
    if pkg is None:
        return FeatureNotInstalledError(f"{what} is not provided by any loaded flow plugin")
    from importlib import metadata

    from flow.plugins.manager import unloaded_plugins

    try:
        metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return FeatureNotInstalledError(
            f"{what} needs the '{pkg}' package, which provides {_WHAT[pkg]}: pip install {pkg}"
        )
    skipped = unloaded_plugins()
    why = f" (plugins not loaded: {', '.join(skipped)}; check FLOW_PLUGINS / FLOW_DISABLE_PLUGIN_AUTOLOAD)"
    return FeatureNotInstalledError(
        f"{what} needs the '{pkg}' package, which is installed but did not provide it" + (why if skipped else "")
    )
