"""flow-example-ops adds `example_swish` (and its SBP rule and AMP colour) through its entry point, and the
op's registrations agree."""

from __future__ import annotations

import functools
import types

import numpy as np
import pytest

import flow
import flow.ops.meta
import flow_example_ops
from flow_example_ops.plugin import AMP_COLOR, swish_sbp_signatures


def np_swish(x: np.ndarray, beta: float) -> np.ndarray:
    return x / (1.0 + np.exp(-beta * x))


def np_swish_grad(x: np.ndarray, beta: float) -> np.ndarray:
    s = 1.0 / (1.0 + np.exp(-beta * x))
    return s + beta * x * s * (1.0 - s)


# flow's plugin discovery suite: entry point, hooks, loading, registrations, `python -m flow plugins`, switches.
test_plugin_discovery = flow.testing.plugin_discovery_suite(
    "flow-example-ops",
    registers={
        "ops": ["example_swish"],
        "kernels": ["example_swish[cpu]"],
        "rules": ["sbp:example_swish", "amp_color:example_swish"],
    },
)


def _table_owner(table: str) -> types.ModuleType:
    """A stand-in for the plugin that owns ``table`` (flow-dist: ``sbp``, flow-amp: ``amp_color``)."""
    mod = types.ModuleType(f"owner_of_{table}")
    mod.flow_register_tables = flow.plugins.hookimpl(lambda registry: registry.declare_table(table))
    return mod


@pytest.mark.parametrize("table", ["sbp", "amp_color"])
def test_its_rules_wait_for_their_table_and_go_in_when_it_is_declared(table):
    reg = flow.registry.REGISTRY
    if table in reg.tables:  # the owning package (flow-dist / flow-amp) is installed and declares it
        assert reg.tables[table].provider("example_swish") == "example_ops"
        return
    assert (table, "example_swish", "example_ops") in reg.pending_rules()
    flow.plugins.register(_table_owner(table), name=f"tests.{table}_owner")
    try:
        t = reg.get_table(table)
        assert "example_swish" in t and t.provider("example_swish") == "example_ops"
    finally:
        flow.plugins.unregister(f"tests.{table}_owner")
    assert (table, "example_swish", "example_ops") in reg.pending_rules()  # queued again


def test_sbp_rule_keeps_splits_and_broadcast_but_not_partial_sums():
    ctx = types.SimpleNamespace(shapes=[(4, 6)], attrs={"beta": 1.0})  # what flow-dist's rule context has
    assert swish_sbp_signatures(ctx) == [(("S(0)",), ("S(0)",)), (("S(1)",), ("S(1)",)), (("B",), ("B",))]
    # each signature holds: slicing the input along the split axis and applying swish piecewise
    # gives the same pieces as slicing the full result
    values = np.linspace(-3.0, 3.0, 24).reshape(4, 6)
    full = flow_example_ops.swish(flow.tensor(values), beta=1.0).numpy()
    for (sbp_in,), (sbp_out,) in swish_sbp_signatures(ctx)[:-1]:
        assert sbp_out == sbp_in  # the output is split like the input
        axis = int(sbp_in[2])
        pieces = [flow_example_ops.swish(flow.tensor(p), beta=1.0).numpy() for p in np.split(values, 2, axis=axis)]
        np.testing.assert_allclose(np.concatenate(pieces, axis=axis), full, rtol=1e-6)
    # a partial sum is not preserved: swish(a) + swish(b) != swish(a + b)
    a, b = values[:2], values[2:]
    lhs = flow_example_ops.swish(flow.tensor(a)).numpy() + flow_example_ops.swish(flow.tensor(b)).numpy()
    assert not np.allclose(lhs, flow_example_ops.swish(flow.tensor(a + b)).numpy())


def test_amp_colour_is_one_of_the_policy_colours():
    assert AMP_COLOR in ("allow", "deny", "promote", "infer", "clear")


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_under_autocast_it_runs_in_the_low_dtype_its_colour_says(low):
    pytest.importorskip("flow_amp", reason="flow-amp (which reads the amp_color table) is not installed")
    low = getattr(flow, low)
    values = np.linspace(-4.0, 4.0, 12).reshape(3, 4)
    x = flow.tensor(values, dtype=flow.float32, requires_grad=True)
    with flow.autocast("cpu", dtype=low):
        y = flow_example_ops.swish(x, beta=1.5)
    assert y.dtype is low  # "allow": a float32 input is cast down first
    tol = 2e-2 if low is flow.bfloat16 else 2e-3
    np.testing.assert_allclose(y.detach().float().numpy(), np_swish(values, 1.5), rtol=tol, atol=tol)
    y.float().sum().backward()
    assert x.grad.dtype is flow.float32  # the gradient comes back through the cast
    np.testing.assert_allclose(x.grad.numpy(), np_swish_grad(values, 1.5), rtol=4 * tol, atol=4 * tol)
    assert flow_example_ops.swish(x).dtype is flow.float32  # and outside the region, as it came


@pytest.mark.parametrize("dtype, tol", [(flow.float32, 1e-6), (flow.float64, 1e-12)])
@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0])
def test_forward_matches_numpy(dtype, tol, beta):
    values = np.linspace(-8.0, 8.0, 33).reshape(3, 11)
    y = flow_example_ops.swish(flow.tensor(values, dtype=dtype), beta=beta)
    assert y.shape == (3, 11)
    assert y.dtype == dtype
    np.testing.assert_allclose(y.numpy(), np_swish(values, beta), rtol=tol, atol=tol)


def test_default_beta_is_one():
    values = np.array([-2.0, 0.0, 3.0])
    np.testing.assert_allclose(flow_example_ops.swish(flow.tensor(values)).numpy(), np_swish(values, 1.0), rtol=1e-6)


@pytest.mark.parametrize("beta", [1.0, 0.7, 3.0])
def test_backward_matches_analytic_derivative(beta):
    values = np.array([[-4.0, -1.0, -0.1], [0.0, 0.5, 5.0]])
    x = flow.tensor(values, dtype=flow.float64, requires_grad=True)
    flow_example_ops.swish(x, beta=beta).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np_swish_grad(values, beta), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [flow_example_ops.swish, functools.partial(flow_example_ops.swish, beta=1.7)])
def test_gradcheck(fn):
    x = flow.tensor(np.linspace(-3.0, 3.0, 7), dtype=flow.float64, requires_grad=True)
    assert flow.testing.gradcheck(fn, (x,))


def test_opcheck():
    flow.testing.opcheck("example_swish")


def test_integer_input_is_rejected_by_the_meta_rule():
    with pytest.raises(TypeError, match="example_swish.*floating-point"):
        flow_example_ops.swish(flow.tensor([1, 2, 3], dtype=flow.int64))


def test_cli_lists_its_queued_rules_where_their_tables_are_not_declared():
    out = flow.testing.plugin_suite.run_flow(["plugins"]).stdout
    for table in ("sbp", "amp_color"):
        if table not in flow.registry.REGISTRY.tables:
            assert f"    {table}:example_swish  from example_ops" in out.split("queued rules")[1]
