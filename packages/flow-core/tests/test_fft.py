"""flow.fft against torch.fft: the real-to-real functions (values and gradients, float32 and float64,
batched), and the clear error of the transforms flow cannot represent (no complex dtype)."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.fft as ff
from flow.errors import OpError, OpIndexError, OpTypeError

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8])
@pytest.mark.parametrize("d", [1.0, 0.25, 3])
def test_fftfreq_rfftfreq_match_torch(n, d):
    for name in ("fftfreq", "rfftfreq"):
        if n == 0 and name == "rfftfreq":
            continue  # PyTorch divides 0 by 0 there
        got, want = getattr(ff, name)(n, d), getattr(torch.fft, name)(n, d)
        assert got.dtype is flow.float32 and tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
        got = getattr(ff, name)(n, d, dtype=flow.float64, requires_grad=True)
        want = getattr(torch.fft, name)(n, d, dtype=torch.float64)
        assert got.dtype is flow.float64 and got.requires_grad
        np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "shape,dim", [((5,), None), ((4, 7), None), ((3, 4, 5), 1), ((3, 4, 5), (0, -1)), ((6, 3), -2)]
)
@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
def test_shifts_match_torch_with_gradients(name, shape, dim, dtype):
    a = np.random.default_rng(0).standard_normal(shape)
    fx = flow.tensor(a, dtype=getattr(flow, dtype), requires_grad=True)
    tx = torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=True)
    fo, to = getattr(ff, name)(fx, dim), getattr(torch.fft, name)(tx, dim)
    np.testing.assert_array_equal(fo.detach().numpy(), to.detach().numpy())
    w = np.arange(fo.numel(), dtype=np.float64).reshape(shape)
    (fo * flow.tensor(w, dtype=fo.dtype)).sum().backward()
    (to * torch.tensor(w, dtype=to.dtype)).sum().backward()
    np.testing.assert_array_equal(fx.grad.numpy(), tx.grad.numpy())


def test_shift_round_trip_and_0d():
    x = flow.arange(7.0)
    np.testing.assert_array_equal(ff.ifftshift(ff.fftshift(x)).numpy(), x.numpy())
    with pytest.raises(RuntimeError, match="shifts"):
        torch.fft.fftshift(torch.tensor(3.0))
    with pytest.raises(OpError, match="needs at least one dim to shift"):
        ff.fftshift(flow.tensor(3.0))
    with pytest.raises(OpError, match="needs at least one dim to shift"):
        ff.ifftshift(x, dim=())


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_one_dimensional_transforms_raise_complex_not_supported(name):
    x = flow.ones(4, 8)
    torch_out = getattr(torch.fft, name)(torch.ones(4, 8))
    assert torch_out.is_complex() or name in ("irfft", "hfft")  # the others produce complex, these consume it
    with pytest.raises(OpTypeError, match=f"fft.{name}: complex tensors are not supported"):
        getattr(ff, name)(x)
    with pytest.raises(OpError, match="'norm' must be one of"):
        getattr(ff, name)(x, norm="unitary")
    with pytest.raises(OpIndexError, match="out of range"):
        getattr(ff, name)(x, dim=2)
    with pytest.raises(OpError, match="'n' must be non-negative"):
        getattr(ff, name)(x, -1)


@pytest.mark.parametrize("name", ["fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn"])
def test_multi_dimensional_transforms_raise_complex_not_supported(name):
    x = flow.ones(2, 4, 8)
    with pytest.raises(OpTypeError, match="complex tensors are not supported"):
        getattr(ff, name)(x, dim=(0, 1))
    with pytest.raises(OpIndexError, match="out of range"):
        getattr(ff, name)(x, dim=(0, 3))


def test_argument_errors():
    with pytest.raises(OpTypeError, match="'n' must be an int"):
        ff.fftfreq(2.5)
    with pytest.raises(OpError, match="'n' must be non-negative"):
        ff.rfftfreq(-1)
    with pytest.raises(OpTypeError, match="'d' must be a number"):
        ff.fftfreq(4, "x")
    with pytest.raises(OpTypeError, match="floating-point dtype"):
        ff.fftfreq(4, dtype=flow.int64)
    with pytest.raises(OpTypeError, match="must be a Tensor"):
        ff.fftshift([1.0, 2.0])
    with pytest.raises(OpIndexError, match="out of range"):
        ff.ifftshift(flow.ones(3), dim=1)
    with pytest.raises(OpTypeError, match="must be a Tensor"):
        ff.fft(np.ones(3))
