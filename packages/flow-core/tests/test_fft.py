"""flow.fft against torch.fft: every transform (real and complex input, n / s / dim / norm; values and
gradients, float32 / complex64 and float64 / complex128), the real-to-real functions, the argument
errors, and an FNO-style spectral convolution trained for a few SGD steps."""

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


ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
REAL_IN = ("rfft", "ihfft", "rfft2", "ihfft2", "rfftn", "ihfftn")  # PyTorch takes only real input there
DTYPES = [("float32", 1e-4), ("float64", 1e-10)]


def _leaf(shape, seed, real: str, cplx: bool):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if cplx:
        a = a + 1j * rng.standard_normal(shape)
        a = a.astype(np.complex64 if real == "float32" else np.complex128)
        return flow.tensor(a).requires_grad_(), torch.tensor(a).requires_grad_()
    return (
        flow.tensor(a, dtype=getattr(flow, real), requires_grad=True),
        torch.tensor(a, dtype=getattr(torch, real), requires_grad=True),
    )


def _np(t) -> np.ndarray:
    return t.detach().resolve_conj().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


def _iscx(t) -> bool:
    return t.is_complex() if isinstance(t, torch.Tensor) else flow.is_complex(t)


def _loss(m, out):
    w = m.tensor(
        np.random.default_rng(11).standard_normal(tuple(out.shape)), dtype=(out.real if _iscx(out) else out).dtype
    )
    return (out.real * w).sum() - (out.imag * w * 0.3).sum() if _iscx(out) else (out * w).sum()


def _compare(name, args, kwargs, real, tol, cplx, shape=(3, 8)):
    fx, tx = _leaf(shape, 1, real, cplx)
    fo = getattr(ff, name)(fx, *args, **kwargs)
    to = getattr(torch.fft, name)(tx, *args, **kwargs)
    assert _iscx(fo) == _iscx(to) and tuple(fo.shape) == tuple(to.shape)
    assert (fo.real if _iscx(fo) else fo).dtype.name == str((to.real if _iscx(to) else to).dtype)[6:]
    np.testing.assert_allclose(_np(fo), _np(to), rtol=tol, atol=tol)
    _loss(flow, fo).backward()
    _loss(torch, to).backward()
    assert flow.is_complex(fx.grad) == cplx
    np.testing.assert_allclose(_np(fx.grad), _np(tx.grad), rtol=tol, atol=tol)


@pytest.mark.parametrize("real,tol", DTYPES)
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("n", [None, 5, 11])
@pytest.mark.parametrize("name", ONE_D)
@pytest.mark.parametrize("cplx", [False, True])
def test_one_dimensional_transforms_match_torch(name, n, norm, real, tol, cplx):
    if cplx and name in REAL_IN:
        pytest.skip("torch takes real input only")
    _compare(name, (n,), {"norm": norm}, real, tol, cplx)
    _compare(name, (n, 0), {"norm": norm}, real, tol, cplx, shape=(6, 2, 3)) if n is None else None


N_D = ["fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn"]


@pytest.mark.parametrize("real,tol", DTYPES)
@pytest.mark.parametrize(
    "s,dim,norm",
    [
        (None, None, None),
        ((4, 6), None, "ortho"),
        (None, (0, 2), "forward"),
        ((3, -1), (2, 0), None),
        ((5,), None, None),
    ],
)
@pytest.mark.parametrize("name", N_D)
@pytest.mark.parametrize("cplx", [False, True])
def test_multi_dimensional_transforms_match_torch(name, s, dim, norm, real, tol, cplx):
    if cplx and name in REAL_IN:
        pytest.skip("torch takes real input only")
    if name.endswith("2") and (dim is None and s is not None and len(s) != 2):
        pytest.skip("the 2-d forms transform two dims")
    kwargs = {k: v for k, v in (("s", s), ("dim", dim)) if v is not None}  # torch's 2-d forms refuse dim=None
    _compare(name, (), {**kwargs, "norm": norm}, real, tol, cplx, shape=(4, 3, 6))


