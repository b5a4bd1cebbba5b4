"""The plugin system: discovery through entry points, lazy and loud loading, the switches
FLOW_DISABLE_PLUGIN_AUTOLOAD / FLOW_PLUGINS, run-time registration, check_pending, and
``python -m flow plugins``.

Entry-point plugins are faked with a ``<name>-<version>.dist-info`` directory (METADATA and
entry_points.txt) and a module in a temporary directory put on ``PYTHONPATH`` of a
subprocess, so nothing is installed and the test process's own registry is untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

import flow
import flow.plugins
from flow.errors import PluginError
from flow.ops.meta import TensorMeta
from flow.plugins import hookimpl
from flow.registry import REGISTRY, schema

# -- helpers -------------------------------------------------------------------------------

GOOD_PLUGIN = """
import numpy as np
from flow.plugins import hookimpl
from flow.registry import schema
from flow.ops.meta import TensorMeta


def _meta(x):
    return TensorMeta(tuple(x.shape), x.dtype, x.device)


@hookimpl
def flow_register_ops(registry):
    registry.register_op(schema("{op}", ["x"]), meta=_meta, grad=lambda ctx, g: (g * 3.0,))


@hookimpl
def flow_register_kernels(registry):
    registry.register_kernel("{op}", "cpu", lambda x: x * 3)
"""


def fake_plugin(root, dist: str, ep_name: str, module: str, source: str, version: str = "0.1") -> None:
    """Write an installed-looking distribution ``dist`` whose entry point ``ep_name`` names ``module``."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[flow.plugins]\n{ep_name} = {module}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(source))


def run_py(code: str, root=None, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with ``root`` on PYTHONPATH and only the given FLOW_ switches."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLOW_")}
    if root is not None:
        e["PYTHONPATH"] = str(root) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True, timeout=300
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def good(tmp_path):
    fake_plugin(tmp_path, "fakeplugin", "fake", "fakeplugin_mod", GOOD_PLUGIN.format(op="fake_triple"))
    return tmp_path


# -- lazy loading ----------------------------------------------------------------------------


def test_nothing_loads_at_import_only_on_first_registry_use(good):
    out = ok(
        run_py(
            """
        import sys
        import flow
        from flow.plugins import manager
        from flow.registry import REGISTRY
        assert not manager.is_loaded()
        assert REGISTRY._ops == {} and REGISTRY._device_types == {}
        assert "fakeplugin_mod" not in sys.modules
        x = flow.ones(3)                  # making a tensor uses no registry
        assert not manager.is_loaded() and "fakeplugin_mod" not in sys.modules
        y = x + 1                         # the first op loads every plugin
        assert manager.is_loaded() and "fakeplugin_mod" in sys.modules
        print(flow.ops.call("fake_triple", y).tolist())
    """,
            good,
        )
    )
    assert out.strip() == "[6.0, 6.0, 6.0]"


@pytest.mark.parametrize(
    "first_use",
    [
        "flow.registry.REGISTRY.ops",
        "flow.registry.REGISTRY.device_types",
        "flow.registry.get_op('add')",
        "flow.plugins.list_plugins()",
        "flow.ops.call('fake_triple', flow.ones(1))",
    ],
)
def test_reading_any_registry_loads_the_plugins(good, first_use):
    ok(
        run_py(
            f"""
        import sys
        import flow
        from flow.plugins import manager
        assert not manager.is_loaded()
        {first_use}
        assert manager.is_loaded() and "fakeplugin_mod" in sys.modules
    """,
            good,
        )
    )


# -- loud failures ---------------------------------------------------------------------------


def test_a_plugin_that_fails_to_import_is_named(tmp_path):
    fake_plugin(tmp_path, "brokenplugin", "broken", "broken_mod", "raise ImportError('no module named cupyx')\n")
    proc = run_py("import flow\nflow.ones(2) + 1\n", tmp_path)
    assert proc.returncode != 0
    err = proc.stderr
    assert "PluginError" in err
    assert "'broken'" in err and "'brokenplugin'" in err and "broken_mod" in err
    assert "no module named cupyx" in err
    assert "FLOW_DISABLE_PLUGIN_AUTOLOAD=1" in err


