"""flow discovers flow-models through its entry point; FLOW_PLUGINS and FLOW_DISABLE_PLUGIN_AUTOLOAD skip it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata

import pytest

import flow.plugins

DISTRIBUTION = "flow-models"
ENTRY_POINT = "models"
MODULE = "flow_models.plugin"

# One plugin line of `python -m flow plugins`: "name  [distribution version, kind, status]  module".
LISTING_LINE = re.compile(r"^(?P<name>\S+)\s+\[(?P<dist>\S+) (?P<version>\S+), (?P<kind>[^,]+), (?P<status>[^\]]+)\]")


def plugins_listing(**env: str) -> dict[str, re.Match]:
    """Run `python -m flow plugins` with ``env`` as the only FLOW_ switches; plugin name -> its parsed line."""
    run_env = {k: v for k, v in os.environ.items() if k not in ("FLOW_PLUGINS", "FLOW_DISABLE_PLUGIN_AUTOLOAD")}
    run_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "flow", "plugins"], env=run_env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"python -m flow plugins failed with {env}:\n{proc.stdout}\n{proc.stderr}"
    lines = (LISTING_LINE.match(line) for line in proc.stdout.splitlines())
    return {m["name"]: m for m in lines if m}


def test_entry_point_is_declared_by_the_installed_distribution():
    eps = metadata.distribution(DISTRIBUTION).entry_points.select(group=flow.plugins.ENTRY_POINT_GROUP)
    assert [(ep.name, ep.value) for ep in eps] == [(ENTRY_POINT, MODULE)]


def test_list_plugins_has_it_loaded_from_its_distribution():
    info = {i.name: i for i in flow.plugins.list_plugins()}[ENTRY_POINT]
    assert info.loaded, info.skipped_reason
    assert not info.builtin
    assert (info.distribution, info.version, info.module) == (DISTRIBUTION, metadata.version(DISTRIBUTION), MODULE)


@pytest.mark.parametrize("selector", [None, ENTRY_POINT, DISTRIBUTION])
def test_cli_lists_it_loaded(selector):
    line = plugins_listing(**({"FLOW_PLUGINS": selector} if selector else {}))[ENTRY_POINT]
    assert (line["dist"], line["version"]) == (DISTRIBUTION, metadata.version(DISTRIBUTION))
    assert (line["kind"], line["status"]) == ("entry point", "loaded")


def test_cli_skips_it_when_autoload_is_disabled():
    line = plugins_listing(FLOW_DISABLE_PLUGIN_AUTOLOAD="1")[ENTRY_POINT]
    assert line["status"].startswith("skipped") and "FLOW_DISABLE_PLUGIN_AUTOLOAD" in line["status"]


def test_cli_skips_it_when_flow_plugins_names_only_the_core():
    line = plugins_listing(FLOW_PLUGINS="flow-core")[ENTRY_POINT]
    assert line["status"].startswith("skipped") and "FLOW_PLUGINS" in line["status"]
