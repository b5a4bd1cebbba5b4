"""opcheck over every registered op, on the CPU and on the shape-only ``meta`` test device.

The list of ops comes from the registry when the tests are collected (after the plugins
load), so an op registered without ``samples=`` fails here, as does an op whose meta rule,
kernels and gradient disagree. On ``cpu`` it checks meta rule vs kernel output, kernel vs
the reference kernel and the gradient vs finite differences; on ``meta`` (shapes only) it
checks the meta rule against the outputs' shapes and dtypes, and that backward gives every
input a gradient of its shape, dtype and device.
"""

from __future__ import annotations

import types

import pytest

import flow
from flow.ops.meta import TensorMeta
from flow.plugins import ensure_loaded, hookimpl
from flow.registry import REGISTRY, schema
from flow.testing import OpCheckError

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
    if report["skipped"]:
        pytest.skip("; ".join(report["skipped"]))


def test_an_op_registered_without_samples_fails_opcheck():
    mod = types.ModuleType("no_samples")
    mod.flow_register_ops = hookimpl(lambda registry: registry.register_op(
        schema("tests_no_samples", ["x"]), meta=lambda x: TensorMeta(tuple(x.shape), x.dtype, x.device)))
    mod.flow_register_kernels = hookimpl(lambda registry: registry.register_kernel(
        "tests_no_samples", "cpu", lambda x: x))
    flow.plugins.register(mod, name="tests.no_samples")
    try:
        with pytest.raises(OpCheckError, match=r"op 'tests_no_samples' \(plugin 'tests.no_samples'\) has no samples"):
            flow.testing.opcheck("tests_no_samples")
    finally:
        flow.plugins.unregister("tests.no_samples")


def test_opcheck_catches_a_meta_rule_that_disagrees_with_the_kernel():
    def ops(registry):
        registry.register_op(schema("tests_liar", ["x"]), meta=lambda x: TensorMeta(tuple(x.shape), x.dtype, x.device),
                             samples=lambda: [flow.testing.SampleInput((flow.ones(2, 3, dtype=flow.float64),))])

    mod = types.ModuleType("liar")
    mod.flow_register_ops = hookimpl(ops)
    mod.flow_register_kernels = hookimpl(lambda registry: registry.register_kernel(
        "tests_liar", "generic", lambda xp: (lambda x: x.sum(axis=0))))
    flow.plugins.register(mod, name="tests.liar")
    try:
        with pytest.raises(OpCheckError, match=r"output 0 is \(3,\) .* but the meta rule says \(2, 3\)"):
            flow.testing.opcheck("tests_liar", devices=["cpu"])
    finally:
        flow.plugins.unregister("tests.liar")
