"""Semantics of eager ``flow.autocast``: regions, nesting, state, the weight cache, gradients,
custom autograd Functions and errors.

Parity of each op's output dtype with ``torch.autocast`` is in ``test_autocast_parity.py``; the
colour table (rules an op package registers) in ``test_amp_colors.py``.
"""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import flow
import flow_amp
from flow import interceptors
from flow.errors import FlowError

F = flow.nn.functional


def mat(*shape, dtype=flow.float32, grad=False, seed=0):
    t = flow.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).to(dtype)
    return t.requires_grad_() if grad else t


class CastCounter:
    """An interceptor entered outside the autocast region: it sees the casts autocast makes (the
    calls an interceptor makes are seen by those outside it), and counts them per source tensor."""

    def __init__(self) -> None:
        self.sources: list = []

    def __call__(self, op, inputs, attrs):
        if op.name == "cast":
            self.sources.append(inputs[0])
        return NotImplemented

    def of(self, t) -> int:
        return sum(s is t for s in self.sources)


@pytest.fixture
def casts():
    counter = CastCounter()
    with interceptors.intercept(counter):
        yield counter


# -- regions --------------------------------------------------------------------------------------------
def test_region_runs_matmul_low_and_everything_returns_to_float32_after_it():
    a, b = mat(3, 4), mat(4, 2)
    with flow.autocast("cpu", dtype=flow.bfloat16):
        assert flow.is_autocast_enabled("cpu")
        assert (a @ b).dtype is flow.bfloat16
    assert not flow.is_autocast_enabled("cpu")
    assert (a @ b).dtype is flow.float32
    assert interceptors.active() == ()


def test_default_dtype_is_bfloat16_on_cpu_and_float16_on_cuda():
    assert flow.amp.get_autocast_dtype("cpu") is flow.bfloat16
    assert flow.amp.get_autocast_dtype("cuda") is flow.float16
    with flow.autocast("cpu"):
        assert (mat(2, 3) @ mat(3, 2)).dtype is flow.bfloat16
        assert flow.amp.get_autocast_dtype("cpu") is flow.bfloat16


def test_nesting_changes_dtype_inside_and_restores_it_after():
    a, b = mat(3, 4), mat(4, 2)
    with flow.autocast("cpu", dtype=flow.bfloat16):
        with flow.autocast("cpu", dtype=flow.float16):
            assert (a @ b).dtype is flow.float16
            assert flow.amp.get_autocast_dtype("cpu") is flow.float16
        assert (a @ b).dtype is flow.bfloat16
        assert flow.amp.get_autocast_dtype("cpu") is flow.bfloat16
    assert (a @ b).dtype is flow.float32


def test_inner_disabled_region_runs_ops_in_the_dtypes_they_get():
    a, b = mat(3, 4), mat(4, 2)
    with flow.autocast("cpu"):
        low = a @ b
        with flow.autocast("cpu", enabled=False):
            assert not flow.is_autocast_enabled("cpu")
            assert (a @ b).dtype is flow.float32
            assert (low @ low.t()).dtype is flow.bfloat16  # nothing is cast back up either
            with flow.autocast("cpu"):  # and enabled again inside
                assert (a @ b).dtype is flow.bfloat16
            assert (a @ b).dtype is flow.float32
        assert flow.is_autocast_enabled("cpu")
        assert (a @ b).dtype is flow.bfloat16


def test_outermost_disabled_region_changes_nothing():
    with flow.autocast("cpu", enabled=False):
        assert not flow.is_autocast_enabled()
        assert (mat(3, 4) @ mat(4, 2)).dtype is flow.float32


def test_state_is_restored_when_a_region_exits_with_an_exception(casts):
    lin = flow.nn.Linear(4, 2)
    with pytest.raises(ZeroDivisionError):
        with flow.autocast("cpu", dtype=flow.bfloat16):
            lin(mat(3, 4))
            with pytest.raises(KeyError):
                with flow.autocast("cpu", dtype=flow.float16, cache_enabled=False):
                    raise KeyError("inner")
            assert flow.amp.get_autocast_dtype("cpu") is flow.bfloat16
            assert flow.amp.is_autocast_cache_enabled()
            assert lin(mat(3, 4)).dtype is flow.bfloat16
            raise ZeroDivisionError
    assert not flow.is_autocast_enabled()
    assert interceptors.active() == (casts,)  # autocast's interceptor is gone, the counter stays
    assert lin(mat(3, 4)).dtype is flow.float32
    assert casts.of(lin.weight) == 1  # the cache lived as long as the outer region
    with flow.autocast("cpu"):
        lin(mat(3, 4))
    assert casts.of(lin.weight) == 2  # ... and was dropped with it: a new region casts again


