"""The registries: ops, kernels, device types, plugin-owned rule tables and graph passes.

Duplicates are errors unless ``override=True`` and name the plugin that registered first;
missing kernels and devices say which op, which device and which installed plugin could
provide them. Plugin-owned tables and the pass ordering are exercised through run-time
plugins, exactly as an installed plugin would use them.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import flow
from flow.errors import KernelNotFoundError, PluginError, RegistrationError
from flow.ops.meta import TensorMeta
from flow.plugins import hookimpl
from flow.registry import REGISTRY, Attr, DeviceType, Registry, RuleTable, schema
from flow.registry.passes import PassRegistry


def _same(x, **attrs):
    return TensorMeta(tuple(x.shape), x.dtype, x.device)


def _dev(name: str, **kw) -> DeviceType:
    return DeviceType(name, np, lambda a, i=None: a, lambda a: a, **kw)


@pytest.fixture
def reg():
    r = Registry()
    r.current_plugin = "first"
    r.register_device_type(_dev("cpu"))
    r.register_op(schema("twice", ["x"], [Attr("k", int, 2)]), meta=_same)
    return r


def _plugin(name: str, **hooks):
    mod = types.ModuleType(name)
    for k, v in hooks.items():
        setattr(mod, k, hookimpl(v))
    return mod


# -- duplicates --------------------------------------------------------------------------------


def test_duplicate_op_is_an_error_naming_the_first_plugin(reg):
    reg.current_plugin = "second"
    with pytest.raises(RegistrationError, match=r"op 'twice' is already registered by plugin 'first'.*override=True"):
        reg.register_op(schema("twice", ["x"]), meta=_same)


def test_override_replaces_an_op_in_place_keeping_kernels_and_handles(reg):
    op = reg._ops["twice"]
    reg.register_kernel("twice", "cpu", lambda x, k: x * k)
    reg.current_plugin = "second"
    new = reg.register_op(schema("twice", ["x"], [Attr("k", int, 3)]), meta=_same, override=True)
    assert new is op and op.plugin == "second" and op.schema.attrs[0].default == 3
    assert ("cpu", None) in op.kernels


def test_duplicate_kernel_is_an_error_unless_override(reg):
    reg.register_kernel("twice", "cpu", lambda x, k: x * k)
    reg.current_plugin = "second"
    with pytest.raises(RegistrationError, match=r"'twice' already has kernel 'default' for device 'cpu'.*'first'"):
        reg.register_kernel("twice", "cpu", lambda x, k: x + x)
    reg.register_kernel("twice", "cpu", lambda x, k: x + k, override=True)
    fn = reg.resolve_kernel(reg._ops["twice"], "cpu", flow.float32)
    assert fn(np.ones(2), k=5).tolist() == [6.0, 6.0]


def test_a_kernel_under_another_name_is_an_alternative_not_a_duplicate(reg):
    reg.register_kernel("twice", "cpu", lambda x, k: x * k)
    reg.register_kernel("twice", "cpu", lambda x, k: x + x, name="blocked")
    assert [e.name for e in reg.kernel_entries(reg._ops["twice"], "cpu", flow.float32)] == ["default", "blocked"]


def test_dtype_specific_kernels_win_over_generic_ones(reg):
    reg.register_kernel("twice", "generic", lambda xp: lambda x, k: xp.full_like(x, 1.0))
    reg.register_kernel("twice", "cpu", lambda x, k: x * 0 + 2, dtypes=[flow.float64])
    op = reg._ops["twice"]
    assert reg.resolve_kernel(op, "cpu", flow.float64)(np.ones(1), k=1).tolist() == [2.0]
    assert reg.resolve_kernel(op, "cpu", flow.float32)(np.ones(1), k=1).tolist() == [1.0]


def test_kernel_for_an_unknown_op_is_an_error(reg):
    with pytest.raises(RegistrationError, match="unknown op 'nope'.*register the op first"):
        reg.register_kernel("nope", "cpu", lambda x: x)


def test_duplicate_device_type_is_an_error_unless_override(reg):
    reg.current_plugin = "second"
    with pytest.raises(RegistrationError, match=r"device type 'cpu' is already registered by plugin 'first'"):
        reg.register_device_type(_dev("cpu"))
    reg.register_device_type(_dev("cpu"), override=True)
    assert reg._device_types["cpu"].plugin == "second"


def test_table_rules_duplicates_and_ownership(reg):
    reg.declare_table("colour", "AMP colours")
    assert reg.declare_table("colour") is reg._tables["colour"]  # idempotent for its owner
    reg.current_plugin = "filler"
    reg.register_rule("colour", "twice", "allow")
    with pytest.raises(RegistrationError, match=r"table 'colour': op 'twice' already has a rule from plugin 'filler'"):
        reg.register_rule("colour", "twice", "deny")
    reg.register_rule("colour", "twice", "deny", override=True)
    assert reg._tables["colour"]["twice"] == "deny" and reg._tables["colour"].provider("twice") == "filler"
    with pytest.raises(RegistrationError, match="already owned by plugin 'first'"):
        reg.declare_table("colour")
    reg.register_rule("sbp", "twice", "S(0)")  # no table 'sbp' yet: queued, not an error
    assert reg.pending_rules() == [("sbp", "twice", "filler")]


def test_duplicate_pass_is_an_error_unless_override():
    p = PassRegistry()
    p.register("dce", lambda ir, c: ir, plugin="first")
    with pytest.raises(RegistrationError, match=r"pass 'dce' is already registered by plugin 'first'"):
        p.register("dce", lambda ir, c: ir, plugin="second")
    p.register("dce", lambda ir, c: None, plugin="second", override=True)
    assert p["dce"].plugin == "second"


def test_provenance_records_who_registered_what(reg):
    reg.register_kernel("twice", "cpu", lambda x, k: x)
    assert reg.provenance["first"] == {"device_types": ["cpu"], "ops": ["twice"], "kernels": ["twice[cpu]"]}


# -- passes ------------------------------------------------------------------------------------


def _names(p: PassRegistry) -> list[str]:
    return [e.name for e in p.ordered()]


def test_pass_order_follows_before_and_after_then_registration_order():
    p = PassRegistry()
    p.register("fuse", lambda ir, c: ir, after="cse")
    p.register("cse", lambda ir, c: ir)
    p.register("dce", lambda ir, c: ir, before=("cse", "fuse"))
    p.register("amp", lambda ir, c: ir, after="dce", before="fuse")
    p.register("memory", lambda ir, c: ir)
    order = _names(p)
    assert order.index("dce") < order.index("cse") < order.index("fuse")
    assert order.index("dce") < order.index("amp") < order.index("fuse")
    assert order == ["dce", "cse", "amp", "fuse", "memory"]


def test_constraints_on_absent_passes_are_ignored():
    p = PassRegistry()
    p.register("sbp", lambda ir, c: ir, before="amp_pass_of_a_plugin_not_installed")
    p.register("dce", lambda ir, c: ir)
    assert _names(p) == ["sbp", "dce"]


def test_pass_cycles_are_detected_and_named():
    p = PassRegistry()
    p.register("a", lambda ir, c: ir, before="b")
    p.register("b", lambda ir, c: ir, before="c")
    p.register("c", lambda ir, c: ir, before="a")
    p.register("d", lambda ir, c: ir)
    with pytest.raises(RegistrationError, match=r"cycle among: \['a', 'b', 'c'\]"):
        p.ordered()


def test_passes_registered_by_plugins_are_ordered_across_plugins():
    first = _plugin(
        "p_first",
        flow_register_passes=lambda registry: registry.register_pass(
            "tests_late", lambda ir, c: ir, after="tests_early"
        ),
    )
    second = _plugin(
        "p_second", flow_register_passes=lambda registry: registry.register_pass("tests_early", lambda ir, c: ir)
    )
    flow.plugins.register(first, name="tests.pass1")
    flow.plugins.register(second, name="tests.pass2")
    try:
        order = _names(REGISTRY.passes)
        assert order.index("tests_early") < order.index("tests_late")
        assert REGISTRY.passes["tests_late"].plugin == "tests.pass1"
    finally:
        flow.plugins.unregister("tests.pass1")
        flow.plugins.unregister("tests.pass2")
    assert "tests_late" not in REGISTRY.passes


# -- plugin-owned rule tables --------------------------------------------------------------------


def test_one_plugin_declares_a_table_another_fills_it_duplicates_error():
    owner = _plugin(
        "colour_owner",
        flow_register_tables=lambda registry: registry.declare_table("tests_colour", doc="op -> allow/deny"),
    )

    def fill(registry):
        registry.register_rule("tests_colour", "matmul", "allow")
        registry.register_rule("tests_colour", "exp", "deny")

    filler = _plugin("colour_filler", flow_register_rules=fill)
    flow.plugins.register(owner, name="tests.colour_owner")
    try:
        flow.plugins.register(filler, name="tests.colour_filler")
        table = REGISTRY.get_table("tests_colour")
        assert isinstance(table, RuleTable) and table.owner == "tests.colour_owner"
        assert dict(table.items()) == {"matmul": "allow", "exp": "deny"}
        assert table.provider("exp") == "tests.colour_filler" and len(table) == 2 and "exp" in table
        # a second plugin giving the same op a rule is a loud error naming the first
        dup = _plugin(
            "colour_dup", flow_register_rules=lambda registry: registry.register_rule("tests_colour", "exp", "allow")
        )
        with pytest.raises(PluginError, match=r"tests\.colour_dup.*already has a rule from plugin 'tests\.colour_fil"):
            flow.plugins.register(dup, name="tests.colour_dup")
        assert table["exp"] == "deny"
        # unregistering the filler removes its rules; the table stays with its owner
        flow.plugins.unregister("tests.colour_filler")
        assert len(table) == 0 and "tests_colour" in REGISTRY.tables
    finally:
        flow.plugins.unregister("tests.colour_owner")
    assert "tests_colour" not in REGISTRY.tables
    with pytest.raises(KeyError, match="tests_colour.*not installed or not loaded"):
        REGISTRY.get_table("tests_colour")


def test_filling_a_table_whose_owner_is_absent_queues_the_rule():
    orphan = _plugin("orphan", flow_register_rules=lambda registry: registry.register_rule("tests_nope", "add", 1))
    flow.plugins.register(orphan, name="tests.orphan")
    try:
        assert ("tests_nope", "add", "tests.orphan") in REGISTRY.pending_rules()
        assert "tests_nope" not in REGISTRY.tables
    finally:
        flow.plugins.unregister("tests.orphan")
    assert not [r for r in REGISTRY.pending_rules() if r[0] == "tests_nope"]


def test_table_lookup_errors_name_table_and_op():
    t = RuleTable("sbp", "dist")
    with pytest.raises(KeyError, match="rule table 'sbp' has no rule for op 'add'"):
        t["add"]
    assert t.get("add", "none") == "none"


# -- missing kernels and devices -------------------------------------------------------------------


def test_missing_kernel_names_op_device_dtype_and_that_no_plugin_provides_it():
    def ops(registry):
        registry.register_op(schema("tests_cpu_only", ["x"]), meta=_same)

    def devs(registry):
        registry.register_device_type(_dev("tests_bare", use_generic_kernels=False))

    def kernels(registry):
        registry.register_kernel("tests_cpu_only", "cpu", lambda x: x)

    flow.plugins.register(
        _plugin("nok", flow_register_ops=ops, flow_register_device_types=devs, flow_register_kernels=kernels),
        name="tests.nok",
    )
    try:
        x = flow.ones(2, device="tests_bare")
        with pytest.raises(KernelNotFoundError) as ei:
            flow.ops.call("tests_cpu_only", x)
        msg = str(ei.value)
        assert "op 'tests_cpu_only'" in msg and "device 'tests_bare'" in msg and "float32" in msg
        assert "it has kernels for: cpu" in msg
        assert "no installed plugin provides it" in msg or "may provide it" in msg
    finally:
        flow.plugins.unregister("tests.nok")


def test_unknown_device_types_name_the_package_that_provides_them():
    with pytest.raises(KernelNotFoundError, match=r"unknown device type 'tpu'; no installed plugin provides it"):
        flow.registry.get_device_type("tpu")
    if "cuda" in REGISTRY.device_types:
        pytest.skip("an installed plugin provides 'cuda'")
    with pytest.raises(KernelNotFoundError, match=r"unknown device type 'cuda'.*'flow-cuda' package"):
        flow.ones(2, device="cuda")


def test_get_op_of_an_unknown_name():
    with pytest.raises(KeyError, match="no op named 'definitely_not_an_op'"):
        flow.registry.get_op("definitely_not_an_op")
    with pytest.raises(KeyError, match="definitely_not_an_op"):
        flow.ops.call("definitely_not_an_op", flow.ones(1))


def test_schema_parsing_and_printing():
    s = schema("cat_like", ["*tensors", "bias?"], [Attr("dim", int, 0), Attr("mode", str, "a", ("a", "b"))])
    assert [(i.name, i.variadic, i.optional) for i in s.inputs] == [("tensors", True, False), ("bias", False, True)]
    assert str(s) == "cat_like(Tensor[] tensors, Tensor? bias, *, dim: int=0, mode: str='a') -> (out)"


def test_attribute_checking_off_the_hot_path(reg):
    op = reg._ops["twice"]
    assert op.check_attrs({}) == {"k": 2}
    with pytest.raises(flow.errors.OpTypeError, match="attribute 'k' must be int"):
        op.check_attrs({"k": "x"})
    with pytest.raises(flow.errors.OpTypeError, match="unexpected attribute 'j'"):
        op.check_attrs({"j": 1})


def test_every_core_op_and_kernel_comes_from_a_builtin_plugin():
    ops = REGISTRY.ops
    assert {op.plugin for op in ops.values()} >= {"flow.ops"}
    assert REGISTRY.device_types["cpu"].plugin == "flow.cpu"
    assert any(e.plugin == "flow.ops" for e in ops["add"].kernels[("generic", None)])
