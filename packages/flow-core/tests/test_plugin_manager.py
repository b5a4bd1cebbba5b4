"""The plugin manager's guarantees: misspelled hooks stop the load, priorities and overrides decide
contested registrations (and the listing shows who won), rules for undeclared tables are queued,
and removing a plugin removes what it registered and gives back what it overrode.

Registry-level behaviour is checked on fresh :class:`Registry` objects; the process registry is
only changed through run-time plugins that each test removes again; load-time behaviour runs in
subprocesses with fake installed distributions (helpers from ``test_plugins``).
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
from test_plugins import fake_plugin, ok, run_py

import flow
from flow.errors import PluginError, RegistrationError
from flow.ops.meta import TensorMeta
from flow.plugins import hookimpl
from flow.registry import REGISTRY, Attr, DeviceType, Registry, schema


def _same(x, **attrs):
    return TensorMeta(tuple(x.shape), x.dtype, x.device)


def _dev(name: str, **kw) -> DeviceType:
    return DeviceType(name, np, lambda a, i=None: a, lambda a: a, **kw)


def _module(name: str, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in hooks.items():
        setattr(mod, k, hookimpl(v))
    return mod


@pytest.fixture
def reg():
    r = Registry()
    r.current_plugin = "base"
    r.register_device_type(_dev("cpu"))
    r.register_op(schema("twice", ["x"], [Attr("k", int, 2)]), meta=_same)
    r.register_kernel("twice", "cpu", lambda x, k: x * k)
    return r


def _kernel(reg, op="twice", dev="cpu"):
    return reg.resolve_kernel(reg._ops[op], dev, flow.float32)


# -- 1. misspelled hooks ---------------------------------------------------------------------------


def test_a_misspelled_hook_stops_the_load_naming_plugin_distribution_and_close_hooks(tmp_path):
    fake_plugin(
        tmp_path,
        "typo-ops",
        "typo",
        "typo_mod",
        """
        from flow.plugins import hookimpl

        @hookimpl
        def flow_register_kernel(registry):   # flow_register_kernels
            pass
    """,
    )
    proc = run_py("import flow\nflow.ones(2) + 1\n", tmp_path)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()[-1]
    assert "PluginError" in err and "'typo'" in err and "'typo-ops'" in err
    assert "'flow_register_kernel'" in err and "did you mean 'flow_register_kernels'" in err
    assert "optionalhook=True" in err


def test_an_optional_hook_of_an_absent_plugin_loads(tmp_path):
    fake_plugin(
        tmp_path,
        "opt-ops",
        "opt",
        "opt_mod",
        """
        from flow.plugins import hookimpl

        @hookimpl(optionalhook=True)
        def flow_dist_sbp_rules(registry):
            pass
    """,
    )
    out = ok(run_py("import flow\nprint((flow.ones(2) + 1).tolist())\n", tmp_path))
    assert out.strip() == "[2.0, 2.0]"


def test_a_refused_runtime_plugin_leaves_nothing_behind():
    mod = _module(
        "typo2",
        flow_register_ops=lambda registry: registry.register_op(schema("tests_typo_op", ["x"]), meta=_same),
        flow_register_passez=lambda registry: None,
    )
    with pytest.raises(PluginError, match=r"'tests\.typo2'.*flow_register_passez.*'flow_register_passes'"):
        flow.plugins.register(mod, name="tests.typo2")
    assert "tests_typo_op" not in REGISTRY.ops
    assert flow.plugins.get_plugin_manager().get_plugin("tests.typo2") is None


# -- 2. priorities and overrides -----------------------------------------------------------------


def test_an_accidental_duplicate_kernel_still_raises(reg):
    reg.current_plugin = "other"
    with pytest.raises(RegistrationError, match=r"already has kernel 'default' for device 'cpu' from plugin 'base'"):
        reg.register_kernel("twice", "cpu", lambda x, k: x)
    assert _kernel(reg)(np.ones(1), k=3).tolist() == [3.0]  # unchanged


@pytest.mark.parametrize("fast_first", [True, False])
def test_the_higher_priority_kernel_wins_in_either_load_order(fast_first):
    r = Registry()
    r.current_plugin = "core"
    r.register_device_type(_dev("cpu"))
    r.register_op(schema("twice", ["x"]), meta=_same)

    def fast():
        r.current_plugin = "fast"
        r.register_kernel("twice", "cpu", lambda x: x * 20, priority=10)

    def slow():
        r.current_plugin = "slow"
        r.register_kernel("twice", "cpu", lambda x: x * 2)

    for f in (fast, slow) if fast_first else (slow, fast):
        f()
    assert _kernel(r)(np.ones(1)).tolist() == [20.0]
    [c] = r.contested()
    assert c == {
        "what": "kernel twice[cpu]",
        "winner": "fast",
        "priority": 10,
        "over": [{"plugin": "slow", "priority": 0}],
    }
    r.remove_plugin("fast")
    assert _kernel(r)(np.ones(1)).tolist() == [2.0]  # what it overrode is back
    assert r.contested() == []


def test_override_wins_at_the_same_priority_and_removal_restores(reg):
    original = reg._ops["twice"].kernels[("cpu", None)][0]
    reg.current_plugin = "patch"
    reg.register_kernel("twice", "cpu", lambda x, k: x + 100, override=True)
    assert _kernel(reg)(np.ones(1), k=2).tolist() == [101.0]
    assert reg.contested()[0]["winner"] == "patch"
    reg.remove_plugin("patch")
    assert reg._ops["twice"].kernels[("cpu", None)] == [original]
    assert _kernel(reg)(np.ones(1), k=2).tolist() == [2.0]


def test_a_lower_priority_override_loses_to_an_explicit_higher_one(reg):
    reg.current_plugin = "tuned"
    reg.register_kernel("twice", "cpu", lambda x, k: x * 0 + 7, priority=5)
    reg.current_plugin = "late"
    reg.register_kernel("twice", "cpu", lambda x, k: x * 0 + 1, priority=1)
    assert _kernel(reg)(np.ones(1), k=2).tolist() == [7.0]
    reg.remove_plugin("tuned")
    assert _kernel(reg)(np.ones(1), k=2).tolist() == [1.0]
    reg.remove_plugin("late")
    assert _kernel(reg)(np.ones(1), k=2).tolist() == [2.0]


def test_device_type_and_op_overrides_are_restored(reg):
    op = reg._ops["twice"]
    reg.current_plugin = "other"
    reg.register_device_type(_dev("cpu", use_generic_kernels=False), priority=3)
    assert reg._device_types["cpu"].plugin == "other"
    new = reg.register_op(schema("twice", ["x"], [Attr("k", int, 9)]), meta=_same, override=True)
    assert new is op and op.schema.attrs[0].default == 9 and op.plugin == "other"
    assert ("cpu", None) in op.kernels  # kernels of the base op stay
    reg.remove_plugin("other")
    assert reg._device_types["cpu"].plugin == "base" and reg._device_types["cpu"].use_generic_kernels
    assert reg._ops["twice"] is op and op.schema.attrs[0].default == 2 and op.plugin == "base"


def test_pass_override_keeps_its_place_and_is_restored():
    r = Registry()
    r.current_plugin = "core"
    r.register_pass("a", lambda ir, c: ir)
    r.register_pass("b", lambda ir, c: ir)
    r.current_plugin = "mine"

    def better(ir, c):
        return ir

    r.register_pass("a", better, override=True)
    assert [e.name for e in r._passes.ordered()] == ["a", "b"] and r._passes["a"].fn is better
    r.remove_plugin("mine")
    assert r._passes["a"].plugin == "core" and r._passes["a"].fn is not better
    assert [e.name for e in r._passes.ordered()] == ["a", "b"]


def test_the_process_registry_takes_a_priority_kernel_and_gives_the_core_one_back():
    before = list(flow.registry.get_op("exp").kernels[("generic", None)])
    mod = _module(
        "fast_exp",
        flow_register_kernels=lambda registry: registry.register_kernel(
            "exp", "generic", lambda xp: lambda x: xp.exp(x) + 1000, priority=10
        ),
    )
    flow.plugins.register(mod, name="tests.fast_exp")
    try:
        assert flow.exp(flow.zeros(2)).tolist() == [1001.0, 1001.0]
        won = [c for c in REGISTRY.contested() if c["what"] == "kernel exp[generic]"]
        assert won and won[0]["winner"] == "tests.fast_exp" and won[0]["over"][0]["plugin"] == "flow.ops"
        data = {d["name"]: d for d in flow.plugins.manager.describe()}
        assert won[0] in data["tests.fast_exp"]["contested"] and won[0] in data["flow.ops"]["contested"]
    finally:
        flow.plugins.unregister("tests.fast_exp")
    assert flow.registry.get_op("exp").kernels[("generic", None)] == before
    assert flow.exp(flow.zeros(2)).tolist() == [1.0, 1.0]


def test_cli_shows_who_won_each_contested_registration(tmp_path):
    fake_plugin(
        tmp_path,
        "fast-exp",
        "fastexp",
        "fastexp_mod",
        """
        import numpy as np
        from flow.plugins import hookimpl

        @hookimpl
        def flow_register_kernels(registry):
            registry.register_kernel("exp", "cpu", np.exp, priority=5)
    """,
    )
    # a second plugin at the default priority loses, though it loads later (names sort after)
    fake_plugin(
        tmp_path,
        "slow-exp",
        "slowexp",
        "slowexp_mod",
        """
        import numpy as np
        from flow.plugins import hookimpl

        @hookimpl
        def flow_register_kernels(registry):
            registry.register_kernel("exp", "cpu", lambda x: np.exp(x) * 0)
    """,
    )
    out = ok(run_py("import flow.__main__ as m; m.main(['plugins'])", tmp_path))
    section = out.split("contested registrations (winner first):")[1]
    assert "    kernel exp[cpu]: fastexp (priority 5) over slowexp (priority 0)" in section
    assert ok(run_py("import flow; print(flow.exp(flow.zeros(1)).tolist())", tmp_path)).strip() == "[1.0]"


# -- 3. queued rules -------------------------------------------------------------------------------


def test_a_rule_waits_for_its_table_and_goes_back_to_the_queue_with_its_owner():
    filler = _module(
        "filler", flow_register_rules=lambda registry: registry.register_rule("tests_sbp", "add", ("S(0)", "S(0)"))
    )
    owner = _module("owner", flow_register_tables=lambda registry: registry.declare_table("tests_sbp"))
    flow.plugins.register(filler, name="tests.filler")
    try:
        assert ("tests_sbp", "add", "tests.filler") in REGISTRY.pending_rules()
        data = {d["name"]: d for d in flow.plugins.manager.describe()}
        assert data["tests.filler"]["pending_rules"] == ["tests_sbp:add"]
        flow.plugins.register(owner, name="tests.owner")
        t = REGISTRY.get_table("tests_sbp")
        assert t["add"] == ("S(0)", "S(0)") and t.provider("add") == "tests.filler"
        assert not [r for r in REGISTRY.pending_rules() if r[0] == "tests_sbp"]
        flow.plugins.unregister("tests.owner")
        assert "tests_sbp" not in REGISTRY.tables
        assert ("tests_sbp", "add", "tests.filler") in REGISTRY.pending_rules()
        flow.plugins.register(owner, name="tests.owner")
        assert REGISTRY.get_table("tests_sbp")["add"] == ("S(0)", "S(0)")
        flow.plugins.unregister("tests.owner")
    finally:
        flow.plugins.unregister("tests.filler")
    assert not [r for r in REGISTRY.pending_rules() if r[0] == "tests_sbp"]


def test_queued_rules_are_checked_for_duplicates(reg):
    reg.current_plugin = "a"
    reg.register_rule("colour", "twice", "allow")
    reg.current_plugin = "b"
    with pytest.raises(RegistrationError, match=r"table 'colour': op 'twice' already has a rule from plugin 'a'"):
        reg.register_rule("colour", "twice", "deny")
    reg.register_rule("colour", "twice", "deny", priority=1)
    reg.current_plugin = "amp"
    t = reg.declare_table("colour")
    assert t["twice"] == "deny" and t.provider("twice") == "b"
    reg.remove_plugin("b")
    assert t["twice"] == "allow" and t.provider("twice") == "a"


def test_cli_lists_queued_rules(tmp_path):
    fake_plugin(
        tmp_path,
        "rule-ops",
        "ruleops",
        "ruleops_mod",
        """
        from flow.plugins import hookimpl

        @hookimpl
        def flow_register_rules(registry):
            registry.register_rule("tests_never_declared", "mul", "B")
    """,
    )
    out = ok(run_py("import flow.__main__ as m; m.main(['plugins'])", tmp_path))
    queued = out.split("queued rules (no loaded plugin declares their table yet):")[1]
    assert "    tests_never_declared:mul  from ruleops" in queued
    data = {
        d["name"]: d
        for d in json.loads(ok(run_py("import flow.__main__ as m; m.main(['plugins', '--json'])", tmp_path)))
    }
    assert data["ruleops"]["pending_rules"] == ["tests_never_declared:mul"]


# -- 4. remove_plugin ------------------------------------------------------------------------------


def test_remove_plugin_removes_everything_it_registered():
    r = Registry()
    r.current_plugin = "core"
    r.register_device_type(_dev("cpu"))
    r.register_op(schema("keep", ["x"]), meta=_same)
    r.current_plugin = "extra"
    r.register_device_type(_dev("xdev"))
    r.register_op(schema("gone", ["x"]), meta=_same)
    r.register_kernel("gone", "cpu", lambda x: x)
    r.register_kernel("keep", "xdev", lambda x: x)
    r.declare_table("xt")
    r.register_rule("xt", "keep", 1)
    r.register_pass("xpass", lambda ir, c: ir)
    r.current_plugin = "third"
    r.register_kernel("gone", "xdev", lambda x: x)  # on the op that goes: goes with it
    r.register_rule("xt", "gone", 2)  # in the table that goes: queued again
    r.remove_plugin("extra")
    assert set(r._ops) == {"keep"} and set(r._device_types) == {"cpu"}
    assert r._ops["keep"].kernels == {} and "xt" not in r._tables and "xpass" not in r._passes
    assert r.pending_rules() == [("xt", "gone", "third")]
    assert "extra" not in r.provenance
    # the op can be declared afresh, without an override
    r.current_plugin = "again"
    r.register_op(schema("gone", ["x"]), meta=_same)
    assert r._ops["gone"].kernels == {}


# -- op modules are discovered ---------------------------------------------------------------------


def test_a_new_module_in_flow_ops_is_found_without_being_listed(tmp_path):
    (tmp_path / "tests_walked_ops.py").write_text(
        "from flow.ops._define import defop, kernel\n"
        "from flow.ops.meta import TensorMeta\n"
        "from flow.registry.ops import ANY\n\n"
        "WALKED = defop('tests_walked', ['x'], meta=lambda x: TensorMeta(tuple(x.shape), x.dtype, x.device),\n"
        "               dtypes=ANY)\n\n\n"
        "@kernel(WALKED)\n"
        "def _k(xp):\n"
        "    return lambda x: x * 7\n"
    )
    out = ok(
        run_py(f"""
        import flow.ops
        flow.ops.__path__.append({str(tmp_path)!r})   # as if the file were in the package's directory
        import flow
        from flow.ops.plugin import op_modules
        assert "flow.ops.tests_walked_ops" in op_modules() and "flow.ops.plugin" not in op_modules()
        print(flow.ops.call("tests_walked", flow.ones(2)).tolist())
        print(flow.registry.REGISTRY.ops["tests_walked"].plugin)
    """)
    )
    assert out.split() == ["[7.0,", "7.0]", "flow.ops"]


def test_every_public_module_of_flow_ops_is_imported_when_the_plugins_load():
    import pkgutil
    import sys

    import flow.ops
    from flow.ops.plugin import op_modules

    flow.registry.REGISTRY.ops  # noqa: B018 - loads the plugins
    public = {
        f"flow.ops.{m.name}"
        for m in pkgutil.iter_modules(flow.ops.__path__)
        if not m.name.startswith("_") and m.name != "plugin"
    }
    assert public <= set(op_modules()) and all(m in sys.modules for m in public)
