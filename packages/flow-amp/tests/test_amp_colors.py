"""The ``amp_color`` table: a colour an op package registers for its op is what autocast applies,
a bad rule is refused clearly at first use, and flow-core's ops carry their default colours."""

from __future__ import annotations

import types

import numpy as np
import pytest

import flow
from flow.errors import FlowError
from flow.plugins import hookimpl
from flow.registry import FLOAT, Attr, schema
from flow_amp import colors as C


def mat(*shape, dtype=flow.float32, seed=0):
    return flow.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).to(dtype)


OP = "amp_test_axpy"


def _axpy_plugin(rule) -> types.ModuleType:
    """A run-time plugin adding ``amp_test_axpy(x, y) = alpha * x + y`` (inputs of one dtype) and
    colouring it with ``rule``, as an op package would."""

    def meta(x, y, alpha):
        if x.dtype is not y.dtype:
            raise flow.errors.OpTypeError(OP, f"x and y must have one dtype, got {x.dtype} and {y.dtype}")
        return flow.ops.meta.TensorMeta(x.shape, x.dtype, x.device)

    mod = types.ModuleType("amp_test_plugin")
    mod.flow_register_ops = hookimpl(
        lambda registry: registry.register_op(schema(OP, ["x", "y"], [Attr("alpha", float, 1.0)], dtypes=FLOAT), meta)
    )
    mod.flow_register_kernels = hookimpl(
        lambda registry: registry.register_kernel(OP, "cpu", lambda x, y, alpha: (alpha * x + y).astype(x.dtype))
    )
    mod.flow_register_rules = hookimpl(lambda registry: registry.register_rule(C.TABLE, OP, rule))
    return mod


@pytest.fixture
def colour_op():
    names = []

    def register(rule):
        names.append(flow.plugins.register(_axpy_plugin(rule), name=f"tests.amp_colour_{len(names)}"))
        return lambda x, y: flow.ops.call(OP, x, y, alpha=2.0)

    yield register
    for name in names:
        flow.plugins.unregister(name)


@pytest.mark.parametrize(
    "rule, x, y, want",
    [
        ("allow", flow.float32, flow.float32, flow.bfloat16),
        ("white", flow.float32, flow.float32, flow.bfloat16),
        ("deny", flow.bfloat16, flow.bfloat16, flow.float32),
        ("promote", flow.bfloat16, flow.float32, flow.float32),
        ("infer", flow.bfloat16, flow.float32, flow.bfloat16),
        ("infer", flow.float32, flow.bfloat16, flow.float32),
        ({"cpu": "deny", "default": "allow"}, flow.bfloat16, flow.bfloat16, flow.float32),
        ({"cuda": "deny", "default": "allow"}, flow.float32, flow.float32, flow.bfloat16),
        ({"cuda": "deny"}, flow.bfloat16, flow.bfloat16, flow.bfloat16),  # nothing for cpu: clear
    ],
    ids=lambda v: v.name if isinstance(v, flow.dtype) else str(v).replace(" ", ""),
)
def test_a_colour_registered_for_an_op_is_applied(colour_op, rule, x, y, want):
    axpy = colour_op(rule)
    a, b = mat(2, 3, dtype=x), mat(2, 3, dtype=y, seed=1)
    with flow.autocast("cpu"):
        out = axpy(a, b)
    assert out.dtype is want
    np.testing.assert_allclose(out.float().numpy(), 2.0 * a.float().numpy() + b.float().numpy(), rtol=2e-2, atol=2e-2)


def test_a_clear_op_gets_its_inputs_as_they_come(colour_op):
    axpy = colour_op("clear")
    with flow.autocast("cpu"):
        assert axpy(mat(2, 3), mat(2, 3)).dtype is flow.float32
        with pytest.raises(TypeError, match=f"{OP}: x and y must have one dtype"):
            axpy(mat(2, 3, dtype=flow.bfloat16), mat(2, 3))


@pytest.mark.parametrize(
    "rule, match",
    [
        ("purple", r"amp_color rule of op 'amp_test_axpy': unknown colour 'purple'; expected one of"),
        ({"cpu": "purple"}, r"op 'amp_test_axpy': unknown colour 'purple'"),
        ({0: "allow"}, r"op 'amp_test_axpy': device types must be strings, got 0"),
        (3, r"op 'amp_test_axpy': expected a colour name or a dict device type -> colour, got int"),
    ],
)
def test_a_bad_rule_raises_a_clear_error_at_first_use(colour_op, rule, match):
    axpy = colour_op(rule)
    assert axpy(mat(2, 3), mat(2, 3)).dtype is flow.float32  # outside autocast nobody reads the table
    with flow.autocast("cpu"):
        with pytest.raises(FlowError, match=match):
            axpy(mat(2, 3), mat(2, 3))
    assert not flow.is_autocast_enabled()


def test_core_colours_are_valid_rules_and_colour_the_registered_ops():
    table = flow.registry.REGISTRY.get_table(C.TABLE)
    for op, rule in C.core_colors().items():
        C.check_rule(op, rule)
        if op in flow.registry.REGISTRY.ops:
            assert table[op] == rule and table.provider(op) == "amp", op
    assert C.color_of(table["matmul"], "cpu") == C.ALLOW
    assert C.color_of(table["softmax"], "cpu") == C.CLEAR
    assert C.color_of(table["softmax"], "cuda") == C.DENY
    assert C.color_of(table["layer_norm"], "cpu") == C.INFER
    assert C.color_of(None, "cpu") == C.CLEAR


@pytest.mark.parametrize(
    "equation, n, want",
    [
        ("ij,jk->ik", 2, C.ALLOW),
        ("i,i->", 2, C.ALLOW),
        ("bij,bjk->bik", 2, C.ALLOW),
        ("ij,jk,kl->il", 3, C.ALLOW),
        ("ij,jk->ijk", 2, C.CLEAR),  # j kept: an elementwise product, no contraction
        ("i,j->ij", 2, C.CLEAR),
        ("ii->i", 1, C.CLEAR),
        ("ij->", 1, C.CLEAR),
    ],
)
def test_einsum_runs_low_only_when_it_contracts_across_operands(equation, n, want):
    assert C.call_color("einsum", C.ALLOW, ([None] * n,), {"equation": equation}) == want
    assert C.call_color("einsum", C.DENY, ([None] * n,), {"equation": equation}) == C.DENY  # a table override wins
