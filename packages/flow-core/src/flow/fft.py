"""``flow.fft``: PyTorch's ``torch.fft``.

The transforms (``fft``, ``ifft``, ``rfft``, ``irfft``, ``hfft``, ``ihfft``, their ``2`` and ``n``
forms) take and give complex tensors (:mod:`flow._complex`), with PyTorch's ``n`` / ``s`` (pad with
zeros or trim the input first), ``dim`` and ``norm`` (``"backward"``, ``"forward"``, ``"ortho"``)
arguments; values and gradients are PyTorch's. ``fftfreq``, ``rfftfreq``, ``fftshift`` and
``ifftshift`` work on real tensors. Each transform runs one of the ops of :mod:`flow.ops.fft`
(``fft_c2c``, ``fft_r2c``, ``fft_c2r``) on the real and imaginary parts.

>>> x = flow.randn(16, dtype=flow.float64)
>>> flow.fft.irfft(flow.fft.rfft(x), n=16).allclose(x)
True
"""

from __future__ import annotations

from typing import Sequence

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import fft as _F
from flow.ops import meta as M

fftfreq = _F.fftfreq
rfftfreq = _F.rfftfreq
fftshift = _F.fftshift
ifftshift = _F.ifftshift

_NORMS = (None, "forward", "backward", "ortho")


def _norm(op: str, norm) -> str:
    if norm not in _NORMS:
        raise OpError(op, f"'norm' must be one of {_NORMS}, got {norm!r}")
    return norm or "backward"


def _check(op: str, input, out) -> None:
    _F._check_tensor(op, input)
    if out is not None:
        raise OpTypeError(op, "'out=' is not supported")


def _real(op: str, x):
    """A real input as the transforms take it: integers and bools promoted to the default float dtype."""
    from flow._complex import ComplexTensor
    from flow._dtype import get_default_dtype

    if isinstance(x, ComplexTensor):
        raise OpTypeError(op, f"expects a real input tensor, got {x.dtype}")
    return x if x.dtype.is_floating_point else x.to(get_default_dtype())


def _pair(op: str, x) -> tuple:
    """``(re, im)`` of a complex input; a real input has a zero imaginary part."""
    from flow._complex import ComplexTensor
    from flow._creation import zeros_like

    if isinstance(x, ComplexTensor):
        return x.real, x.imag
    x = _real(op, x)
    return x, zeros_like(x)


def _resize(t, d: int, n: int):
    """``t`` trimmed or zero-padded along ``d`` to length ``n`` (as PyTorch does with ``n`` / ``s``)."""
    if n < t.shape[d]:
        return t.narrow(d, 0, n)
    return _F._pad_last(t, d, n)


def _one_d(op: str, x, n, dim) -> tuple:
    if n is not None:
        _F._check_n(op, n)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise OpTypeError(op, f"'dim' must be an int, got {type(dim).__name__}")
    return (None if n is None else (n,)), (M.wrap_dim(op, dim, max(x.ndim, 1)),)


def _n_d(op: str, x, s, dim, two: bool, c2r: bool = False) -> tuple:
    """PyTorch's ``s`` / ``dim`` rules: ``dim`` defaults to the last ``len(s)`` dims (every dim, or the last
    two for the ``2`` forms); ``s`` to the input's sizes; an ``s`` entry of -1 keeps that size."""
    if dim is None:
        if two:
            dim = (-2, -1)
        elif s is not None:
            dim = tuple(range(-len(s), 0))
    if dim is not None:
        dim = (dim,) if isinstance(dim, int) else tuple(dim)
    dims = M.wrap_dims(op, dim, x.ndim)
    if s is None:
        return None, dims
    s = (s,) if isinstance(s, int) else tuple(s)
    if len(s) != len(dims):
        raise OpError(op, f"'s' and 'dim' must have the same length, got s={s} and dim={tuple(dim)}")
    for v in s:
        if isinstance(v, bool) or not isinstance(v, int):
            raise OpTypeError(op, f"'s' must be a sequence of ints, got {s!r}")
        if v < -1:
            raise OpError(op, f"'s' entries must be non-negative (or -1 to keep a size), got {s!r}")
    size = [x.shape[d] if v == -1 else v for v, d in zip(s, dims)]
    if c2r and s[-1] == -1:
        size[-1] = None  # the output length of a c2r transform defaults to 2 * (m - 1), not m
    return tuple(size), dims


def _c2c(op: str, x, s, dims, norm, forward: bool):
    from flow._complex import ComplexTensor

    re, im = _pair(op, x)
    if s is not None:
        for d, n in zip(dims, s):
            re, im = _resize(re, d, n), _resize(im, d, n)
    re, im = call(_F.FFT_C2C, re, im, dim=dims, norm=_norm(op, norm), forward=forward)
    return ComplexTensor._from_parts(re, im)


def _r2c(op: str, x, s, dims, norm):
    from flow._complex import ComplexTensor

    x = _real(op, x)
    if s is not None:
        for d, n in zip(dims, s):
            x = _resize(x, d, n)
    re, im = call(_F.FFT_R2C, x, dim=dims, norm=_norm(op, norm))
    return ComplexTensor._from_parts(re, im)