def test_a_plugin_whose_hook_raises_is_named_with_the_hook(tmp_path):
    fake_plugin(
        tmp_path,
        "hookfail",
        "hookfail",
        "hookfail_mod",
        """
        from flow.plugins import hookimpl

        @hookimpl
        def flow_register_kernels(registry):
            raise RuntimeError("kernel table is corrupt")
    """,
    )
    proc = run_py("import flow\nflow.ones(2) + 1\n", tmp_path)
    assert proc.returncode != 0
    err = proc.stderr
    assert "PluginError" in err and "'hookfail'" in err and "flow_register_kernels" in err
    assert "kernel table is corrupt" in err and "FLOW_DISABLE_PLUGIN_AUTOLOAD" in err


def test_after_a_failed_load_the_next_use_retries_from_scratch(tmp_path):
    fake_plugin(
        tmp_path,
        "hookfail",
        "hookfail",
        "hookfail_mod",
        """
        from flow.plugins import hookimpl
        CALLS = []

        @hookimpl
        def flow_register_passes(registry):
            CALLS.append(1)
            if len(CALLS) == 1:
                raise RuntimeError("first time")
    """,
    )
    out = ok(
        run_py(
            """
        import flow
        from flow.errors import PluginError
        try:
            flow.ones(2) + 1
        except PluginError as e:
            print("failed:", "first time" in str(e))
        print((flow.ones(2) + 1).tolist())
    """,
            tmp_path,
        )
    )
    assert out.split("\n")[:2] == ["failed: True", "[2.0, 2.0]"]


# -- switches --------------------------------------------------------------------------------


def test_disable_autoload_skips_entry_points_but_not_the_builtins(good):
    out = ok(
        run_py(
            """
        import sys, json
        import flow
        print((flow.ones(2) + 1).tolist())
        assert "fakeplugin_mod" not in sys.modules
        info = {i.name: i for i in flow.plugins.list_plugins()}
        assert info["flow.ops"].loaded and info["flow.cpu"].loaded
        print(json.dumps([info["fake"].loaded, info["fake"].skipped_reason, info["fake"].distribution]))
    """,
            good,
            FLOW_DISABLE_PLUGIN_AUTOLOAD="1",
        )
    )
    lines = out.strip().split("\n")
    assert lines[0] == "[2.0, 2.0]"
    loaded, reason, dist = json.loads(lines[1])
    assert not loaded and "FLOW_DISABLE_PLUGIN_AUTOLOAD" in reason and dist == "fakeplugin"


