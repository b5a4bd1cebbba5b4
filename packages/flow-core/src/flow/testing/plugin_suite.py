"""The plugin discovery conformance suite: what every installed flow plugin package must pass.

A plugin package's tests call it with the package's distribution name::

    # tests/test_discovery.py of flow-cuda
    from flow.testing import plugin_discovery_suite

    test_plugin_discovery = plugin_discovery_suite("flow-cuda", absent_modules=["cupy"])

which gives one pytest test, parametrised over the checks below (``check_plugin_discovery`` runs
them all outside pytest). For each entry point of the distribution in the group ``flow.plugins``:

``entry_point``  the distribution declares it, and its module imports;
``hooks``        every hook it implements is declared by a hookspec (or marked optional);
``loads``        it is loaded in this process, attributed to the distribution and its version;
``registers``    everything it registered is in the registry under its name (ops, kernels,
                 device types, tables, rules, passes; a rule may be queued for its table), and
                 ``registers=`` (a subset of ``{"ops": [...], "kernels": ["op[device]"], ...}``)
                 is among it;
``cli``          ``python -m flow plugins`` (text and ``--json``) lists it loaded, from its
                 distribution, with the same registrations;
``cli_select``   ``FLOW_PLUGINS=<entry point>`` and ``FLOW_PLUGINS=<distribution>`` load it;
``cli_skip``     ``FLOW_DISABLE_PLUGIN_AUTOLOAD=1`` and ``FLOW_PLUGINS=flow-core`` skip it, saying why;
``absent``       with each of ``absent_modules`` unimportable (CuPy, mpi4py on a machine without
                 them) its package and plugin still import and load (a check only when given).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from typing import Callable, Iterable, Mapping

# One plugin line of `python -m flow plugins`: "name  [distribution version, kind, status]  module".
LISTING_LINE = re.compile(
    r"^(?P<name>\S+)\s+\[(?P<dist>\S+) (?P<version>\S+), (?P<kind>[^,]+), (?P<status>[^\]]+)\]"
    r"\s+(?P<module>\S+)$"
)
CHECKS = ("entry_point", "hooks", "loads", "registers", "cli", "cli_select", "cli_skip", "absent")


class PluginConformanceError(AssertionError):
    """A plugin package fails a discovery check; the message names the check, the plugin and what differs."""


def _fail(check: str, msg: str) -> None:
    raise PluginConformanceError(f"plugin discovery check '{check}': {msg}")


def entry_points(distribution: str) -> list[metadata.EntryPoint]:
    """The entry points of ``distribution`` in the group ``flow.plugins``."""
    from flow.plugins import ENTRY_POINT_GROUP

    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        _fail("entry_point", f"distribution '{distribution}' is not installed")
    return sorted(dist.entry_points.select(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def run_flow(args: list[str], code: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """Run ``python -m flow ARGS`` (or ``python -c CODE``) with only the given FLOW_ switches set."""
    e = {k: v for k, v in os.environ.items() if k not in ("FLOW_PLUGINS", "FLOW_DISABLE_PLUGIN_AUTOLOAD")}
    e.update(env)
    cmd = [sys.executable, "-c", textwrap.dedent(code)] if code is not None else [sys.executable, "-m", "flow", *args]
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)


def _listing(check: str, **env: str) -> dict[str, re.Match]:
    proc = run_flow(["plugins"], **env)
    if proc.returncode != 0:
        _fail(check, f"python -m flow plugins failed with {env or 'no switches'}:\n{proc.stdout}\n{proc.stderr}")
    lines = (LISTING_LINE.match(line) for line in proc.stdout.splitlines())
    return {m["name"]: m for m in lines if m}


def _info(name: str):
    import flow.plugins

    return {i.name: i for i in flow.plugins.list_plugins()}.get(name)


def _registered_in_registry(plugin: str, kind: str, what: str) -> bool:
    """Is registration ``what`` of ``kind`` (as the provenance names it) in the registry under ``plugin``?"""
    from flow.registry import REGISTRY

    if kind == "ops":
        return any(c.plugin == plugin for c in REGISTRY._claims.claims(("op", what)))
    if kind == "device_types":
        return any(c.plugin == plugin for c in REGISTRY._claims.claims(("device_type", what)))
    if kind == "kernels":
        op, _, dev = what[:-1].partition("[")
        return any(
            s[1] == op and s[2] == dev and any(c.plugin == plugin for c in REGISTRY._claims.claims(s))
            for s in REGISTRY._claims.slots("kernel")
        )
    if kind == "tables":
        t = REGISTRY.tables.get(what)
        return t is not None and t.owner == plugin
    if kind == "rules":
        table, _, op = what.partition(":")
        return any(c.plugin == plugin for c in REGISTRY._claims.claims(("rule", table, op)))
    if kind == "passes":
        return any(c.plugin == plugin for c in REGISTRY._claims.claims(("pass", what)))
    return True  # a kind of registration this suite does not know (added by a newer core): not checked


def discovery_checks(
    distribution: str, *, registers: Mapping[str, Iterable[str]] | None = None, absent_modules: Iterable[str] = ()
) -> dict[str, Callable[[], None]]:
    """The checks of the suite for ``distribution`` by name (see the module docstring); each raises
    :class:`PluginConformanceError` on failure."""
    absent = list(absent_modules)
    expected = {k: list(v) for k, v in (registers or {}).items()}

    def eps():
        found = entry_points(distribution)
        if not found:
            _fail("entry_point", f"distribution '{distribution}' declares no entry point in group 'flow.plugins'")
        return found

    def check_entry_point():
        import importlib

        for ep in eps():
            try:
                importlib.import_module(ep.value.split(":")[0])
            except Exception as e:
                _fail(
                    "entry_point",
                    f"entry point '{ep.name}' names '{ep.value}', which fails to import: {type(e).__name__}: {e}",
                )

    def check_hooks():
        import flow.plugins

        flow.plugins.check_pending()  # raises PluginError naming the plugin and the hook

    def check_loads():
        version = metadata.version(distribution)
        for ep in eps():
            info = _info(ep.name)
            if info is None:
                _fail("loads", f"flow.plugins.list_plugins() has no plugin '{ep.name}'")
            if not info.loaded:
                _fail("loads", f"plugin '{ep.name}' is not loaded: {info.skipped_reason}")
            got = (info.builtin, info.distribution, info.version, info.module)
            if got != (False, distribution, version, ep.value):
                _fail(
                    "loads",
                    f"plugin '{ep.name}' is listed as (builtin, distribution, version, module) = {got}, "
                    f"expected {(False, distribution, version, ep.value)}",
                )

    def check_registers():
        mine: dict[str, set] = {}
        for ep in eps():
            info = _info(ep.name)
            for kind, names in info.registered.items():
                mine.setdefault(kind, set()).update(names)
                for what in names:
                    if not _registered_in_registry(ep.name, kind, what):
                        _fail(
                            "registers",
                            f"plugin '{ep.name}' registered {kind} '{what}', which the registry "
                            "does not hold under its name",
                        )
        for kind, names in expected.items():
            missing = sorted(set(names) - mine.get(kind, set()))
            if missing:
                _fail(
                    "registers",
                    f"'{distribution}' should register {kind} {missing}; it registered {sorted(mine.get(kind, ()))}",
                )

    def check_cli():
        lines = _listing("cli")
        proc = run_flow(["plugins", "--json"])
        data = {d["name"]: d for d in json.loads(proc.stdout)} if proc.returncode == 0 else {}
        for ep in eps():
            line = lines.get(ep.name)
            want = (distribution, metadata.version(distribution), "entry point", "loaded", ep.value)
            got = (
                None if line is None else (line["dist"], line["version"], line["kind"], line["status"], line["module"])
            )
            if got != want:
                _fail("cli", f"python -m flow plugins shows '{ep.name}' as {got}, expected {want}")
            d = data.get(ep.name)
            if d is None or d["registered"] != _info(ep.name).registered:
                _fail(
                    "cli",
                    f"python -m flow plugins --json gives '{ep.name}' registrations "
                    f"{None if d is None else d['registered']}, this process {_info(ep.name).registered}",
                )

    def check_cli_select():
        for ep in eps():
            for selector in (ep.name, distribution):
                line = _listing("cli_select", FLOW_PLUGINS=selector).get(ep.name)
                if line is None or line["status"] != "loaded":
                    _fail(
                        "cli_select",
                        f"with FLOW_PLUGINS={selector} plugin '{ep.name}' is "
                        f"{'missing' if line is None else line['status']}, expected loaded",
                    )

    def check_cli_skip():
        for env, why in (
            ({"FLOW_DISABLE_PLUGIN_AUTOLOAD": "1"}, "FLOW_DISABLE_PLUGIN_AUTOLOAD"),
            ({"FLOW_PLUGINS": "flow-core"}, "FLOW_PLUGINS"),
        ):
            lines = _listing("cli_skip", **env)
            for ep in eps():
                line = lines.get(ep.name)
                status = "missing" if line is None else line["status"]
                if not (status.startswith("skipped") and why in status):
                    _fail("cli_skip", f"with {env} plugin '{ep.name}' is {status}, expected skipped naming {why}")

    def check_absent():
        code = (
            "import sys\n"
            + "".join(f"sys.modules[{m!r}] = None\n" for m in absent)
            + "import importlib, flow.plugins\n"
            + "".join(f"importlib.import_module({ep.value.split(':')[0]!r})\n" for ep in eps())
            + "info = {i.name: i for i in flow.plugins.list_plugins()}\n"
            + "".join(f"assert info[{ep.name!r}].loaded, info[{ep.name!r}].skipped_reason\n" for ep in eps())
        )
        proc = run_flow([], code)
        if proc.returncode != 0:
            _fail("absent", f"with {absent} unimportable, '{distribution}' fails to import or load:\n{proc.stderr}")

    checks = {
        "entry_point": check_entry_point,
        "hooks": check_hooks,
        "loads": check_loads,
        "registers": check_registers,
        "cli": check_cli,
        "cli_select": check_cli_select,
        "cli_skip": check_cli_skip,
        "absent": check_absent,
    }
    if not absent:
        del checks["absent"]
    return checks


def check_plugin_discovery(distribution: str, **kwargs) -> list[str]:
    """Run every check of the suite for ``distribution``; return their names (raises on the first failure)."""
    checks = discovery_checks(distribution, **kwargs)
    for fn in checks.values():
        fn()
    return list(checks)


def plugin_discovery_suite(
    distribution: str, *, registers: Mapping[str, Iterable[str]] | None = None, absent_modules: Iterable[str] = ()
) -> Callable:
    """A pytest test function, parametrised over the suite's checks, for a plugin package's tests.

    Assign it to a ``test_`` name in a test module::

        test_plugin_discovery = plugin_discovery_suite("flow-example-ops", registers={"ops": ["example_swish"]})
    """
    import pytest

    checks = discovery_checks(distribution, registers=registers, absent_modules=absent_modules)

    @pytest.mark.parametrize("check", list(checks))
    def test_plugin_discovery(check: str) -> None:
        checks[check]()

    test_plugin_discovery.__doc__ = f"'{distribution}' passes flow's plugin discovery suite (flow.testing)."
    return test_plugin_discovery
