"""``python -m flow op NAME``: every facet of an op, with file:line and the plugin that registered it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest

import flow
import flow.__main__ as cli
from flow.plugins import hookimpl
from flow.registry import REGISTRY


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(["op", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def source_line(where: str, lines: int = 1) -> str:
    """The text at ``file:line`` as the listing gives it (relative to the working directory), and the
    ``lines - 1`` lines after it (a call the formatter split over several lines)."""
    path, line = where.rsplit(":", 1)
    with open(path, encoding="utf-8") as f:
        return "\n".join(f.read().splitlines()[int(line) - 1 : int(line) - 1 + lines])


def _facet(out: str, label: str) -> str:
    m = re.search(rf"^{label}:\s+(.*)$", out, re.M)
    assert m, f"no '{label}:' line in\n{out}"
    return m.group(1)


def test_every_facet_of_a_core_op_with_its_source_line(capsys):
    rc, out, _ = run_cli(capsys, "add")
    assert rc == 0
    head = out.splitlines()[0]
    m = re.match(r"op add  \(plugin 'flow\.ops', declared at (\S+)\)$", head)
    assert m, head
    assert m.group(1).split(":")[0].endswith("flow/ops/arith.py") and '"add"' in source_line(m.group(1), 2)
    assert _facet(out, "schema") == str(REGISTRY.ops["add"].schema)
    meta = _facet(out, "meta rule")
    fn, where = meta.split()
    assert fn.endswith(REGISTRY.ops["add"].meta.rule.__qualname__)
    assert source_line(where).lstrip().startswith("def ")
    grad_fn, grad_where = _facet(out, "gradient").split()
    assert grad_fn.endswith(REGISTRY.ops["add"].grad.__qualname__) and "def " in source_line(grad_where)
    assert re.search(r"^  generic 'default' \[flow\.ops\] \(factory of xp\): ", out, re.M)
    assert re.search(r"^  cpu: every dtype -> 'default' of plugin '\S+'", out, re.M)  # what dispatch resolves
    assert re.search(r"^  flow\.Tensor\.add_ \(in-place method\)  \S+:\d+$", out, re.M)
    assert re.search(r"^  flow\.add \(function\)  \S+arith\.py:\d+$", out, re.M)
    assert "fusion lowering:" in out and "samples:" in out


def test_resolution_is_shown_per_dtype_where_kernels_are_dtype_specific(capsys):
    op = REGISTRY.ops["gelu"]
    specific = sorted(str(dt) for d, dt in op.kernels if d == "cpu" and dt is not None)
    if not specific:
        pytest.skip("the native CPU kernels are not built")
    rc, out, _ = run_cli(capsys, "gelu")
    line = re.search(r"^  cpu: (.*)$", out, re.M).group(1)
    want = [f"{dt} -> 'default' of plugin 'flow.cpu'" for dt in specific]
    assert rc == 0 and line == "; ".join(want + ["other dtypes -> 'default' of plugin 'flow.ops' (generic)"])


def test_json_has_the_same_facets(capsys):
    rc, out, _ = run_cli(capsys, "matmul", "--json")
    d = json.loads(out)
    assert rc == 0 and d["name"] == "matmul" and d["plugin"] == "flow.ops"
    assert {
        "schema",
        "inputs",
        "attrs",
        "meta",
        "grad",
        "kernels",
        "resolves",
        "fusion",
        "rules",
        "pending_rules",
        "samples",
        "python",
        "bindings",
    } <= set(d)
    assert [i["name"] for i in d["inputs"]] == [i.name for i in REGISTRY.ops["matmul"].schema.inputs]
    assert d["kernels"] and all(k["plugin"] in ("flow.ops", "flow.cpu") for k in d["kernels"])
    assert d["samples"]["count"] == sum(1 for _ in REGISTRY.ops["matmul"].samples())


def test_overrides_rules_queued_rules_and_out_variants_of_a_plugin_show(capsys):
    def fast_exp(xp):
        return lambda x: xp.exp(x)

    def exp_out(xp):
        return lambda x, out=None: xp.exp(x, out=out)

    def kernels(registry):
        registry.register_kernel("exp", "generic", fast_exp, priority=3, out=exp_out)

    def tables(registry):
        registry.declare_table("tests_colours")

    def rules(registry):
        registry.register_rule("tests_colours", "exp", "deny")
        registry.register_rule("tests_undeclared", "exp", "S(0)")

    mod = types.ModuleType("exp_plugin")
    for k, v in {
        "flow_register_kernels": kernels,
        "flow_register_tables": tables,
        "flow_register_rules": rules,
    }.items():
        setattr(mod, k, hookimpl(v))
    flow.plugins.register(mod, name="tests.exp_plugin")
    try:
        rc, out, _ = run_cli(capsys, "exp")
    finally:
        flow.plugins.unregister("tests.exp_plugin")
    assert rc == 0
    line = re.search(
        r"^  generic 'default' \[tests\.exp_plugin, priority 3\] \(factory of xp\): (\S+)  (\S+)$", out, re.M
    )
    assert line and line.group(1).endswith("fast_exp") and "def fast_exp" in source_line(line.group(2))
    assert re.search(r"^      out-variant: \S+exp_out  \S+:\d+$", out, re.M)
    assert re.search(r"^      overrides \[flow\.ops\]: \S+", out, re.M)
    assert "  tests_colours: 'deny' [tests.exp_plugin]" in out
    assert "  tests_undeclared: queued (no loaded plugin declares the table)" in out
    assert _facet(out, "out-variant") == "generic 'default'"


def test_a_plugin_op_is_declared_where_register_op_is_called(capsys):
    from flow.ops.meta import TensorMeta
    from flow.registry import schema

    def ops(registry):
        registry.register_op(schema("tests_cli_op", ["x"]), meta=lambda x: TensorMeta(x.shape, x.dtype, x.device))

    line = ops.__code__.co_firstlineno + 1
    mod = types.ModuleType("cli_op_plugin")
    mod.flow_register_ops = hookimpl(ops)
    flow.plugins.register(mod, name="tests.cli_op")
    try:
        rc, out, _ = run_cli(capsys, "tests_cli_op")
    finally:
        flow.plugins.unregister("tests.cli_op")
    assert rc == 0
    assert out.splitlines()[0].endswith(f"test_op_cli.py:{line})")
    assert "gradient:   none (not differentiable)" in out and "  (none)" in out  # no kernels
    assert "  cpu: every dtype -> no kernel" in out


@pytest.mark.parametrize("name, close", [("sofmax", "softmax"), ("matmull", "matmul")])
def test_an_unknown_op_gives_close_matches_and_status_1(capsys, name, close):
    rc, out, err = run_cli(capsys, name)
    assert rc == 1 and out == ""
    assert f"no op named '{name}' is registered; did you mean:" in err and close in err


def test_as_a_program():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOW_")}
    proc = subprocess.run(
        [sys.executable, "-m", "flow", "op", "relu"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("op relu  (plugin 'flow.ops', declared at ")
    assert np.all(
        [
            f in proc.stdout
            for f in (
                "schema:",
                "meta rule:",
                "gradient:",
                "kernels:",
                "resolves to:",
                "out-variant:",
                "fusion lowering:",
                "rules:",
                "python:",
            )
        ]
    )
