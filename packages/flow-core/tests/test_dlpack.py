"""DLPack exchange with NumPy and PyTorch: every shared dtype, views, 0-d, empty, aliasing, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.utils import dlpack as fdl

NP_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
ALL_DTYPES = NP_DTYPES + ["bfloat16"]


def _sample(dtype: str, shape=(3, 4)) -> flow.Tensor:
    a = (np.arange(int(np.prod(shape))).reshape(shape) % 5).astype("float32")
    return flow.tensor(a > 2 if dtype == "bool" else a, dtype=getattr(flow, dtype))


def _torch():
    return pytest.importorskip("torch")


# -- NumPy --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_numpy_round_trip_shares_memory(dtype):
    t = _sample(dtype)
    a = np.from_dlpack(t)
    assert a.dtype == t.dtype.np and a.shape == (3, 4)
    assert np.shares_memory(a, t._data)
    np.testing.assert_array_equal(a, t.numpy())
    back = flow.from_dlpack(a)
    assert back.dtype is t.dtype and np.shares_memory(back._data, a)


def test_numpy_writes_alias_both_ways():
    t = flow.zeros(2, 3)
    a = np.from_dlpack(t)
    a[0, 1] = 5.0
    assert t[0, 1].item() == 5.0
    t.add_(1.0)
    assert a[1, 2] == 1.0
    n = np.zeros(4, dtype=np.int32)
    f = flow.from_dlpack(n)
    f[2] = 9
    assert n[2] == 9


def test_from_capsule_and_utils_functions():
    n = np.arange(5, dtype=np.int64)
    f = fdl.from_dlpack(n.__dlpack__())
    assert f.tolist() == [0, 1, 2, 3, 4] and np.shares_memory(f._data, n)
    t = flow.arange(3.0)
    cap = fdl.to_dlpack(t)
    back = flow.from_dlpack(cap)
    assert np.shares_memory(back._data, t._data)
    with pytest.raises(fdl.DLPackError, match="only once"):
        flow.from_dlpack(cap)  # a consumed capsule is renamed "used_dltensor"


def test_from_dlpack_of_a_flow_tensor_is_itself():
    t = flow.ones(2)
    assert flow.from_dlpack(t) is t


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.t(),
        lambda t: t[:, 1:3],
        lambda t: t[::2],
        lambda t: t[1],
    ],
    ids=["transposed", "column_slice", "step_slice", "row"],
)
def test_numpy_strided_views(make):
    base = flow.arange(12.0).reshape(3, 4)
    v = make(base)
    a = np.from_dlpack(v)
    np.testing.assert_array_equal(a, v.numpy())
    assert a.strides == v._data.strides and np.shares_memory(a, base._data)


def test_zero_dim_and_empty():
    s = flow.tensor(3.5)
    a = np.from_dlpack(s)
    assert a.shape == () and a == 3.5
    e = flow.zeros(0, 3)
    assert np.from_dlpack(e).shape == (0, 3)
    assert flow.from_dlpack(np.zeros((2, 0), dtype=np.float32)).shape == (2, 0)


def test_dlpack_device_and_protocol_arguments():
    t = flow.ones(2)
    assert t.__dlpack_device__() == (1, 0)
    assert "versioned" in repr(t.__dlpack__(max_version=(1, 0)))
    copied = np.from_dlpack(t, copy=True)
    assert not np.shares_memory(copied, t._data)
    with pytest.raises(BufferError, match="stream must be None"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="CPU device"):
        t.__dlpack__(dl_device=(2, 0))


# -- refusals -----------------------------------------------------------------------------------------------
def test_requires_grad_is_refused_like_torch():
    t = flow.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="Can't export tensors that require gradient, use tensor.detach()"):
        np.from_dlpack(t)
    assert np.from_dlpack(t.detach()).shape == (3,)


def test_complex_is_refused_both_ways():
    c = flow.complex(flow.ones(2), flow.zeros(2))
    with pytest.raises(fdl.DLPackError, match="complex tensors .*view_as_real"):
        np.from_dlpack(c)
    with pytest.raises(fdl.DLPackError, match="unsupported dtype complex64"):
        flow.from_dlpack(np.ones(2, dtype=np.complex64))


def test_bad_inputs():
    with pytest.raises(TypeError, match="expected an object with __dlpack__ .* got list"):
        flow.from_dlpack([1, 2])
    with pytest.raises(TypeError, match="expected a flow Tensor"):
        fdl.to_dlpack(np.ones(2))

    class OnGpu:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **_):
            raise AssertionError("must not be asked for a capsule")

    with pytest.raises(fdl.DLPackError, match="only CPU data"):
        flow.from_dlpack(OnGpu())


def test_symbolic_tensor_is_refused_inside_graph():
    seen = []

    def f(x):
        try:
            x.__dlpack__()
        except fdl.DLPackError as e:
            seen.append(str(e))
        return x + 1

    flow.compile(f)(flow.ones(2))
    assert seen and "symbolic" in seen[0]


# -- PyTorch ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_torch_round_trip_every_dtype(dtype):
    torch = _torch()
    t = _sample(dtype)
    tt = torch.from_dlpack(t)
    assert tt.dtype == getattr(torch, dtype) and tuple(tt.shape) == (3, 4)
    assert tt.data_ptr() == t._data.ctypes.data
    ref = torch.tensor(t.numpy().astype("float32")).to(tt.dtype)
    assert torch.equal(tt, ref)
    back = flow.from_dlpack(tt)
    assert back.dtype is t.dtype and back._data.ctypes.data == tt.data_ptr()
    src = ref.clone()
    f = flow.from_dlpack(src)
    np.testing.assert_array_equal(f.numpy().astype("float32"), src.to(torch.float32).numpy())


def test_torch_bfloat16_aliasing_both_ways():
    torch = _torch()
    src = torch.arange(4, dtype=torch.bfloat16)
    f = flow.from_dlpack(src)
    src[0] = 7.5
    assert f[0].item() == 7.5
    f[3] = -2.0
    assert src[3].item() == -2.0
    t = flow.zeros(3, dtype=flow.bfloat16)
    tt = torch.from_dlpack(t)
    tt[1] = 1.5
    assert t[1].item() == 1.5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int16"])
def test_torch_strided_views_match(dtype):
    torch = _torch()
    base = _sample(dtype, (4, 6))
    for view in (base.t(), base[1:, ::2], base[2]):
        tt = torch.from_dlpack(view)
        assert tt.stride() == view.stride()
        np.testing.assert_array_equal(tt.to(torch.float32).numpy(), view.float().numpy())
    tv = torch.arange(24, dtype=getattr(torch, dtype)).reshape(4, 6).t()[1:]
    f = flow.from_dlpack(tv)
    assert f.stride() == tv.stride()
    np.testing.assert_array_equal(f.float().numpy(), tv.to(torch.float32).numpy())


def test_torch_zero_dim_empty_and_grad():
    torch = _torch()
    assert torch.from_dlpack(flow.tensor(2, dtype=flow.int64)).item() == 2
    assert tuple(torch.from_dlpack(flow.zeros(0, 2)).shape) == (0, 2)
    assert flow.from_dlpack(torch.zeros(3, 0)).shape == (3, 0)
    with pytest.raises(BufferError) as ours:
        torch.from_dlpack(flow.ones(2, requires_grad=True))
    with pytest.raises(BufferError) as theirs:
        torch.ones(2, requires_grad=True).__dlpack__()
    assert str(ours.value) == str(theirs.value)
    assert flow.from_dlpack(torch.ones(2, requires_grad=True).detach()).tolist() == [1.0, 1.0]


def test_torch_complex_is_refused():
    torch = _torch()
    with pytest.raises(fdl.DLPackError, match="complex64 .*view_as_real"):
        flow.from_dlpack(torch.ones(2, dtype=torch.complex64))