def test_the_same_instance_can_be_entered_again_and_nested_in_itself():
    region = flow.autocast("cpu", dtype=flow.float16)
    a, b = mat(3, 4), mat(4, 2)
    for _ in range(2):
        with region:
            with region:
                assert (a @ b).dtype is flow.float16
            assert (a @ b).dtype is flow.float16
        assert (a @ b).dtype is flow.float32


def test_decorator_form_runs_the_function_in_a_region_each_call():
    @flow.autocast("cpu", dtype=flow.float16)
    def product(a, b):
        """Docstring kept."""
        assert flow.is_autocast_enabled("cpu")
        return a @ b

    assert product.__name__ == "product" and product.__doc__ == "Docstring kept."
    assert product(mat(3, 4), mat(4, 2)).dtype is flow.float16
    assert not flow.is_autocast_enabled()
    with flow.autocast("cpu", dtype=flow.bfloat16):  # the decorated function's region is inner
        assert product(mat(3, 4), mat(4, 2)).dtype is flow.float16
        assert (mat(3, 4) @ mat(4, 2)).dtype is flow.bfloat16

    @flow.autocast("cpu", enabled=False)
    def full_precision(a, b):
        return a @ b

    with flow.autocast("cpu"):
        assert full_precision(mat(3, 4), mat(4, 2)).dtype is flow.float32


def test_is_autocast_enabled_is_per_device_type():
    assert not flow.is_autocast_enabled() and not flow.is_autocast_enabled("cpu")
    with flow.autocast("cuda"):
        assert flow.is_autocast_enabled("cuda")
        assert not flow.is_autocast_enabled("cpu")
        assert flow.is_autocast_enabled()  # without a device type: any
        assert (mat(3, 4) @ mat(4, 2)).dtype is flow.float32  # a cuda region leaves cpu tensors alone
        with flow.autocast("cpu", dtype=flow.float16):
            assert flow.is_autocast_enabled("cpu") and flow.is_autocast_enabled("cuda")
            assert flow.amp.get_autocast_dtype("cuda") is flow.float16
            assert (mat(3, 4) @ mat(4, 2)).dtype is flow.float16
        assert not flow.is_autocast_enabled("cpu")
    assert not flow.is_autocast_enabled("cuda")


def test_cache_enabled_flag_is_visible_and_restored():
    assert flow.amp.is_autocast_cache_enabled()
    with flow.autocast("cpu", cache_enabled=False):
        assert not flow.amp.is_autocast_cache_enabled()
        with flow.autocast("cpu"):
            assert flow.amp.is_autocast_cache_enabled()
        assert not flow.amp.is_autocast_cache_enabled()
    assert flow.amp.is_autocast_cache_enabled()


def test_a_region_in_one_thread_does_not_reach_another_thread():
    entered, checked = threading.Event(), threading.Event()
    seen = {}

    def worker():
        with flow.autocast("cpu", dtype=flow.float16):
            entered.set()
            checked.wait(10)
            seen["worker"] = (mat(3, 4) @ mat(4, 2)).dtype
            seen["worker_enabled"] = flow.is_autocast_enabled("cpu")

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert entered.wait(10)
        assert not flow.is_autocast_enabled("cpu")  # while the worker's region is open
        assert (mat(3, 4) @ mat(4, 2)).dtype is flow.float32
        with flow.autocast("cpu", dtype=flow.bfloat16):  # and a region here leaves the worker's alone
            assert (mat(3, 4) @ mat(4, 2)).dtype is flow.bfloat16
            checked.set()
            t.join(10)
            assert flow.amp.get_autocast_dtype("cpu") is flow.bfloat16
    finally:
        checked.set()
        t.join(10)
    assert seen == {"worker": flow.float16, "worker_enabled": True}