def _c2r(op: str, x, s, dims, norm, conj: bool = False):
    re, im = _pair(op, x)
    if conj:
        im = -im
    if not dims:
        raise OpError(op, "needs at least one dim to transform")
    last = 2 * (re.shape[dims[-1]] - 1) if s is None or s[-1] is None else s[-1]
    if s is not None:
        for d, n in zip(dims[:-1], s[:-1]):
            re, im = _resize(re, d, n), _resize(im, d, n)
    if last < 1:
        raise OpError(op, f"invalid number of data points ({last}) specified")
    half = last // 2 + 1
    re, im = _resize(re, dims[-1], half), _resize(im, dims[-1], half)
    return call(_F.FFT_C2R, re, im, dim=dims, last_dim_size=last, norm=_norm(op, norm))


def _conj(z):
    return z.conj()


def fft(input, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None):
    """The 1-d discrete Fourier transform of ``input`` (real or complex) along ``dim``, padded or trimmed to ``n``."""
    _check("fft.fft", input, out)
    s, dims = _one_d("fft.fft", input, n, dim)
    return _c2c("fft.fft", input, s, dims, norm, True)


def ifft(input, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None):
    """The inverse of :func:`fft`."""
    _check("fft.ifft", input, out)
    s, dims = _one_d("fft.ifft", input, n, dim)
    return _c2c("fft.ifft", input, s, dims, norm, False)


def rfft(input, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None):
    """The FFT of a real ``input``: the ``n // 2 + 1`` non-negative frequencies."""
    _check("fft.rfft", input, out)
    s, dims = _one_d("fft.rfft", input, n, dim)
    return _r2c("fft.rfft", input, s, dims, norm)


def irfft(input, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None):
    """The inverse of :func:`rfft`: a real signal of length ``n`` (default ``2 * (m - 1)``)."""
    _check("fft.irfft", input, out)
    s, dims = _one_d("fft.irfft", input, n, dim)
    return _c2r("fft.irfft", input, s, dims, norm)


def hfft(input, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None):
    """The FFT of a Hermitian-symmetric signal given by its first half: a real result of length ``n``."""
    _check("fft.hfft", input, out)
    s, dims = _one_d("fft.hfft", input, n, dim)
    return _c2r("fft.hfft", input, s, dims, _F.SWAP_NORM[_norm("fft.hfft", norm)], conj=True)


def ihfft(input, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None):
    """The inverse of :func:`hfft`: the first half of the spectrum of a real ``input``."""
    _check("fft.ihfft", input, out)
    s, dims = _one_d("fft.ihfft", input, n, dim)
    return _conj(_r2c("fft.ihfft", input, s, dims, _F.SWAP_NORM[_norm("fft.ihfft", norm)]))


def _n_d_fn(name: str, two: bool, kind: str):
    op = f"fft.{name}"

    def fn(input, s: Sequence[int] | None = None, dim=None, norm: str | None = None, *, out=None):
        _check(op, input, out)
        size, dims = _n_d(op, input, s, dim, two, kind in ("c2r", "h"))
        if kind == "c2c":
            return _c2c(op, input, size, dims, norm, True)
        if kind == "ic2c":
            return _c2c(op, input, size, dims, norm, False)
        if kind == "r2c":
            return _r2c(op, input, size, dims, norm)
        if kind == "c2r":
            return _c2r(op, input, size, dims, norm)
        nm = _F.SWAP_NORM[_norm(op, norm)]
        if kind == "h":
            return _c2r(op, input, size, dims, nm, conj=True)
        return _conj(_r2c(op, input, size, dims, nm))

    fn.__name__ = fn.__qualname__ = name
    what = {
        "c2c": "discrete Fourier transform",
        "ic2c": "inverse discrete Fourier transform",
        "r2c": "FFT of a real input (the last dim halved)",
        "c2r": "inverse of the real FFT (a real result)",
        "h": "FFT of a Hermitian-symmetric input (a real result)",
        "ih": "inverse of the Hermitian FFT",
    }[kind]
    dims_doc = "the last two dims by default" if two else "every dim (or the last ``len(s)``) by default"
    fn.__doc__ = f"``torch.fft.{name}``: the {'2' if two else 'n'}-d {what} over ``dim`` ({dims_doc})."
    return fn


fft2 = _n_d_fn("fft2", True, "c2c")
ifft2 = _n_d_fn("ifft2", True, "ic2c")
rfft2 = _n_d_fn("rfft2", True, "r2c")
irfft2 = _n_d_fn("irfft2", True, "c2r")
hfft2 = _n_d_fn("hfft2", True, "h")
ihfft2 = _n_d_fn("ihfft2", True, "ih")
fftn = _n_d_fn("fftn", False, "c2c")
ifftn = _n_d_fn("ifftn", False, "ic2c")
rfftn = _n_d_fn("rfftn", False, "r2c")
irfftn = _n_d_fn("irfftn", False, "c2r")
hfftn = _n_d_fn("hfftn", False, "h")
ihfftn = _n_d_fn("ihfftn", False, "ih")

__all__ = [
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
    "fft",
    "ifft",
    "rfft",
    "irfft",
    "hfft",
    "ihfft",
    "fft2",
    "ifft2",
    "rfft2",
    "irfft2",
    "hfft2",
    "ihfft2",
    "fftn",
    "ifftn",
    "rfftn",
    "irfftn",
    "hfftn",
    "ihfftn",
]