def test_disable_autoload_also_avoids_a_broken_plugin(tmp_path):
    fake_plugin(tmp_path, "brokenplugin", "broken", "broken_mod", "raise ImportError('boom')\n")
    out = ok(run_py("import flow\nprint((flow.ones(2) * 2).tolist())\n", tmp_path, FLOW_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert out.strip() == "[2.0, 2.0]"


@pytest.fixture
def two(tmp_path):
    fake_plugin(tmp_path, "alpha-ops", "alpha", "alpha_mod", GOOD_PLUGIN.format(op="alpha_op"))
    fake_plugin(tmp_path, "beta-ops", "beta", "beta_mod", GOOD_PLUGIN.format(op="beta_op"))
    return tmp_path


LOADED = """
    import sys
    import flow
    flow.registry.REGISTRY.ops
    print(sorted(m for m in ("alpha_mod", "beta_mod") if m in sys.modules))
    print(sorted(n for n in ("alpha_op", "beta_op") if n in flow.registry.REGISTRY.ops))
"""


@pytest.mark.parametrize(
    "selection, expected",
    [
        ("alpha", ["alpha"]),  # by entry-point name
        ("beta-ops", ["beta"]),  # by distribution name
        ("alpha, beta", ["alpha", "beta"]),
        ("flow-core", []),  # only the built-ins
    ],
)
def test_flow_plugins_picks_plugins_by_entry_point_or_distribution(two, selection, expected):
    out = ok(run_py(LOADED, two, FLOW_PLUGINS=selection)).strip().split("\n")
    assert out[0] == str([f"{n}_mod" for n in expected])
    assert out[1] == str([f"{n}_op" for n in expected])


def test_flow_plugins_wins_over_disable_autoload(two):
    out = ok(run_py(LOADED, two, FLOW_PLUGINS="alpha", FLOW_DISABLE_PLUGIN_AUTOLOAD="1")).strip().split("\n")
    assert out[0] == "['alpha_mod']"


def test_flow_plugins_naming_a_missing_plugin_is_an_error(two):
    proc = run_py("import flow\nflow.ones(1) + 1\n", two, FLOW_PLUGINS="alpha,gamma")
    assert proc.returncode != 0 and "PluginError" in proc.stderr and "gamma" in proc.stderr


def test_all_entry_points_load_by_default(two):
    out = ok(run_py(LOADED, two)).strip().split("\n")
    assert out == ["['alpha_mod', 'beta_mod']", "['alpha_op', 'beta_op']"]


def test_skipped_plugins_are_named_when_a_kernel_is_missing(two):
    out = ok(
        run_py(
            """
        import flow
        from flow.errors import KernelNotFoundError
        from flow.registry import DeviceType
        import numpy as np
        reg = flow.registry.REGISTRY
        reg.register_device_type(DeviceType("bare", np, lambda a, i=None: a, lambda a: a,
                                            use_generic_kernels=False))
        try:
            flow.ones(2, device="bare") + 1
        except KernelNotFoundError as e:
            print(e)
    """,
            two,
            FLOW_PLUGINS="alpha",
        )
    )
    assert "op 'add' on device 'bare'" in out
    assert "beta (beta-ops)" in out and "alpha" not in out.split("may provide it:")[1]


# -- python -m flow plugins ------------------------------------------------------------------


def test_cli_lists_plugins_with_distribution_and_registrations(good):
    out = ok(
        run_py("import sys, runpy; sys.argv = ['flow', 'plugins']; runpy.run_module('flow', run_name='__main__')", good)
    )
    lines = out.splitlines()
    fake = [i for i, line in enumerate(lines) if line.startswith("fake ")]
    assert fake, out
    head = lines[fake[0]]
    assert "[fakeplugin 0.1, entry point, loaded]" in head and head.endswith("fakeplugin_mod")
    body = "\n".join(lines[fake[0] + 1 : fake[0] + 3])
    assert "ops: fake_triple" in body and "kernels: fake_triple[cpu]" in body
    assert any(line.startswith("flow.ops  [flow-core") and "builtin, loaded" in line for line in lines)
    assert any(line.startswith("flow.cpu  [flow-core") for line in lines)


def test_cli_json(good):
    proc = subprocess.run(
        [sys.executable, "-m", "flow", "plugins", "--json"],
        capture_output=True,
        text=True,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("FLOW_")},
            "PYTHONPATH": str(good) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        },
        timeout=300,
    )
    data = {d["name"]: d for d in json.loads(ok(proc))}
    assert data["fake"]["distribution"] == "fakeplugin" and data["fake"]["version"] == "0.1"
    assert data["fake"]["loaded"] and not data["fake"]["builtin"]
    assert data["fake"]["registered"] == {"ops": ["fake_triple"], "kernels": ["fake_triple[cpu]"]}
    assert data["flow.ops"]["builtin"] and "add" in data["flow.ops"]["registered"]["ops"]
    assert data["flow.cpu"]["registered"]["device_types"] == ["cpu"]


def test_cli_shows_skipped_plugins_and_why(good):
    out = ok(run_py("import flow.__main__ as m; m.main(['plugins'])", good, FLOW_DISABLE_PLUGIN_AUTOLOAD="1"))
    line = next(x for x in out.splitlines() if x.startswith("fake "))
    assert "skipped: FLOW_DISABLE_PLUGIN_AUTOLOAD is set" in line