# -- what is and is not cast -------------------------------------------------------------------------------
def test_float64_tensors_are_never_cast():
    a, b = mat(3, 4, dtype=flow.float64, grad=True), mat(4, 2, dtype=flow.float64)
    x, w = mat(1, 2, 5, 5, dtype=flow.float64), mat(3, 2, 3, 3, dtype=flow.float64)
    with flow.autocast("cpu"):
        y = a @ b
        assert y.dtype is flow.float64
        assert F.conv2d(x, w).dtype is flow.float64
        assert F.linear(a, b.t()).dtype is flow.float64
        assert a.prod().dtype is flow.float64  # deny casts low dtypes up, not float64 down
        assert flow.cat([a, a]).dtype is flow.float64
    y.sum().backward()
    assert a.grad.dtype is flow.float64


def test_integer_and_bool_tensors_are_never_cast():
    i = flow.tensor([[1, 2], [3, 4]])
    with flow.autocast("cpu"):
        assert (i @ i).dtype is flow.int64
        assert flow.cat([i, i]).dtype is flow.int64
        assert flow.stack([i > 1, i > 2]).dtype is flow.bool
        assert i.prod().dtype is flow.int64
        w = mat(5, 3, grad=True)
        e = F.embedding(flow.tensor([0, 4]), w)
        assert e.dtype is flow.float32  # embedding is not coloured: its weight keeps its dtype


def test_in_place_ops_write_in_their_destinations_dtype():
    a, b = mat(3), mat(3, dtype=flow.bfloat16, seed=1)
    want = a.numpy() + b.float().numpy()
    with flow.autocast("cpu"):
        a.add_(b)
        assert a.dtype is flow.float32
        low = mat(3, dtype=flow.bfloat16, seed=2)
        low.mul_(mat(3, seed=3))
        assert low.dtype is flow.bfloat16
    np.testing.assert_allclose(a.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize(
    "make_opt", [lambda ps: flow.optim.SGD(ps, lr=0.1, momentum=0.9), flow.optim.Adam], ids=["SGD-momentum", "Adam"]
)
def test_optimizer_updates_of_low_precision_parameters_are_not_cast(make_opt, casts):
    # The updates are in-place ops coloured deny: casting the bfloat16 parameters up to float32
    # would hand the kernel float32 copies, whose arrays then replace the parameters' own.
    lin = flow.nn.Linear(4, 2).to(flow.bfloat16)
    opt = make_opt(lin.parameters())
    before = lin.weight.detach().float().numpy().copy()
    casts.sources.clear()  # Module.to's own casts
    with flow.autocast("cpu"):
        lin(mat(3, 4)).float().sum().backward()
        opt.step()
    assert casts.of(lin.weight) == 0 and casts.of(lin.weight.grad) == 0
    assert lin.weight.dtype is flow.bfloat16 and str(lin.weight.detach().numpy().dtype) == "bfloat16"
    assert np.abs(lin.weight.detach().float().numpy() - before).max() > 1e-3


# -- the weight cache -----------------------------------------------------------------------------------------
def test_a_parameter_is_cast_once_per_region_however_many_ops_read_it(casts):
    lin = flow.nn.Linear(4, 4)
    x = mat(2, 4)
    with flow.autocast("cpu"):
        y = lin(x)
        for _ in range(3):
            y = lin(y)
        z = x @ lin.weight.t()  # another op reading the same weight
        with flow.autocast("cpu"):  # an inner region shares the outermost region's cache
            lin(x)
    assert (y.dtype, z.dtype) == (flow.bfloat16, flow.bfloat16)
    assert casts.of(lin.weight) == 1 and casts.of(lin.bias) == 1
    assert casts.of(x) == 3  # an input that is not a parameter is cast at each use


def test_one_cached_copy_per_dtype(casts):
    lin = flow.nn.Linear(4, 4)
    with flow.autocast("cpu", dtype=flow.bfloat16):
        lin(mat(2, 4))
        with flow.autocast("cpu", dtype=flow.float16):
            lin(mat(2, 4))
            lin(mat(2, 4))
        lin(mat(2, 4))
    assert casts.of(lin.weight) == 2


def test_cache_enabled_false_casts_at_each_use(casts):
    lin = flow.nn.Linear(4, 4)
    with flow.autocast("cpu", cache_enabled=False):
        lin(lin(lin(mat(2, 4))))
    assert casts.of(lin.weight) == 3


def test_an_in_place_change_of_the_parameter_invalidates_its_copy(casts):
    lin = flow.nn.Linear(4, 3, bias=False)
    x = mat(2, 4)
    with flow.autocast("cpu"):
        lin(x)
        with flow.no_grad():
            lin.weight.mul_(2.0)
        y = lin(x)
        lin(x)
    assert casts.of(lin.weight) == 2
    want = x.numpy() @ lin.weight.detach().numpy().T  # the doubled weight, not the stale copy
    np.testing.assert_allclose(y.float().detach().numpy(), want, rtol=2e-2, atol=2e-2)


def test_a_copy_made_without_grad_is_not_reused_with_grad():
    lin = flow.nn.Linear(4, 3)
    x = mat(2, 4)
    with flow.autocast("cpu"):
        with flow.no_grad():
            lin(x)
        y = lin(x)
    y.float().sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype is flow.float32


def test_the_cache_is_dropped_on_exit_and_keeps_no_tensor_alive(casts):
    lin = flow.nn.Linear(4, 3)
    with flow.autocast("cpu"):
        lin(mat(2, 4))
    ref = weakref.ref(lin.weight)
    with flow.autocast("cpu"):
        lin(mat(2, 4))
    assert casts.of(lin.weight) == 2  # the second region made its own copy
    casts.sources.clear()
    del lin
    gc.collect()
    assert ref() is None


def test_clear_autocast_cache_inside_a_region(casts):
    lin = flow.nn.Linear(4, 3)
    with flow.autocast("cpu"):
        lin(mat(2, 4))
        flow.amp.clear_autocast_cache()
        lin(mat(2, 4))
    assert casts.of(lin.weight) == 2


# -- gradients and numerics --------------------------------------------------------------------------------------
def _mlp() -> flow.nn.Module:
    flow.manual_seed(0)
    return flow.nn.Sequential(
        flow.nn.Linear(8, 16), flow.nn.LayerNorm(16), flow.nn.GELU(), flow.nn.Linear(16, 16), flow.nn.Linear(16, 4)
    )


@pytest.mark.parametrize("dtype", [flow.bfloat16, flow.float16])
def test_gradients_reach_float32_parameters_in_float32_and_close_to_full_precision(dtype):
    x, y = mat(6, 8, seed=1), flow.tensor([0, 1, 2, 3, 0, 1])
    ref = _mlp()
    F.cross_entropy(ref(x), y).backward()
    model = _mlp()
    with flow.autocast("cpu", dtype=dtype):
        h = model[0](x)
        loss = F.cross_entropy(model[1:](h), y)
    assert h.dtype is dtype and loss.dtype is flow.float32
    loss.backward()
    tol = 0.05 if dtype is flow.bfloat16 else 0.01
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.dtype is flow.float32 and p.grad.dtype is flow.float32, name
        scale = np.abs(q.grad.numpy()).max()
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), atol=tol * scale, err_msg=name)


