"""flow's plugin system: pluggy hooks discovered through the ``flow.plugins`` entry points."""

from __future__ import annotations

import pluggy

hookimpl = pluggy.HookimplMarker("flow")

from flow.plugins.manager import (  # noqa: E402
    ENTRY_POINT_GROUP,
    PluginInfo,
    check_pending,
    ensure_loaded,
    get_plugin_manager,
    list_plugins,
    register,
    unregister,
)

__all__ = [
    "hookimpl",
    "ENTRY_POINT_GROUP",
    "PluginInfo",
    "check_pending",
    "ensure_loaded",
    "get_plugin_manager",
    "list_plugins",
    "register",
    "unregister",
]
