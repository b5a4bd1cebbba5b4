"""Device-neutral graph passes: a NumPy-backed test device fills the pass tables from a plugin and
gets fused groups, a memory arena, out= kernels and plan phases; the CPU's entries are the same kind."""

from __future__ import annotations

import types

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import RegistrationError
from flow.graph.pass_tables import (
    ARENA_TABLE,
    FUSION_TABLE,
    PLAN_PHASE_TABLE,
    ArenaRule,
    FusionRule,
    PlanPhase,
    arena_rule,
    fusion_rule,
    numpy_arena_rule,
    out_kernel,
    register_out_variant,
)
from flow.graph.passes.fused_program import evaluate, store
from flow.plugins import hookimpl
from flow.registry import REGISTRY, DeviceType

DEV = "tests_passdev"
BARE = "tests_passbare"  # a device that fills no table


class _Backend:
    """What the test device's plugin records: lowered programs, out= calls, plans it saw."""

    def __init__(self) -> None:
        self.lowered: dict = {}
        self.lower_calls = 0
        self.fail: Exception | None = None
        self.out_calls: list = []
        self.plans: list = []

    def lower(self, programs: list) -> None:
        self.lower_calls += 1
        if self.fail is not None:
            raise self.fail
        for p in programs:
            self.lowered[p.key] = p

    def fused(self, inputs, program, out=None):
        p = self.lowered[program.key]  # a program the pass did not lower through the table fails here
        return store(evaluate(p, list(inputs)), out)

    def mul_out(self, a, b, out=None):
        self.out_calls.append(out)
        return np.multiply(a, b, out=out)


BACKEND = _Backend()


def _plugin():
    mod = types.ModuleType("tests_passdev_plugin")

    def devices(registry):
        for name in (DEV, BARE):
            registry.register_device_type(DeviceType(name, np, lambda a, i=None: a, lambda a: a))

    def kernels(registry):
        registry.register_kernel("fused_elementwise", DEV, _fused)
        registry.register_kernel("mul", DEV, _mul, out=BACKEND.mul_out)

    def rules(registry):
        registry.register_rule(
            FUSION_TABLE,
            DEV,
            FusionRule(
                ops=frozenset({"add", "sub", "mul", "tanh", "exp"}), dtypes=frozenset({"float32"}), lower=BACKEND.lower
            ),
        )
        registry.register_rule(ARENA_TABLE, DEV, numpy_arena_rule())
        registry.register_rule(
            PLAN_PHASE_TABLE,
            "tests_record",
            PlanPhase(
                lambda plan, config: BACKEND.plans.append(plan),
                applies=lambda plan: any(st.device_type == DEV for st in plan.steps),
            ),
        )

    mod.flow_register_device_types = hookimpl(devices)
    mod.flow_register_kernels = hookimpl(kernels)
    mod.flow_register_rules = hookimpl(rules)
    return mod


def _mul(a, b):
    return np.multiply(a, b)


def _fused(inputs, program, out=None):
    return BACKEND.fused(inputs, program, out)


_fused.supports_out = True


@pytest.fixture(autouse=True, scope="module")
def _device():
    flow.plugins.register(_plugin(), name="tests.passdev")
    try:
        yield
    finally:
        flow.plugins.unregister("tests.passdev")


@pytest.fixture(autouse=True)
def _reset():
    BACKEND.lowered.clear()
    BACKEND.lower_calls = 0
    BACKEND.fail = None
    BACKEND.out_calls.clear()
    BACKEND.plans.clear()


def _f(x, y):
    a = flow.tanh(x * y + 1.0) * x
    b = flow.matmul(a, y.T)
    return flow.exp(b - 1.0) * b


def _inputs(device, n=64, seed=0):
    rng = np.random.default_rng(seed)
    return [flow.tensor(rng.standard_normal((n, n)).astype(np.float32)).to(device) for _ in range(2)]


def _ops(c) -> dict:
    return c.ir.op_counts()


# -- the tables ----------------------------------------------------------------------------------


def test_the_core_declares_the_tables_and_the_cpu_fills_them():
    for name in (FUSION_TABLE, ARENA_TABLE, PLAN_PHASE_TABLE):
        assert REGISTRY.get_table(name).owner == "flow.graph"
    cpu = fusion_rule("cpu")
    assert isinstance(cpu, FusionRule) and {"add", "exp", "where"} <= cpu.ops and cpu.reductions == {"sum", "mean"}
    assert REGISTRY.get_table(FUSION_TABLE).provider("cpu") == "flow.cpu"
    assert isinstance(arena_rule("cpu"), ArenaRule)
    assert REGISTRY.get_table(PLAN_PHASE_TABLE).provider("memory_arena") == "flow.graph"
    assert REGISTRY.get_table(FUSION_TABLE).provider(DEV) == "tests.passdev"
    assert fusion_rule(BARE) is None and arena_rule(BARE) is None


def test_out_variants_are_declared_with_the_kernel_entry():
    from flow.registry import get_op

    mul = get_op("mul")
    f32 = flow.float32
    assert out_kernel(mul, DEV, f32) == BACKEND.mul_out  # the device's own kernel, declared with out=
    # the generic matmul kernel's out-variant serves any NumPy-like device that uses it
    mm = out_kernel(get_op("matmul"), BARE, f32)
    a = np.ones((2, 3), np.float32)
    buf = np.empty((2, 2), np.float32)
    assert mm(a, a.T, out=buf) is buf and (buf == 3).all()
    # an op whose kernel has no out-variant has none (no guessing from the kernel's name)
    assert out_kernel(get_op("softmax"), "cpu", f32) is None