def test_backward_inside_the_region_gives_the_gradients_of_backward_outside_it():
    x, y = mat(6, 8, seed=1), flow.tensor([0, 1, 2, 3, 0, 1])
    inside, outside = _mlp(), _mlp()
    with flow.autocast("cpu"):
        F.cross_entropy(inside(x), y).backward()
        loss = F.cross_entropy(outside(x), y)
    loss.backward()
    for p, q in zip(inside.parameters(), outside.parameters()):
        assert p.grad.dtype is flow.float32
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


# -- custom autograd Functions ------------------------------------------------------------------------------------
def _product_function(seen: dict, **fwd_kwargs):
    class Product(flow.autograd.Function):
        @staticmethod
        @flow.amp.custom_fwd(device_type="cpu", **fwd_kwargs)
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            seen["forward"] = (a.dtype, b.dtype, flow.is_autocast_enabled("cpu"))
            return a @ b

        @staticmethod
        @flow.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            ga = g @ b.t()
            seen["backward"] = (g.dtype, flow.is_autocast_enabled("cpu"), ga.dtype)
            return ga, a.t() @ g

    return Product


def test_custom_fwd_with_cast_inputs_runs_forward_and_backward_in_float32_without_autocast():
    seen = {}
    fn = _product_function(seen, cast_inputs=flow.float32)
    a, b = mat(3, 4, dtype=flow.bfloat16, grad=True), mat(4, 2, grad=True)
    with flow.autocast("cpu"):
        out = fn.apply(a, b)
    out.sum().backward()  # outside the region
    assert seen["forward"] == (flow.float32, flow.float32, False)
    assert seen["backward"] == (flow.float32, False, flow.float32)
    assert out.dtype is flow.float32
    assert (a.grad.dtype, b.grad.dtype) == (flow.bfloat16, flow.float32)  # each in its input's dtype