def test_round_trips_and_shift_of_complex():
    x = flow.randn(4, 10, dtype=flow.float64)
    np.testing.assert_allclose(ff.irfft(ff.rfft(x), n=10).numpy(), x.numpy(), atol=1e-12)
    np.testing.assert_allclose(ff.ifft(ff.fft(x)).real.numpy(), x.numpy(), atol=1e-12)
    np.testing.assert_allclose(ff.irfftn(ff.rfftn(x), s=(4, 10)).numpy(), x.numpy(), atol=1e-12)
    z = ff.fft(x)
    got, want = ff.fftshift(z, dim=-1), torch.fft.fftshift(torch.fft.fft(torch.tensor(x.numpy())), dim=-1)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-12)


def test_transform_argument_errors():
    x = flow.ones(4, 8)
    with pytest.raises(OpError, match="'norm' must be one of"):
        ff.fft(x, norm="unitary")
    with pytest.raises(OpIndexError, match="out of range"):
        ff.rfft(x, dim=2)
    with pytest.raises(OpError, match="'n' must be non-negative"):
        ff.ifft(x, -1)
    with pytest.raises(OpError, match="invalid number of data points"):
        ff.fft(x, 0)
    with pytest.raises(OpError, match="invalid number of data points"):
        ff.irfft(ff.rfft(flow.ones(4, 1)))  # n = 2 * (1 - 1) = 0
    with pytest.raises(OpIndexError, match="out of range"):
        ff.fftn(x, dim=(0, 3))
    with pytest.raises(OpError, match="names a dimension twice"):
        ff.fft2(x, dim=(1, 1))
    with pytest.raises(OpError, match="'s' and 'dim' must have the same length"):
        ff.rfftn(x, s=(2, 3), dim=(0,))
    with pytest.raises(OpTypeError, match="expects a real input tensor"):
        ff.rfft(ff.fft(x))
    with pytest.raises(OpTypeError, match="'out=' is not supported"):
        ff.fft(x, out=x)
    with pytest.raises(OpTypeError, match="float32 or float64"):
        ff.fft(flow.ones(4, dtype=flow.float16))
    assert ff.fft(flow.arange(4)).dtype is flow.complex64  # integers are promoted, as PyTorch


class _Spectral:
    """A 1-d FNO-style spectral convolution: rfft, multiply the lowest ``modes`` by a complex weight, irfft."""

    def __init__(self, m, w_re, w_im, lin, modes):
        self.m, self.modes = m, modes
        self.w_re, self.w_im, self.lin = w_re, w_im, lin

    def params(self):
        return [self.w_re, self.w_im, self.lin]

    def __call__(self, x):
        m = self.m
        n = x.shape[-1]
        xf = m.fft.rfft(x, dim=-1, norm="ortho")[..., : self.modes]  # (batch, cin, modes)
        w = m.complex(self.w_re, self.w_im)  # (cin, cout, modes)
        yf = (xf.unsqueeze(2) * w.unsqueeze(0)).sum(1)  # (batch, cout, modes)
        y = m.fft.irfft(yf, n=n, dim=-1, norm="ortho")
        return m.tanh(y) + m.matmul(x.transpose(1, 2), self.lin).transpose(1, 2)


def test_spectral_convolution_trains_like_torch():
    rng = np.random.default_rng(0)
    cin, cout, modes, n = 3, 3, 5, 16
    w_re, w_im = rng.standard_normal((2, cin, cout, modes)) * 0.3
    lin = rng.standard_normal((cin, cout)) * 0.3
    x, y = rng.standard_normal((4, cin, n)), rng.standard_normal((4, cout, n))
    losses = {}
    for m in (flow, torch):
        ps = [m.tensor(a, dtype=m.float64, requires_grad=True) for a in (w_re, w_im, lin)]
        model = _Spectral(m, *ps, modes)
        opt = (flow.optim if m is flow else torch.optim).SGD(model.params(), lr=0.1)
        xs, ys = m.tensor(x, dtype=m.float64), m.tensor(y, dtype=m.float64)
        out = []
        for _ in range(5):
            opt.zero_grad()
            loss = ((model(xs) - ys) ** 2).mean()
            loss.backward()
            opt.step()
            out.append(float(loss.detach()))
        losses[m.__name__] = out
    np.testing.assert_allclose(losses["flow"], losses["torch"], rtol=1e-10, atol=1e-10)
    assert losses["flow"][-1] < losses["flow"][0]


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