def test_register_out_variant_errors_name_the_op_and_kernel():
    mod = types.ModuleType("tests_bad_out")

    def rules(registry):
        register_out_variant(registry, "mul", BARE, BACKEND.mul_out)

    mod.flow_register_rules = hookimpl(rules)
    with pytest.raises(
        flow.errors.PluginError,
        match=r"op 'mul': no kernel 'default' is registered for device "
        r"'tests_passbare'",
    ):
        flow.plugins.register(mod, name="tests.bad_out")
    with pytest.raises(RegistrationError, match="unknown op 'tests_no_such_op'"):
        register_out_variant(REGISTRY, "tests_no_such_op", "cpu", BACKEND.mul_out)


# -- fusion on a plugin device -------------------------------------------------------------------


def test_a_plugin_device_gets_fused_groups_lowered_by_its_rule():
    x, y = _inputs(DEV)
    c = flow.compile(_f)
    out = c(x, y)
    assert _ops(c).get("fused_elementwise") == 2, c.ir
    assert BACKEND.lower_calls == 1 and len(BACKEND.lowered) == 2  # one lowering call for the whole graph
    fused = [n for n in c.ir.nodes if n.name == "fused_elementwise"]
    assert [n.tags["fused"] for n in fused] == [["mul", "add", "tanh", "mul"], ["sub", "exp", "mul"]]
    assert out.device.type == DEV
    ref = _f(*_inputs("cpu"))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c(x, y).numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_a_device_without_a_fusion_rule_is_left_unfused():
    c = flow.compile(_f)
    c(*_inputs(BARE))
    assert "fused_elementwise" not in _ops(c) and BACKEND.lower_calls == 0
    assert c.ir.meta["pass_notes"]["fusion"] == "no groups to fuse"


def test_a_failing_lowering_leaves_that_device_unfused_and_says_why():
    BACKEND.fail = RuntimeError("tests: no NVRTC here")
    c = flow.compile(_f)
    out = c(*_inputs(DEV))
    assert "fused_elementwise" not in _ops(c)
    assert "2 groups on tests_passdev left unfused: tests: no NVRTC here" in c.ir.meta["pass_notes"]["fusion"]
    np.testing.assert_allclose(out.numpy(), _f(*_inputs("cpu")).numpy(), rtol=1e-5, atol=1e-6)


def test_rule_ops_and_dtypes_limit_what_fuses():
    def g(x, y):  # sigmoid is not in the device's rule; float64 is not in its dtypes
        return flow.sigmoid(x * y) + x

    c = flow.compile(g)
    c(*_inputs(DEV))
    assert "fused_elementwise" not in _ops(c)
    x, y = (t.double() for t in _inputs(DEV))
    c = flow.compile(_f)
    c(x, y)
    assert "fused_elementwise" not in _ops(c)


# -- memory planning and plan phases on a plugin device ------------------------------------------


def test_memory_planning_gives_a_plugin_device_an_arena_and_out_kernels_write_into_it():
    def g(x, y):
        return flow.matmul(x * y, y) + 1.0

    c = flow.compile(g, config=_config(fusion=False))
    x, y = _inputs(DEV)
    out = c(x, y)
    mem = c.plan.memory
    assert set(mem.arenas) == {DEV} and mem.arenas[DEV] > 0
    rep = c.memory_report()
    assert rep["planned"] and rep["values_in_arena"] >= 1
    arena = mem.buffers[DEV]
    # the device's mul kernel was called through its declared out-variant, into the arena
    assert BACKEND.out_calls and all(o is not None and np.shares_memory(o, arena) for o in BACKEND.out_calls)
    assert not np.shares_memory(out.numpy(), arena)
    ref = g(*_inputs("cpu"))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c(x, y).numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)  # the arena is reused


def test_a_device_without_an_arena_rule_keeps_its_values_outside():
    c = flow.compile(lambda x, y: flow.matmul(x * y, y) + 1.0)
    c(*_inputs(BARE))
    rep = c.memory_report()
    assert rep["values_in_arena"] == 0 and rep["inplace_reuses"] == 0


def test_plan_phases_run_on_the_plans_they_apply_to():
    c = flow.compile(_f)
    c(*_inputs(DEV))
    assert BACKEND.plans == [c.plan]
    c2 = flow.compile(_f)
    c2(*_inputs("cpu"))
    assert BACKEND.plans == [c.plan]  # applies() said no for the CPU plan
    assert c2.plan.memory is not None  # memory planning's own phase ran on it


def test_no_lowering_hooks_in_ir_meta():
    c = flow.compile(_f)
    c(*_inputs("cpu"))
    assert "lowering_hooks" not in c.ir.meta


def _config(fusion=True, planning=True):
    from flow.graph.config import GraphConfig

    cfg = GraphConfig()
    cfg.enable_fusion(fusion)
    cfg.enable_memory_planning(planning)
    return cfg


# -- training on the plugin device with every pass -----------------------------------------------


def test_training_on_a_plugin_device_with_fusion_and_planning_matches_eager():
    def run(graph: bool, device: str):
        flow.manual_seed(0)
        m = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10)).to(device)
        opt = flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(m(x) * 2.0 + 1.0, y)
            loss.backward()
            opt.step()
            return loss

        fn = flow.compile(step) if graph else step
        rng = np.random.default_rng(1)
        losses = []
        for _ in range(3):
            x = flow.tensor(rng.standard_normal((64, 64)).astype(np.float32)).to(device)
            y = flow.tensor(rng.standard_normal((64, 10)).astype(np.float32)).to(device)
            losses.append(fn(x, y).item())
        return losses, fn

    eager, _ = run(False, "cpu")
    graph, fn = run(True, DEV)
    np.testing.assert_allclose(graph, eager, rtol=1e-5)
    assert fn.plan.memory is not None and DEV in fn.plan.memory.arenas