def test_custom_fwd_without_cast_inputs_runs_backward_under_the_forwards_autocast_state():
    seen = {}
    fn = _product_function(seen)
    a, b = mat(3, 4, grad=True), mat(4, 2, grad=True)
    with flow.autocast("cpu", dtype=flow.float16):
        out = fn.apply(a, b)
    out.float().sum().backward()
    assert seen["forward"] == (flow.float32, flow.float32, True)
    assert out.dtype is flow.float16
    assert seen["backward"] == (flow.float16, True, flow.float16)  # autocast on again, with fp16
    assert (a.grad.dtype, b.grad.dtype) == (flow.float32, flow.float32)


def test_custom_fwd_outside_a_region_changes_nothing():
    seen = {}
    fn = _product_function(seen, cast_inputs=flow.float32)
    a = mat(3, 4, dtype=flow.bfloat16, grad=True)
    out = fn.apply(a, mat(4, 2, dtype=flow.bfloat16))
    out.float().sum().backward()
    assert seen["forward"] == (flow.bfloat16, flow.bfloat16, False)
    assert seen["backward"][1] is False


# -- errors and the API's names ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        (("tpu",), {}, FlowError, r"autocast: unknown device type 'tpu'; known: \[.*'cpu'"),
        ((0,), {}, TypeError, r"device_type must be a string such as 'cpu' or 'cuda', got 0"),
        ((flow.device("cpu"),), {}, TypeError, r"device_type must be a string"),
        (("cpu",), {"dtype": flow.int32}, FlowError, r"dtype must be flow.bfloat16 or flow.float16, got flow.int32"),
        (
            ("cpu",),
            {"dtype": flow.float64},
            FlowError,
            r"dtype must be flow.bfloat16 or flow.float16, got flow.float64",
        ),
        (
            ("cpu",),
            {"dtype": flow.float32},
            FlowError,
            r"dtype must be flow.bfloat16 or flow.float16, got flow.float32",
        ),
    ],
)
def test_bad_arguments_are_refused_with_a_message_naming_them(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        flow.autocast(*args, **kwargs)
    assert not flow.is_autocast_enabled()


def test_dtype_may_be_named_by_a_string():
    with flow.autocast("cpu", dtype="float16"):
        assert (mat(3, 4) @ mat(4, 2)).dtype is flow.float16
    with pytest.raises(TypeError, match="autocast: dtype must be flow.bfloat16 or flow.float16, got 'half-ish'"):
        flow.autocast("cpu", dtype="half-ish")


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"device_type": "tpu"}, FlowError, "custom_fwd: unknown device type 'tpu'"),
        ({"device_type": None}, TypeError, "custom_fwd: device_type must be a string"),
        ({"cast_inputs": flow.int32}, TypeError, "cast_inputs must be a floating-point dtype or None, got flow.int32"),
        ({"cast_inputs": "nope"}, TypeError, "cast_inputs must be a floating-point dtype or None, got 'nope'"),
    ],
)
def test_custom_fwd_refuses_bad_arguments_when_it_decorates(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        flow.amp.custom_fwd(lambda ctx, x: x, **kwargs)
    with pytest.raises(exc, match=match):
        flow.amp.custom_fwd(**kwargs)  # the decorator-factory form too


def test_custom_bwd_refuses_an_unknown_device_type():
    with pytest.raises(FlowError, match="custom_bwd: unknown device type 'tpu'"):
        flow.amp.custom_bwd(device_type="tpu")


def test_autocast_is_also_flow_amp_autocast_as_in_torch_amp():
    assert flow.amp is flow_amp
    assert flow.autocast is flow.amp.autocast
    assert flow.is_autocast_enabled is flow.amp.is_autocast_enabled
    with flow.amp.autocast(device_type="cpu", dtype=flow.float16):
        assert (mat(3, 4) @ mat(4, 2)).dtype is flow.float16
    for name in ("custom_fwd", "custom_bwd", "GradScaler", "get_autocast_dtype"):
        assert callable(getattr(flow.amp, name)), name


def test_repr_names_the_region():
    assert repr(flow.autocast("cpu", dtype=flow.float16)) == "flow.autocast('cpu', dtype=flow.float16, enabled=True)"
