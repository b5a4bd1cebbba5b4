"""The eager dispatcher: its lean hot path, the chain of eager interceptors, the meta-rule
check, and a second device type (the shape-only ``meta`` test device) going through it all.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import flow
import flow.interceptors as I
from flow import _dispatch
from flow.errors import FlowError, OpError, OpTypeError
from flow.ops.meta import TensorMeta
from flow.plugins import hookimpl
from flow.registry import Attr, schema

# -- the hot path does no extra work -------------------------------------------------------------


def _python_calls(fn) -> list[str]:
    """Names ``module:function`` of every Python function ``fn()`` calls (C calls are left out)."""
    seen: list[str] = []

    def prof(frame, event, arg):
        if event == "call":
            seen.append(f"{frame.f_globals.get('__name__')}:{frame.f_code.co_name}")

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return [s for s in seen if not s.endswith(":<lambda>") and "test_dispatch" not in s]


def test_an_op_with_no_interceptor_active_calls_only_the_dispatcher():
    a, b = flow.ones(3), flow.ones(3)
    a + b  # warm: kernels resolved, plugins loaded
    calls = _python_calls(lambda: a + b)
    assert calls == ["flow._methods.elementwise:__add__", "flow._dispatch:binary", "flow._dispatch:execute"]


def test_with_autograd_it_adds_only_the_node_record():
    a, b = flow.ones(3, requires_grad=True), flow.ones(3)
    a * b
    calls = _python_calls(lambda: a * b)
    assert calls == [
        "flow._methods.elementwise:__mul__",
        "flow._dispatch:binary",
        "flow._dispatch:execute",
        "flow.autograd.node:record",
    ]


def test_the_hot_path_never_touches_plugins_registries_or_interceptors():
    x, w = flow.randn(4, 4, requires_grad=True), flow.randn(4, 4)

    def step():
        y = (x @ w).relu() * 2.0 + 1
        y.sum().backward()

    step()
    mods = {c.split(":")[0] for c in _python_calls(step)}
    assert not {m for m in mods if m.startswith(("flow.plugins", "flow.registry", "pluggy", "flow.interceptors"))}
    assert "flow._dispatch:_intercepted" not in _python_calls(step)


def test_an_active_interceptor_is_consulted_once_per_op():
    seen = []
    a = flow.ones(2)
    with I.intercept(lambda op, inputs, attrs: seen.append(op.name) or NotImplemented):
        (a + 1) * 2
    assert seen == ["add", "mul"]
    b = a + 1  # and not after the block
    assert seen == ["add", "mul"] and b.tolist() == [2.0, 2.0]


# -- interceptors ------------------------------------------------------------------------------


def test_an_interceptor_sees_op_inputs_and_attrs_and_can_answer():
    log = []

    def spy(op, inputs, attrs):
        log.append((op.name, inputs, dict(attrs)))
        if op.name == "sum":
            return flow.tensor(42.0)
        return NotImplemented

    x = flow.tensor([[1.0, 2.0], [3.0, 4.0]])
    with I.intercept(spy) as fn:
        assert fn is spy and I.active() == (spy,)
        y = x * 2  # scalar promoted: the interceptor sees what the op sees
        s = flow.sum(y, dim=1, keepdim=True)
    assert I.active() == ()
    assert s.item() == 42.0
    name, inputs, attrs = log[0]
    assert name == "mul" and inputs[0] is x and float(inputs[1]) == 2.0 and attrs == {}
    name, inputs, attrs = log[1]
    assert name == "sum" and inputs[0].tolist() == [[2.0, 4.0], [6.0, 8.0]]
    assert attrs == {"dim": (1,), "keepdim": True}


def test_interceptors_nest_innermost_first_and_an_interceptor_never_sees_its_own_calls():
    order = []

    def outer(op, inputs, attrs):
        order.append(("outer", op.name))
        return NotImplemented

    def inner(op, inputs, attrs):
        order.append(("inner", op.name))
        if op.name == "mul":
            # answer mul with an add of its own: outer sees that add, inner does not
            return flow.add(inputs[0], inputs[1])
        return NotImplemented

    with I.intercept(outer):
        with I.intercept(inner):
            assert I.active() == (outer, inner)
            r = flow.ones(2) * flow.full((2,), 3.0)
        r2 = flow.ones(2) * 3.0
    assert r.tolist() == [4.0, 4.0] and r2.tolist() == [3.0, 3.0]
    assert order == [("inner", "mul"), ("outer", "add"), ("outer", "mul")]


def test_redispatch_passes_a_changed_call_outward_and_run_op_skips_the_chain():
    calls = []

    def outer(op, inputs, attrs):
        calls.append(("outer", op.name, [t.dtype for t in inputs if isinstance(t, flow.Tensor)]))
        return NotImplemented

    def to_double(op, inputs, attrs):  # an autocast-like interceptor
        if op.name != "mul":
            return NotImplemented
        cast = tuple(t.double() if isinstance(t, flow.Tensor) else t for t in inputs)
        return I.redispatch(op, cast, attrs)

    with I.intercept(outer), I.intercept(to_double):
        y = flow.ones(2) * flow.ones(2)
        z = I.run_op(flow.registry.get_op("mul"), (flow.ones(2), flow.ones(2)))
    assert y.dtype is flow.float64 and z.dtype is flow.float32
    assert ("outer", "mul", [flow.float64, flow.float64]) in calls
    assert calls.count(("outer", "cast", [flow.float32])) == 2  # the casts to_double made, seen outside only


def test_interceptor_results_take_part_in_autograd():
    def double_exp(op, inputs, attrs):
        if op.name == "exp":
            return I.redispatch(op, inputs, attrs) * 2
        return NotImplemented

    x = flow.tensor([0.0, 1.0], requires_grad=True)
    with I.intercept(double_exp):
        y = x.exp()
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([0.0, 1.0]), rtol=1e-6)


def test_an_interceptor_that_raises_leaves_the_chain_intact():
    def boom(op, inputs, attrs):
        raise RuntimeError("interceptor failed")

    with pytest.raises(RuntimeError, match="interceptor failed"):
        with I.intercept(boom):
            flow.ones(2) + 1
    assert I.active() == () and _dispatch._CHAIN.visible is None
    assert (flow.ones(2) + 1).tolist() == [2.0, 2.0]


def test_push_and_pop_errors():
    with pytest.raises(TypeError, match="callable"):
        _dispatch.push_interceptor(42)
    with pytest.raises(ValueError, match="not active"):
        _dispatch.pop_interceptor(lambda *a: None)


# -- the meta rule check ------------------------------------------------------------------------


@pytest.fixture
def counted_op():
    calls = []

    def meta(x, y, scale=1.0, **attrs):
        calls.append((tuple(x.shape), tuple(y.shape), scale))
        if tuple(x.shape) != tuple(y.shape):
            raise OpError("tests_scaled_add", f"shapes differ: {tuple(x.shape)} vs {tuple(y.shape)}")
        return TensorMeta(tuple(x.shape), x.dtype, x.device)

    mod = types.ModuleType("counted")
    mod.flow_register_ops = hookimpl(
        lambda registry: registry.register_op(
            schema("tests_scaled_add", ["x", "y"], [Attr("scale", float, 1.0), Attr("tag", object, None)]), meta=meta
        )
    )
    mod.flow_register_kernels = hookimpl(
        lambda registry: registry.register_kernel(
            "tests_scaled_add", "cpu", lambda x, y, scale=1.0, tag=None: x + y * scale
        )
    )
    flow.plugins.register(mod, name="tests.counted")
    yield calls
    flow.plugins.unregister("tests.counted")


def test_the_meta_rule_runs_once_per_input_signature(counted_op):
    call = flow.ops.call
    a, b = flow.ones(2, 3), flow.ones(2, 3)
    for _ in range(3):
        call("tests_scaled_add", a, b, scale=2.0)
    assert counted_op == [((2, 3), (2, 3), 2.0)]
    call("tests_scaled_add", a, b, scale=3.0)  # another attribute value
    call("tests_scaled_add", a.double(), b.double(), scale=3.0)  # another dtype
    call("tests_scaled_add", flow.ones(4), flow.ones(4), scale=3.0)  # another shape
    assert len(counted_op) == 4
    call("tests_scaled_add", a, b, scale=3)  # an int where a float was: a separate signature
    assert len(counted_op) == 5


def test_meta_errors_are_raised_every_time_and_never_cached(counted_op):
    for _ in range(2):
        with pytest.raises(OpError, match=r"tests_scaled_add: shapes differ: \(2, 3\) vs \(3,\)"):
            flow.ops.call("tests_scaled_add", flow.ones(2, 3), flow.ones(3))
    assert len(counted_op) == 2


def test_unhashable_attributes_skip_the_cache(counted_op):
    a = flow.ones(2)
    for _ in range(2):
        assert flow.ops.call("tests_scaled_add", a, a, tag=[1, 2]).tolist() == [2.0, 2.0]
    assert len(counted_op) == 2


def test_the_meta_cache_is_bounded(counted_op, monkeypatch):
    monkeypatch.setattr(_dispatch, "_META_CACHE_SIZE", 4)
    for n in range(1, 11):
        flow.ops.call("tests_scaled_add", flow.ones(n), flow.ones(n))
    op = flow.registry.get_op("tests_scaled_add")
    assert len(op._mcache) <= 4 and len(counted_op) == 10


def test_a_kernel_failure_is_explained_by_the_meta_rule():
    # elementwise ops skip the meta rule up front; when the kernel fails, the rule explains why
    with pytest.raises(OpError, match=r"add: shapes \[\(2, 3\), \(4,\)\] cannot be broadcast") as ei:
        flow.ones(2, 3) + flow.ones(4)
    assert "Traceback" not in str(ei.value)


def test_call_accepts_names_handles_and_opdefs():
    x = flow.ones(2)
    op = flow.registry.get_op("neg")
    assert flow.ops.call("neg", x).tolist() == [-1.0, -1.0]
    assert flow.ops.call(flow.ops.unary.NEG, x).tolist() == [-1.0, -1.0]
    assert flow.ops.call(op, x).tolist() == [-1.0, -1.0]
    with pytest.raises(OpTypeError, match="expected at least one Tensor"):
        flow.ops.call("neg", 1.0)
    with pytest.raises(TypeError, match="expected an op name, handle or OpDef, got builtin_function"):
        flow.ops.call(len, x)


# -- a second device type: the shape-only meta device ----------------------------------------------


def test_tensors_move_to_the_meta_device_and_keep_only_shapes(meta_device):
    x = flow.randn(2, 3).to("meta")
    assert x.device is meta_device and x.device.type == "meta"
    assert x.shape == (2, 3) and x.dtype is flow.float32 and x.numel() == 6 and x.ndim == 2
    assert repr(x) == "tensor(..., size=(2, 3), device='meta')"
    y = flow.zeros(4, dtype=flow.float64, device="meta")
    assert y.dtype is flow.float64 and y.is_meta
    with pytest.raises(FlowError, match="'meta' device hold shapes only"):
        x.numpy()
    with pytest.raises(FlowError, match="shapes only"):
        x.to("cpu")
    with pytest.raises(FlowError, match="shapes only"):
        flow.ones(1, device="meta").item()


def test_ops_on_the_meta_device_follow_the_meta_rules(meta_device):
    x = flow.randn(2, 3).to("meta")
    w = flow.randn(3, 5, device="meta")
    y = ((x @ w).relu() * 2 + 1).sum(dim=0)
    assert y.shape == (5,) and y.device is meta_device and y.dtype is flow.float32
    assert (x.double() + 1).dtype is flow.float64
    assert x.reshape(3, 2).shape == (3, 2) and x.t().shape == (3, 2)
    assert (flow.ones(2, 3, dtype=flow.int64, device="meta") / 2).dtype is flow.float32
    assert (x > 0).dtype is flow.bool
    with pytest.raises(OpError, match=r"matmul: shapes \(2, 3\) and \(2, 3\) cannot be multiplied"):
        x @ x


def test_in_place_ops_on_the_meta_device_bump_versions(meta_device):
    x = flow.zeros(2, 3, device="meta")
    x.add_(1)
    x.zero_()
    assert x._version[0] == 2 and x.shape == (2, 3)


def test_autograd_on_the_meta_device_gives_meta_gradients(meta_device):
    a = flow.randn(4, 3, device="meta", requires_grad=True)
    b = flow.randn(3, 2).to("meta").requires_grad_()
    loss = ((a @ b).tanh() * a.sum(dim=1, keepdim=True)).mean()
    assert loss.grad_fn is not None and loss.device is meta_device
    loss.backward()
    assert a.grad.device is meta_device and a.grad.shape == (4, 3) and a.grad.dtype is flow.float32
    assert b.grad.device is meta_device and b.grad.shape == (3, 2)
    # accumulation on meta
    (a * 2).sum().backward()
    assert a.grad.shape == (4, 3) and a.grad.device is meta_device
    (g,) = flow.autograd.grad((a * a).sum(), a, create_graph=True)
    (gg,) = flow.autograd.grad(g.sum(), a)
    assert gg.shape == (4, 3) and gg.device is meta_device


def test_gradients_flow_back_across_devices_up_to_where_data_is_needed(meta_device):
    x = flow.randn(2, requires_grad=True)  # cpu leaf
    y = x.to("meta")
    assert y.requires_grad and y.device is meta_device
    with pytest.raises(FlowError, match="shapes only"):
        y.sum().backward()  # the gradient would have to come back to the CPU with values


def test_mixing_devices_is_an_error_naming_the_op_and_both_devices(meta_device):
    c, m = flow.ones(2), flow.ones(2, device="meta")
    with pytest.raises(OpError, match=r"add: expected all tensors on the same device, got tensors on \['cpu', 'meta'"):
        c + m
    with pytest.raises(OpError, match=r"matmul: .*\['cpu', 'meta'\]"):
        flow.ones(2, 2) @ flow.ones(2, 2, device="meta")
    with pytest.raises(OpError, match=r"mul: .*\['cpu', 'meta'\]"):
        m * c


def test_opcheck_runs_on_the_meta_device(meta_device):
    report = flow.testing.opcheck("matmul", devices=["cpu", "meta"])
    assert report["devices"] == ["cpu", "meta"] and report["samples"] > 0 and not report["skipped"]
    assert "meta" in [d for d in flow.testing.checks._device_types()]


# -- the overhead benchmark -------------------------------------------------------------------------


def test_the_overhead_benchmark_runs(tmp_path):
    pytest.importorskip("torch")
    import json
    import os
    import subprocess

    script = os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks", "overhead.py")
    if not os.path.exists(script):
        pytest.skip("benchmarks/ is not next to this checkout")
    out = tmp_path / "overhead.json"
    proc = subprocess.run(
        [sys.executable, script, "--quick", "--json", str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert [r["case"] for r in report["results"]] == ["add", "add (autograd)", "matmul 16x16", "10 adds + backward"]
    assert all(r["flow_us"] > 0 and r["torch_us"] > 0 for r in report["results"])  # no timing assertions
    assert "flow/torch" in proc.stdout
