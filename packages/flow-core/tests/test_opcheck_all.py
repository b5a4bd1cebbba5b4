"""opcheck over every registered op, on the CPU and on the shape-only ``meta`` test device.

The list of ops comes from the registry when the tests are collected (after the plugins
load), so an op registered without ``samples=``, without dtype rules or without error samples
fails here, as does an op whose meta rule, kernels and gradient disagree. On ``cpu`` it checks
meta rule vs kernel output, kernel vs the reference kernel and the gradient vs finite
differences; on ``meta`` (shapes only) it checks the meta rule against the outputs' shapes and
dtypes, and that backward gives every input a gradient of its shape, dtype and device. On both,
every error input (the op's own and those its schema implies) must raise its flow error.
"""

from __future__ import annotations

import types

import pytest

import flow
from flow.errors import OpError, OpTypeError
from flow.ops.meta import TensorMeta
from flow.plugins import ensure_loaded, hookimpl
from flow.registry import REGISTRY, schema
from flow.registry.ops import ANY, FLOAT
from flow.testing import ErrorInput, OpCheckError, SampleInput

ensure_loaded()
OPS = sorted(REGISTRY.ops)


def test_the_registry_has_the_core_ops():
    assert {"add", "mul", "matmul", "sum", "cast", "reshape"} <= set(OPS)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("op_name", OPS)
def test_opcheck(op_name, device, request):
    if device == "meta":
        request.getfixturevalue("meta_device")
    report = flow.testing.opcheck(op_name, devices=[device])
    assert report["samples"] > 0
    op = REGISTRY.ops[op_name]
    assert report["errors_checked"] > 0 or op.no_error_samples or report["skipped"]
    if report["skipped"]:
        pytest.skip("; ".join(report["skipped"]))


def test_an_op_registered_without_samples_fails_opcheck():
    mod = types.ModuleType("no_samples")
    mod.flow_register_ops = hookimpl(
        lambda registry: registry.register_op(
            schema("tests_no_samples", ["x"]), meta=lambda x: TensorMeta(tuple(x.shape), x.dtype, x.device)
        )
    )
    mod.flow_register_kernels = hookimpl(
        lambda registry: registry.register_kernel("tests_no_samples", "cpu", lambda x: x)
    )
    flow.plugins.register(mod, name="tests.no_samples")
    try:
        with pytest.raises(OpCheckError, match=r"op 'tests_no_samples' \(plugin 'tests.no_samples'\) has no samples"):
            flow.testing.opcheck("tests_no_samples")
    finally:
        flow.plugins.unregister("tests.no_samples")


def test_opcheck_catches_a_meta_rule_that_disagrees_with_the_kernel():
    mod = types.ModuleType("liar")
    mod.flow_register_ops = hookimpl(
        lambda registry: registry.register_op(
            schema("tests_liar", ["x"], dtypes=ANY),
            meta=lambda x: TensorMeta(tuple(x.shape), x.dtype, x.device),
            samples=lambda: [flow.testing.SampleInput((flow.ones(2, 3, dtype=flow.float64),))],
            no_error_samples="takes any tensor",
        )
    )
    mod.flow_register_kernels = hookimpl(
        lambda registry: registry.register_kernel("tests_liar", "generic", lambda xp: lambda x: x.sum(axis=0))
    )
    flow.plugins.register(mod, name="tests.liar")
    try:
        with pytest.raises(OpCheckError, match=r"output 0 is \(3,\) .* but the meta rule says \(2, 3\)"):
            flow.testing.opcheck("tests_liar", devices=["cpu"])
    finally:
        flow.plugins.unregister("tests.liar")


# -- the contract on bad input ------------------------------------------------------------------------
def _same(x, **attrs):
    return TensorMeta(tuple(x.shape), x.dtype, x.device)


def _plugin(name, sch, samples, kernel, meta=_same, **kwargs):
    """Register a one-op test plugin; return its module (unregister with flow.plugins.unregister)."""
    mod = types.ModuleType(name)
    mod.flow_register_ops = hookimpl(lambda registry: registry.register_op(sch, meta=meta, samples=samples, **kwargs))
    mod.flow_register_kernels = hookimpl(lambda registry: registry.register_kernel(sch.name, "cpu", kernel))
    flow.plugins.register(mod, name=f"tests.{name}")
    return f"tests.{name}"


def _x():
    return flow.ones(2, 3, dtype=flow.float64)


def test_an_op_without_declared_dtypes_fails_opcheck():
    plug = _plugin(
        "nodtypes", schema("tests_nodtypes", ["x"]), lambda: [SampleInput((_x(),))], lambda x: x, no_error_samples="any"
    )
    try:
        with pytest.raises(OpCheckError, match=r"op 'tests_nodtypes' .*inputs \['x'\] declare no dtypes"):
            flow.testing.opcheck("tests_nodtypes", devices=["cpu"])
    finally:
        flow.plugins.unregister(plug)


