"""flow-example-ops adds `example_swish` through its entry point, and the op's registrations agree."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import numpy as np
import pytest

import flow
import flow_example_ops


def np_swish(x: np.ndarray, beta: float) -> np.ndarray:
    return x / (1.0 + np.exp(-beta * x))


def np_swish_grad(x: np.ndarray, beta: float) -> np.ndarray:
    s = 1.0 / (1.0 + np.exp(-beta * x))
    return s + beta * x * s * (1.0 - s)


def test_cli_lists_the_op_under_its_distribution():
    env = {k: v for k, v in os.environ.items() if k not in ("FLOW_PLUGINS", "FLOW_DISABLE_PLUGIN_AUTOLOAD")}
    proc = subprocess.run(
        [sys.executable, "-m", "flow", "plugins"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("example_ops "))
    header = lines[start]
    assert "[flow-example-ops 0.1.0, entry point, loaded]" in header
    assert header.rstrip().endswith("flow_example_ops.plugin")
    details = []
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        details.append(line.strip())
    assert "ops: example_swish" in details
    assert "kernels: example_swish[cpu]" in details


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


def test_every_hook_it_implements_is_declared():
    flow.plugins.check_pending()  # a misspelled hook name would raise here