def test_cli_reports_a_broken_plugin_and_exits_nonzero(tmp_path):
    fake_plugin(tmp_path, "brokenplugin", "broken", "broken_mod", "raise ImportError('boom')\n")
    proc = run_py("import sys, flow.__main__ as m; sys.exit(m.main(['plugins']))", tmp_path)
    assert proc.returncode == 1
    assert "broken" in proc.stderr and "boom" in proc.stderr
    assert "broken  [brokenplugin 0.1, entry point, not loaded]  broken_mod" in proc.stdout


def test_cli_rejects_unknown_commands():
    proc = run_py("import sys, flow.__main__ as m; sys.exit(m.main(['nope']))")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


# -- run-time plugins, check_pending, unregister -----------------------------------------------


def _module(name: str, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in hooks.items():
        setattr(mod, k, hookimpl(v))
    return mod


def _same(x):
    return TensorMeta(tuple(x.shape), x.dtype, x.device)


def test_check_pending_turns_a_misspelled_hook_into_an_error():
    def flow_register_opz(registry):  # misspelled: flow_register_ops
        raise AssertionError("never called")

    # registering runs the check: the plugin is refused, naming it, the hook and the close spec names
    with pytest.raises(PluginError, match=r"tests\.typo.*flow_register_opz.*did you mean 'flow_register_ops'"):
        flow.plugins.register(_module("typo_plugin", flow_register_opz=flow_register_opz), name="tests.typo")
    assert "tests.typo" not in {i.name for i in flow.plugins.list_plugins()}
    flow.plugins.check_pending()  # clean again


def test_check_pending_accepts_optional_hooks_of_absent_plugins():
    mod = types.ModuleType("optional_hook_plugin")
    mod.flow_dist_sbp_rules = hookimpl(optionalhook=True)(lambda registry: None)
    flow.plugins.register(mod, name="tests.optional")
    try:
        flow.plugins.check_pending()
    finally:
        flow.plugins.unregister("tests.optional")


def test_runtime_register_runs_every_phase_in_order_and_unregister_removes_everything():
    calls = []

    def hook(phase):
        def f(registry):
            calls.append(phase)
            if phase == "flow_register_device_types":
                import numpy as np

                from flow.registry import DeviceType

                registry.register_device_type(DeviceType("tests_dev", np, lambda a, i=None: a, lambda a: a))
            elif phase == "flow_register_ops":
                registry.register_op(schema("tests_rt_op", ["x"]), meta=_same, grad=lambda ctx, g: (g,))
            elif phase == "flow_register_tables":
                registry.declare_table("tests_table")
            elif phase == "flow_register_kernels":
                registry.register_kernel("tests_rt_op", "cpu", lambda x: x + 1)
                registry.register_kernel("add", "tests_dev", lambda a, b: a + b + 100)
            elif phase == "flow_register_rules":
                registry.register_rule("tests_table", "add", "rule")
            elif phase == "flow_register_passes":
                registry.register_pass("tests_pass", lambda ir, config: ir)

        return f

    phases = flow.plugins.manager.PHASES
    mod = _module("rt_plugin", **{p: hook(p) for p in phases})
    flow.plugins.register(mod, name="tests.rt")
    try:
        assert calls == list(phases)
        assert flow.ops.call("tests_rt_op", flow.ones(2)).tolist() == [2.0, 2.0]
        assert (flow.ones(2, device="tests_dev") + flow.ones(2, device="tests_dev")).tolist() == [102.0, 102.0]
        assert REGISTRY.tables["tests_table"]["add"] == "rule"
        info = {i.name: i for i in flow.plugins.list_plugins()}["tests.rt"]
        assert info.loaded and info.distribution == "<runtime>"
        assert info.registered == {
            "device_types": ["tests_dev"],
            "ops": ["tests_rt_op"],
            "tables": ["tests_table"],
            "kernels": ["tests_rt_op[cpu]", "add[tests_dev]"],
            "rules": ["tests_table:add"],
            "passes": ["tests_pass"],
        }
    finally:
        flow.plugins.unregister("tests.rt")
    assert "tests_rt_op" not in REGISTRY.ops and "tests_dev" not in REGISTRY.device_types
    assert "tests_table" not in REGISTRY.tables and "tests_pass" not in REGISTRY.passes
    assert all(k[0] != "tests_dev" for k in flow.registry.get_op("add").kernels)
    assert "tests.rt" not in {i.name for i in flow.plugins.list_plugins()}
    with pytest.raises(KeyError, match="tests_rt_op"):
        flow.ops.call("tests_rt_op", flow.ones(2))  # the cached handle was reset too
    assert (flow.ones(2) + 1).tolist() == [2.0, 2.0]


def test_a_failing_runtime_plugin_is_rolled_back():
    def ops(registry):
        registry.register_op(schema("tests_half_done", ["x"]), meta=_same)

    def kernels(registry):
        raise ValueError("no kernels today")

    mod = _module("half_plugin", flow_register_ops=ops, flow_register_kernels=kernels)
    with pytest.raises(PluginError, match=r"'tests\.half'.*flow_register_kernels.*no kernels today"):
        flow.plugins.register(mod, name="tests.half")
    assert "tests_half_done" not in REGISTRY.ops
    assert "tests.half" not in {i.name for i in flow.plugins.list_plugins()}
    flow.plugins.register(_module("half_plugin2"), name="tests.half")  # the name is free again
    flow.plugins.unregister("tests.half")


def test_runtime_names_must_be_unique_and_builtins_stay():
    flow.plugins.register(_module("p1"), name="tests.dup")
    try:
        with pytest.raises(PluginError, match="already registered"):
            flow.plugins.register(_module("p2"), name="tests.dup")
    finally:
        flow.plugins.unregister("tests.dup")
    with pytest.raises(PluginError, match="built-in"):
        flow.plugins.unregister("flow.ops")
    with pytest.raises(PluginError, match="no flow plugin named 'tests.never'"):
        flow.plugins.unregister("tests.never")


def test_a_plugin_can_add_hookspecs_that_other_plugins_implement():
    spec_mod = types.ModuleType("tests_specs")
    spec_mod.tests_contribute = flow.plugins.hookspecs.hookspec(lambda registry: None)
    seen = []

    def add_specs(plugin_manager):
        plugin_manager.add_hookspecs(spec_mod)

    def loaded(registry):
        seen.extend(flow.plugins.get_plugin_manager().hook.tests_contribute(registry=registry))

    owner = _module("owner", flow_add_hookspecs=add_specs, flow_plugin_loaded=loaded)
    # optionalhook: the contributor is registered before the plugin that declares its hook
    contributor = types.ModuleType("contrib")
    contributor.tests_contribute = hookimpl(optionalhook=True)(lambda registry: "from contributor")
    flow.plugins.register(contributor, name="tests.contrib")
    flow.plugins.register(owner, name="tests.owner")
    try:
        assert seen == ["from contributor"]
        flow.plugins.check_pending()  # the contributor's hook now has a spec
    finally:
        flow.plugins.unregister("tests.owner")
        flow.plugins.unregister("tests.contrib")


def test_kernels_may_target_ops_of_plugins_loaded_later(tmp_path):
    # "aaa" sorts (and loads) first, but registers a kernel for an op "zzz" declares: phases make it work.
    fake_plugin(
        tmp_path,
        "aaa-kernels",
        "aaa",
        "aaa_mod",
        """
        from flow.plugins import hookimpl

        @hookimpl
        def flow_register_kernels(registry):
            registry.register_kernel("zzz_op", "cpu", lambda x: x * 10)
    """,
    )
    fake_plugin(
        tmp_path,
        "zzz-ops",
        "zzz",
        "zzz_mod",
        """
        from flow.plugins import hookimpl
        from flow.registry import schema
        from flow.ops.meta import TensorMeta

        @hookimpl
        def flow_register_ops(registry):
            registry.register_op(schema("zzz_op", ["x"]), meta=lambda x: TensorMeta(tuple(x.shape), x.dtype, x.device))
    """,
    )
    out = ok(run_py("import flow\nprint(flow.ops.call('zzz_op', flow.ones(2)).tolist())", tmp_path))
    assert out.strip() == "[10.0, 10.0]"
