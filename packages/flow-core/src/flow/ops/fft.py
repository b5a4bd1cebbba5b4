"""The functions of :mod:`flow.fft` (``torch.fft``).

flow has no complex dtype, and adding one is a change to the dtype system, every kernel family and
autograd. So the real-to-real part of ``torch.fft`` is implemented (``fftfreq``, ``rfftfreq``,
``fftshift``, ``ifftshift``, with gradients where the input is a tensor), and the transforms, whose
input or output is complex (``fft``, ``rfft``, ``irfft`` ...), check their arguments as PyTorch does
and then raise :class:`flow.errors.OpTypeError` saying that complex tensors are not supported.
"""

from __future__ import annotations

from typing import Sequence

from flow.errors import OpError, OpTypeError
from flow.ops import meta as M

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


def _unsupported(name: str, signal_ndim: int | None):
    """A transform of ``torch.fft``: its arguments are checked, then complex output (or input) is refused."""

    def fn(input, s=None, dim=None, norm: str | None = None, *, out=None):
        op = f"fft.{name}"
        _check_tensor(op, input)
        if norm not in _NORMS:
            raise OpError(op, f"'norm' must be one of {_NORMS}, got {norm!r}")
        if out is not None:
            raise OpTypeError(op, "'out=' is not supported")
        if signal_ndim == 1:
            if s is not None:
                _check_n(op, s)
            M.wrap_dim(op, -1 if dim is None else dim, max(input.ndim, 1))
        elif dim is not None:
            M.wrap_dims(op, (dim,) if isinstance(dim, int) else tuple(dim), input.ndim)
        raise OpTypeError(
            op,
            "complex tensors are not supported (flow has no complex dtype), so neither are the FFTs; "
            "flow.fft provides fftfreq, rfftfreq, fftshift and ifftshift",
        )

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"``torch.fft.{name}``: not supported, its {'input or ' if name.startswith(('i', 'h')) else ''}output is "
        "complex and flow has no complex dtype. Checks its arguments, then raises OpTypeError."
    )
    return fn


_ONE_D = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
_N_D = ("fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn")
globals().update({n: _unsupported(n, 1) for n in _ONE_D})
globals().update({n: _unsupported(n, None) for n in _N_D})

__all__: list = []  # the namespace is flow.fft
