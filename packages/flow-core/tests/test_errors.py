"""User errors name the op, the argument and what was wrong (shapes, dtypes, devices, dims), and
are flow's own exception types (which also derive from the built-in ones PyTorch users catch)."""

from __future__ import annotations

import pytest

import flow
from flow.errors import FlowError, KernelNotFoundError, OpError, OpIndexError, OpTypeError, PluginError


def test_error_hierarchy():
    assert issubclass(OpError, FlowError) and issubclass(OpError, ValueError) and issubclass(FlowError, RuntimeError)
    assert issubclass(OpTypeError, OpError) and issubclass(OpTypeError, TypeError)
    assert issubclass(OpIndexError, OpError) and issubclass(OpIndexError, IndexError)
    assert issubclass(KernelNotFoundError, NotImplementedError) and issubclass(PluginError, ImportError)
    e = OpError("add", "bad")
    assert e.op == "add" and str(e) == "add: bad"


@pytest.mark.parametrize(
    "fn, op",
    [
        (lambda a, b: a + b, "add"),
        (lambda a, b: a - b, "sub"),
        (lambda a, b: a * b, "mul"),
        (lambda a, b: a / b, "div"),
        (lambda a, b: flow.maximum(a, b), "maximum"),
        (lambda a, b: a == b, "eq"),
    ],
)
def test_shape_mismatch_names_the_op_and_both_shapes(fn, op):
    with pytest.raises(OpError) as ei:
        fn(flow.ones(2, 3), flow.ones(4))
    msg = str(ei.value)
    assert msg.startswith(f"{op}: ") and "(2, 3)" in msg and "(4,)" in msg and "broadcast" in msg
    assert ei.value.op == op


def test_shape_mismatch_in_matmul():
    with pytest.raises(OpError, match=r"matmul: shapes \(2, 3\) and \(4, 5\) cannot be multiplied \(3 != 4\)"):
        flow.ones(2, 3) @ flow.ones(4, 5)


def test_in_place_shape_mismatch():
    with pytest.raises(OpError, match=r"add_: .*\(2, 3\).*\(3,\)"):
        flow.ones(3).add_(flow.ones(2, 3))


def test_dtype_errors_name_the_op_and_dtypes():
    with pytest.raises(OpTypeError, match=r"matmul: .*same dtype.*flow.float32 and flow.float64"):
        flow.ones(2, 2) @ flow.ones(2, 2, dtype=flow.float64)
    with pytest.raises(OpTypeError, match=r"bitwise_and: .*flow.float32"):
        flow.ones(2) & flow.ones(2)
    with pytest.raises(OpTypeError, match=r"mean: .*floating-point.*flow.int64"):
        flow.arange(3).mean()
    with pytest.raises(OpError, match="add_: result type flow.float32 cannot be cast to the in-place output type"):
        flow.zeros(2, dtype=flow.int64).add_(flow.ones(2))


def test_wrong_argument_types():
    with pytest.raises(OpTypeError, match="add: expected a Tensor or a number as 'other', got str"):
        flow.ones(2) + "x"
    with pytest.raises(OpTypeError, match="exp: 'input' must be a Tensor, got list"):
        flow.exp([1.0])


def test_device_mix_names_both_devices(meta_device):
    msg = r"^add: expected all tensors on the same device, got tensors on \['cpu', 'meta'\]$"
    with pytest.raises(OpError, match=msg):
        flow.ones(2) + flow.ones(2, device="meta")


def test_unknown_device():
    with pytest.raises(KernelNotFoundError, match="unknown device type 'npu'"):
        flow.ones(2).to("npu")
    with pytest.raises(ValueError, match="invalid device string"):
        flow.ones(2).to("cuda:zero")
    if "cuda" not in flow.registry.REGISTRY.device_types:
        with pytest.raises(KernelNotFoundError, match="unknown device type 'cuda'.*flow-cuda"):
            flow.ones(2).to("cuda")


@pytest.mark.parametrize(
    "call, op",
    [
        (lambda x: x.sum(dim=3), "sum"),
        (lambda x: x.mean(dim=-4), "mean"),
        (lambda x: x.transpose(0, 5), "transpose"),
        (lambda x: x.size(7), "size"),
        (lambda x: x.unsqueeze(4), "unsqueeze"),
        (lambda x: x.flatten(0, 3), "flatten"),
    ],
)
def test_out_of_range_dims_name_the_op_and_the_valid_range(call, op):
    x = flow.ones(2, 3, 4)
    with pytest.raises(OpIndexError) as ei:
        call(x)
    msg = str(ei.value)
    assert msg.startswith(f"{op}: ") and "out of range" in msg and "3-d" in msg or "4-d" in msg


def test_reshape_errors():
    with pytest.raises(OpError, match=r"reshape: shape \(4, 2\) is invalid for input of size 6"):
        flow.ones(2, 3).reshape(4, 2)
    with pytest.raises(OpError, match="only one dimension can be -1"):
        flow.ones(2, 3).reshape(-1, -1)


def test_kernel_errors_never_leak_numpy_tracebacks():
    with pytest.raises(FlowError) as ei:
        flow.ones(2, 3) + flow.ones(3, 2)
    assert "operands could not be broadcast" not in str(ei.value)  # NumPy's wording
    with pytest.raises(OpError, match=r"floor_divide: integer division by zero"):
        flow.tensor([1, 2]) // 0
    assert (flow.tensor([1, 2]) & 1).tolist() == [1, 0]  # scalars are not mistaken for tensors by meta rules


def test_autograd_errors():
    with pytest.raises(FlowError, match="does not require grad"):
        flow.ones(2).sum().backward()
    x = flow.ones(2, requires_grad=True)
    with pytest.raises(FlowError, match="leaf tensor that requires grad"):
        x.mul_(2)
