"""Composite ops (flow.ops.composite): functions made of other ops that interceptors may see as one call."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.interceptors import intercept, redispatch, run_op
from flow.ops.composite import COMPOSITES, CompositeOp


@flow.ops.composite("tests_scaled_sum")
def scaled_sum(x, scale=2.0, *rest, k=1, **extra):
    return (x * scale).sum() * k + sum(rest) + sum(extra.values())


def _recorder(log, sees=True, answer=None):
    def fn(op, inputs, attrs):
        log.append((op.name, getattr(op, "is_composite", False), inputs, attrs))
        return answer(op, inputs, attrs) if answer else NotImplemented

    fn.sees_composites = sees
    return fn


def test_without_interceptors_it_is_the_function():
    assert scaled_sum.__name__ == "scaled_sum" and isinstance(scaled_sum.composite_op, CompositeOp)
    assert COMPOSITES["tests_scaled_sum"] is scaled_sum.composite_op
    assert scaled_sum(flow.ones(3)).item() == 6.0
    assert scaled_sum(flow.ones(3), 1.0, 2, 3, k=2, bonus=4).item() == 6 + 5 + 4


def test_an_interceptor_that_sees_composites_gets_the_call_with_inputs_in_signature_order():
    log = []
    x = flow.ones(3)
    with intercept(_recorder(log)):
        out = scaled_sum(x, k=3, bonus=1)
    assert out.item() == 19.0
    name, is_comp, inputs, attrs = log[0]
    assert (name, is_comp) == ("tests_scaled_sum", True)
    assert inputs[0] is x and inputs[1] == 2.0 and attrs == {"k": 3, "bonus": 1}
    assert [e[0] for e in log[1:]] == ["mul", "sum", "mul", "add", "add"]  # then the body's ops


def test_other_interceptors_see_only_the_body():
    log = []
    with intercept(_recorder(log, sees=False)):
        scaled_sum(flow.ones(3))
    assert "tests_scaled_sum" not in [e[0] for e in log] and "mul" in [e[0] for e in log]


def test_a_redispatched_composite_runs_below_the_interceptor_that_answered_it():
    outer, inner = [], []

    def double_scale(op, inputs, attrs):
        if op.name != "tests_scaled_sum":
            return NotImplemented
        return redispatch(op, (inputs[0], inputs[1] * 2) + inputs[2:], attrs)

    with intercept(_recorder(outer)), intercept(_recorder(inner, answer=double_scale)):
        out = scaled_sum(flow.ones(3))
    assert out.item() == 12.0
    assert [e[0] for e in inner] == ["tests_scaled_sum"]  # its body is below the one that answered
    assert [e[0] for e in outer][:3] == ["tests_scaled_sum", "mul", "sum"]
    assert outer[0][2][1] == 4.0  # the outer one sees the changed call


def test_run_op_runs_the_body_below_every_interceptor():
    log = []
    with intercept(_recorder(log)):
        out = run_op(scaled_sum.composite_op, (flow.ones(2), 3.0), {"k": 1})
    assert out.item() == 6.0 and log == []


def test_bad_calls_and_declarations():
    with intercept(_recorder([])):
        with pytest.raises(TypeError, match=r"tests_scaled_sum\(\): missing a required argument"):
            scaled_sum()
    with pytest.raises(ValueError, match="already declared"):
        flow.ops.composite("tests_scaled_sum")(lambda x: x)
    with pytest.raises(TypeError, match="expected an op name"):
        flow.ops.composite("")


def test_core_composites_keep_values_and_gradients_under_an_interceptor():
    rng = np.random.default_rng(0)
    a, b = (flow.tensor(rng.standard_normal((3, 4)), requires_grad=True) for _ in range(2))
    plain = flow.nn.functional.mse_loss(a, b)
    plain.backward()
    ga = a.grad.numpy().copy()
    a.grad = None
    log = []
    with intercept(_recorder(log)):
        seen = flow.nn.functional.mse_loss(a, b)
    seen.backward()
    assert log[0][0] == "mse_loss" and seen.item() == plain.item()
    np.testing.assert_array_equal(a.grad.numpy(), ga)
    for name in ("mse_loss", "cross_entropy", "addmm", "dot", "interpolate", "cdist", "trace"):
        assert name in COMPOSITES


def test_graph_tracing_sees_through_composites():
    x = flow.randn(4, 3)
    y = flow.randn(4, 3)
    step = flow.compile(lambda a, b: flow.nn.functional.mse_loss(a, b) + flow.addmm(a @ b.t(), a, b.t()).sum())
    want = flow.nn.functional.mse_loss(x, y) + flow.addmm(x @ y.t(), x, y.t()).sum()
    np.testing.assert_allclose(step(x, y).numpy(), want.numpy(), rtol=1e-6)
