"""The ops behind :mod:`flow.fft` (``torch.fft``), and its real-to-real functions.

``fftfreq``, ``rfftfreq``, ``fftshift`` and ``ifftshift`` are written with other flow ops. The
transforms are three registered ops on real tensors, a complex tensor being passed as its two parts
(see :mod:`flow._complex`):

- ``fft_c2c(re, im; dim, norm, forward) -> (re, im)``: the complex FFT (or inverse) over ``dim``;
- ``fft_r2c(input; dim, norm) -> (re, im)``: the FFT of a real tensor, the last of ``dim`` halved to
  ``n // 2 + 1`` (the non-negative frequencies);
- ``fft_c2r(re, im; dim, norm, last_dim_size) -> out``: the inverse of ``fft_r2c``, whose last of
  ``dim`` has ``last_dim_size // 2 + 1`` entries and grows to ``last_dim_size``.

The kernels are NumPy's pocketfft (``numpy.fft``), results cast back to the parts' dtype. The
gradients are PyTorch's: the adjoint transform (the inverse direction with the swapped norm) for
``fft_c2c``; the adjoint of zero-padding the half spectrum, real part, for ``fft_r2c``; and for
``fft_c2r`` the ``fft_r2c`` of the gradient with the bins that stand for two frequencies doubled
(the Hermitian-halving weights), which is also the exact gradient of the kernel, since pocketfft
ignores the imaginary parts of the zero and Nyquist bins. Padding and trimming to ``n`` / ``s``
are done by :mod:`flow.fft` with differentiable flow ops before these ops run.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import Attr, dtypes

_NORMS = (None, "forward", "backward", "ortho")


def _check_tensor(op: str, x) -> None:
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError(op, f"'input' must be a Tensor, got {type(x).__name__}")


def _shift_dims(op: str, x, dim) -> tuple:
    dims = tuple(range(x.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:  # as PyTorch, which has no shift to apply then
        raise OpError(op, f"needs at least one dim to shift, got a tensor of shape {tuple(x.shape)} and dim={dim!r}")
    return M.wrap_dims(op, dims, x.ndim)


def fftshift(input, dim: int | Sequence[int] | None = None):
    """Move the zero-frequency term to the centre: roll each of ``dim`` (every dim when None) by ``n // 2``."""
    from flow.ops.shape_ops import roll

    _check_tensor("fft.fftshift", input)
    dims = _shift_dims("fft.fftshift", input, dim)
    return roll(input, tuple(input.shape[d] // 2 for d in dims), dims)


def ifftshift(input, dim: int | Sequence[int] | None = None):
    """The inverse of :func:`fftshift`: roll each of ``dim`` by ``-(n // 2)``."""
    from flow.ops.shape_ops import roll

    _check_tensor("fft.ifftshift", input)
    dims = _shift_dims("fft.ifftshift", input, dim)
    return roll(input, tuple(-(input.shape[d] // 2) for d in dims), dims)


def _check_n(op: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise OpTypeError(op, f"'n' must be an int, got {type(n).__name__}")
    if n < 0:
        raise OpError(op, f"'n' must be non-negative, got {n}")
    return n


def _freqs(op: str, values: list, n: int, d: float, dtype, device, requires_grad: bool):
    from flow._creation import tensor

    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise OpTypeError(op, f"'d' must be a number, got {type(d).__name__}")
    if dtype is not None and not dtype.is_floating_point:
        raise OpTypeError(op, f"'dtype' must be a floating-point dtype, got {dtype}")
    scale = 1.0 / (float(d) * n) if n else 0.0
    out = tensor([v * scale for v in values], dtype=dtype, device=device)
    return out.requires_grad_(requires_grad) if requires_grad else out


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad: bool = False):
    """The sample frequencies of an ``n``-point FFT with sample spacing ``d``:
    ``[0, 1, ..., ceil(n/2) - 1, -floor(n/2), ..., -1] / (d n)``."""
    n = _check_n("fft.fftfreq", n)
    values = list(range((n + 1) // 2)) + list(range(-(n // 2), 0))
    return _freqs("fft.fftfreq", values, n, d, dtype, device, requires_grad)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad: bool = False):
    """The non-negative sample frequencies of an ``n``-point real FFT: ``[0, 1, ..., n // 2] / (d n)``."""
    n = _check_n("fft.rfftfreq", n)
    return _freqs("fft.rfftfreq", list(range(n // 2 + 1)), n, d, dtype, device, requires_grad)


# -- the transforms as ops ---------------------------------------------------------------------------
# as PyTorch on the CPU (pocketfft has no half precision there); the parts of complex64 / complex128
FFT_FLOAT = dtypes(names=["float32", "float64"], text="a float32 or float64 tensor")
NORMS = ("backward", "forward", "ortho")
# the norm of the adjoint transform: the unnormalised direction carries the scale the other way
SWAP_NORM = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
_DIM = Attr("dim", tuple, items=int)
_NORM = Attr("norm", str, "backward", NORMS)


def _check_rank(op: str, x) -> None:
    if x.ndim == 0:  # wrap_dims reads a 0-d tensor as 1-d (a scalar's dim 0): there is no signal to transform
        raise OpError(op, "expected a tensor of at least 1 dim, got a 0-d tensor")


def _signal_dims(op: str, x, dim: tuple) -> tuple:
    _check_rank(op, x)
    dims = M.wrap_dims(op, dim, x.ndim)
    if not dims:
        raise OpError(op, "needs at least one dim to transform")
    for d in dims:
        if x.shape[d] < 1:
            raise OpError(op, f"invalid number of data points (0) along dim {d} of shape {tuple(x.shape)}")
    return dims


def _pair_meta(op: str, re, im):
    dev = M.check_same_device(op, re, im)
    if tuple(re.shape) != tuple(im.shape) or re.dtype != im.dtype:
        raise OpError(
            op,
            f"the real and imaginary parts must have one shape and dtype, got {tuple(re.shape)} {re.dtype} "
            f"and {tuple(im.shape)} {im.dtype}",
        )
    return dev


def _c2c_meta(re, im, dim, norm="backward", forward=True):
    dev = _pair_meta("fft_c2c", re, im)
    _signal_dims("fft_c2c", re, dim)
    m = M.TensorMeta(tuple(re.shape), re.dtype, dev)
    return m, m


def _c2c_grad(ctx, g_re, g_im):
    a = ctx.attrs
    dims = M.wrap_dims("fft_c2c", a["dim"], g_re.ndim)
    norm = SWAP_NORM[a.get("norm", "backward")]
    return call(FFT_C2C, g_re, g_im, dim=dims, norm=norm, forward=not a.get("forward", True))


FFT_C2C = defop(
    "fft_c2c",
    ["re", "im"],
    [_DIM, _NORM, Attr("forward", bool, True)],
    outputs=("re", "im"),
    meta=_c2c_meta,
    dtypes=FFT_FLOAT,
    grad=_c2c_grad,
    save="inputs",
)


def _split(z, dtype):
    return np.ascontiguousarray(z.real, dtype=dtype), np.ascontiguousarray(z.imag, dtype=dtype)


@kernel(FFT_C2C)
def _c2c_kernel(xp):
    def run(re, im, dim, norm="backward", forward=True):
        z = re + 1j * im
        dims = tuple(d % re.ndim for d in dim)
        out = xp.fft.fftn(z, axes=dims, norm=norm) if forward else xp.fft.ifftn(z, axes=dims, norm=norm)
        return _split(out, re.dtype)

    return run


def _r2c_meta(x, dim, norm="backward"):
    dev = M.check_same_device("fft_r2c", x)
    dims = _signal_dims("fft_r2c", x, dim)
    shape = list(x.shape)
    shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    m = M.TensorMeta(tuple(shape), x.dtype, dev)
    return m, m


def _pad_last(t, d: int, n: int):
    """``t`` zero-padded along ``d`` to length ``n`` (differentiable: a ``cat`` with zeros)."""
    from flow import _creation as C
    from flow.ops.shape_ops import cat

    extra = n - t.shape[d]
    if extra <= 0:
        return t
    shape = list(t.shape)
    shape[d] = extra
    return cat([t, C.zeros(tuple(shape), dtype=t.dtype, device=t.device)], d)


def _r2c_grad(ctx, g_re, g_im):
    # the adjoint of "full spectrum, then keep the non-negative half": zero-pad, inverse-direction c2c, real part
    x = ctx.inputs[0]
    dims = M.wrap_dims("fft_r2c", ctx.attrs["dim"], x.ndim)
    n = x.shape[dims[-1]]
    g_re, g_im = _pad_last(g_re, dims[-1], n), _pad_last(g_im, dims[-1], n)
    norm = SWAP_NORM[ctx.attrs.get("norm", "backward")]
    return (call(FFT_C2C, g_re, g_im, dim=dims, norm=norm, forward=False)[0],)


FFT_R2C = defop(
    "fft_r2c",
    ["input"],
    [_DIM, _NORM],
    outputs=("re", "im"),
    meta=_r2c_meta,
    dtypes=FFT_FLOAT,
    grad=_r2c_grad,
    save="inputs",
)


@kernel(FFT_R2C)
def _r2c_kernel(xp):
    def run(x, dim, norm="backward"):
        dims = tuple(d % x.ndim for d in dim)
        return _split(xp.fft.rfftn(x, axes=dims, norm=norm), x.dtype)

    return run


def _c2r_meta(re, im, dim, last_dim_size, norm="backward"):
    op = "fft_c2r"
    dev = _pair_meta(op, re, im)
    _check_rank(op, re)
    dims = M.wrap_dims(op, dim, re.ndim)
    if not dims:
        raise OpError(op, "needs at least one dim to transform")
    if last_dim_size < 1:
        raise OpError(op, f"invalid number of data points ({last_dim_size}) specified")
    half = last_dim_size // 2 + 1
    if re.shape[dims[-1]] != half:
        raise OpError(
            op,
            f"dim {dims[-1]} of the input must have last_dim_size // 2 + 1 = {half} entries, got {re.shape[dims[-1]]}",
        )
    _signal_dims(op, re, dims)
    shape = list(re.shape)
    shape[dims[-1]] = last_dim_size
    return M.TensorMeta(tuple(shape), re.dtype, dev)


def _c2r_grad(ctx, g):
    from flow import _creation as C

    dims = M.wrap_dims("fft_c2r", ctx.attrs["dim"], g.ndim)
    n = ctx.attrs["last_dim_size"]
    g_re, g_im = call(FFT_R2C, g, dim=dims, norm=SWAP_NORM[ctx.attrs.get("norm", "backward")])
    # each bin but the zero one (and the Nyquist one of an even n) stands for two conjugate frequencies
    w = np.ones(n // 2 + 1)
    w[1 : 1 + n - (n // 2 + 1)] = 2.0
    shape = [1] * g.ndim
    shape[dims[-1]] = w.size
    wt = C.tensor(w.reshape(shape), dtype=g.dtype, device=g.device)
    return g_re * wt, g_im * wt


FFT_C2R = defop(
    "fft_c2r",
    ["re", "im"],
    [_DIM, Attr("last_dim_size", int), _NORM],
    meta=_c2r_meta,
    dtypes=FFT_FLOAT,
    grad=_c2r_grad,
    save="inputs",
)


@kernel(FFT_C2R)
def _c2r_kernel(xp):
    def run(re, im, dim, last_dim_size, norm="backward"):
        dims = tuple(d % re.ndim for d in dim)
        s = [re.shape[d] for d in dims[:-1]] + [last_dim_size]
        out = xp.fft.irfftn(re + 1j * im, s=s, axes=dims, norm=norm)
        return xp.ascontiguousarray(out, dtype=re.dtype)

    return run


# -- opcheck samples -------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _c2c_samples():
    for k, (shape, dim) in enumerate([((8,), (0,)), ((3, 5), (1,)), ((2, 3, 4), (0, 2)), ((4, 3), (0, 1))]):
        for norm, fwd in (("backward", True), ("ortho", False), ("forward", True)):
            yield SampleInput(
                (S.uniform(shape, seed=k), S.uniform(shape, seed=k + 9)), {"dim": dim, "norm": norm, "forward": fwd}
            )
    x = S.uniform((3, 4))
    yield ErrorInput((x, S.uniform((3, 5))), {"dim": (1,)}, OpError, "must have one shape and dtype")
    yield ErrorInput((x, x), {"dim": (2,)}, OpError, "out of range")
    yield ErrorInput((x, x), {"dim": (0, 0)}, OpError, "names a dimension twice")
    yield ErrorInput((x, x), {"dim": (1,), "norm": "unitary"}, OpError, "'norm' must be one of")
    yield ErrorInput((S.uniform((0, 3)), S.uniform((0, 3))), {"dim": (0,)}, OpError, "invalid number of data points")
    yield ErrorInput((S.uniform(()), S.uniform(())), {"dim": (0,)}, OpError, "got a 0-d tensor")


def _r2c_samples():
    for k, (shape, dim) in enumerate([((8,), (0,)), ((3, 5), (1,)), ((2, 3, 4), (2, 0)), ((4, 3), (0, 1))]):
        for norm in NORMS:
            yield SampleInput((S.uniform(shape, seed=k),), {"dim": dim, "norm": norm})
    x = S.uniform((3, 4))
    yield ErrorInput((x,), {"dim": (2,)}, OpError, "out of range")
    yield ErrorInput((x,), {"dim": ()}, OpError, "needs at least one dim")
    yield ErrorInput((S.uniform((3, 0)),), {"dim": (1,)}, OpError, "invalid number of data points")
    yield ErrorInput((S.uniform(()),), {"dim": (0,)}, OpError, "got a 0-d tensor")


def _hermitian(shape, seed):
    return S.uniform(shape, seed=seed), S.uniform(shape, seed=seed + 5)


def _c2r_samples():
    cases = [((5,), (0,), 8), ((5,), (0,), 9), ((3, 4), (1,), 6), ((2, 3, 3), (0, 2), 5), ((2, 3), (1, 0), 3)]
    for k, (shape, dim, n) in enumerate(cases):
        for norm in NORMS:
            yield SampleInput(_hermitian(shape, k), {"dim": dim, "last_dim_size": n, "norm": norm})
    re, im = _hermitian((3, 4), 0)
    yield ErrorInput((re, im), {"dim": (1,), "last_dim_size": 8}, OpError, "must have last_dim_size // 2 + 1 = 5")
    yield ErrorInput((re, im), {"dim": (1,), "last_dim_size": 0}, OpError, "invalid number of data points")
    yield ErrorInput((re, S.uniform((3,))), {"dim": (1,), "last_dim_size": 6}, OpError, "one shape and dtype")
    yield ErrorInput((S.uniform(()), S.uniform(())), {"dim": (0,), "last_dim_size": 1}, OpError, "got a 0-d tensor")


set_samples(FFT_C2C, _c2c_samples)
set_samples(FFT_R2C, _r2c_samples)
set_samples(FFT_C2R, _c2r_samples)

__all__: list = []  # the namespace is flow.fft