def test_an_op_without_error_samples_fails_opcheck_unless_it_says_why():
    plug = _plugin("noerrors", schema("tests_noerrors", ["x"], dtypes=ANY), lambda: [SampleInput((_x(),))], lambda x: x)
    try:
        with pytest.raises(OpCheckError, match=r"op 'tests_noerrors' .*has no error samples.*no_error_samples="):
            flow.testing.opcheck("tests_noerrors", devices=["cpu"])
    finally:
        flow.plugins.unregister(plug)
    plug = _plugin(
        "optout",
        schema("tests_optout", ["x"], dtypes=ANY),
        lambda: [SampleInput((_x(),))],
        lambda x: x,
        no_error_samples="takes any tensor",
    )
    try:
        assert flow.testing.opcheck("tests_optout", devices=["cpu"])["errors_checked"] == 0
    finally:
        flow.plugins.unregister(plug)


def test_the_schema_implies_wrong_dtype_inputs_and_they_are_checked():
    plug = _plugin(
        "floatonly", schema("tests_floatonly", ["x"], dtypes=FLOAT), lambda: [SampleInput((_x(),))], lambda x: x * 2
    )
    try:
        report = flow.testing.opcheck("tests_floatonly", devices=["cpu"])
        assert report["errors_checked"] == 2  # an int64 and a bool input
        with pytest.raises(OpTypeError, match=r"tests_floatonly: 'x' must be a floating-point tensor, got flow.int64"):
            flow.ops.call("tests_floatonly", flow.tensor([1, 2]))
    finally:
        flow.plugins.unregister(plug)


def test_an_error_input_the_op_accepts_fails_opcheck():
    def samples():
        yield SampleInput((_x(),))
        yield ErrorInput((flow.ones(4, dtype=flow.float64),), {}, OpError, "must be 2-d")

    plug = _plugin("lenient", schema("tests_lenient", ["x"], dtypes=ANY), samples, lambda x: x)
    try:
        with pytest.raises(
            OpCheckError,
            match=r"error input 0 on device 'cpu': expected OpError matching 'must be 2-d'"
            r" from the call, but it succeeded",
        ):
            flow.testing.opcheck("tests_lenient", devices=["cpu"])
    finally:
        flow.plugins.unregister(plug)


def test_an_error_the_kernel_raises_instead_of_the_meta_rule_fails_opcheck():
    def kernel(x):
        if x.ndim != 2:
            raise ValueError("boom")
        return x

    def samples():
        yield SampleInput((_x(),))
        yield ErrorInput((flow.ones(4, dtype=flow.float64),), {}, OpError, "")

    plug = _plugin("late", schema("tests_late", ["x"], dtypes=ANY), samples, kernel)
    try:
        with pytest.raises(OpCheckError, match=r"the kernel failed and the meta rule did not explain it"):
            flow.testing.opcheck("tests_late", devices=["cpu"])
    finally:
        flow.plugins.unregister(plug)


def test_a_non_flow_exception_fails_opcheck():
    def meta(x):
        if x.ndim != 2:
            raise ValueError("not 2-d")
        return _same(x)

    def samples():
        yield SampleInput((_x(),))
        yield ErrorInput((flow.ones(4, dtype=flow.float64),), {}, OpError, "2-d")

    plug = _plugin("raw", schema("tests_raw", ["x"], dtypes=ANY), samples, lambda x: x, meta=meta)
    try:
        with pytest.raises(OpCheckError, match=r"got a non-flow exception ValueError: not 2-d"):
            flow.testing.opcheck("tests_raw", devices=["cpu"])
    finally:
        flow.plugins.unregister(plug)


def test_mixed_devices_are_an_error_input_on_a_second_device(meta_device):
    report = flow.testing.opcheck("add", devices=["meta"])
    assert report["errors_checked"] > flow.testing.opcheck("add", devices=["cpu"])["errors_checked"]
    with pytest.raises(OpError, match="same device"):
        flow.ones(2) + flow.ones(2).to(meta_device)
    with pytest.raises(OpError, match="add: expected all tensors on the same device"):
        REGISTRY.ops["add"].meta(
            TensorMeta((2,), flow.float32, flow.device("cpu")), TensorMeta((2,), flow.float32, meta_device)
        )


def test_attributes_are_checked_by_the_schema_on_every_call():
    with pytest.raises(OpError, match="gelu: attribute 'approximate' must be one of"):
        flow.ops.call("gelu", flow.ones(2), approximate="exact")
    with pytest.raises(OpTypeError, match="softmax: attribute 'dim' must be int, got str"):
        flow.ops.call("softmax", flow.ones(2), dim="0")
    with pytest.raises(OpTypeError, match="reshape: attribute 'shape' must hold int values, element 1 is float"):
        flow.ops.call("reshape", flow.ones(2), shape=(1, 2.0))
    with pytest.raises(OpTypeError, match=r"sum: unexpected attribute 'axis'"):
        flow.ops.call("sum", flow.ones(2), axis=0)
    with pytest.raises(OpTypeError, match=r"topk: missing required attribute 'k'"):
        flow.ops.call("topk", flow.ones(2))
