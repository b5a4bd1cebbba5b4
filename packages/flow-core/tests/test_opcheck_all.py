"""opcheck over every registered op, on the CPU and on the shape-only ``meta`` test device.

The list of ops comes from the registry when the tests are collected (after the plugins
load), so an op registered without ``samples=`` fails here, as does an op whose meta rule,
kernels and gradient disagree. On ``cpu`` it checks meta rule vs kernel output, kernel vs
the reference kernel and the gradient vs finite differences; on ``meta`` (shapes only) it
checks the meta rule against the outputs' shapes and dtypes, and that backward gives every
input a gradient of its shape, dtype and device.
"""

from __future__ import annotations

import pytest

import flow
from flow.plugins import ensure_loaded
from flow.registry import REGISTRY

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
