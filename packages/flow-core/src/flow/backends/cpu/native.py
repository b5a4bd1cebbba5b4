"""Python wrapper around flow-core's native CPU kernels (the ``flow._C`` extension).

Every function takes and returns NumPy arrays. Inputs may be any float32 / float64 array
(non-contiguous ones are copied with :func:`numpy.ascontiguousarray`); any other dtype raises
``TypeError`` naming the function and the dtype. Arrays updated in place by the optimizer
kernels must be C-contiguous and writable, otherwise ``ValueError`` is raised.

If the extension could not be imported, ``HAVE_NATIVE`` is ``False``, ``NATIVE_ERROR`` says
why, and every kernel function raises ``RuntimeError`` instead of computing anything: callers
must check ``HAVE_NATIVE`` and use their NumPy implementation when it is ``False``.

Build / rebuild the extension with ``pip install --no-build-isolation -e packages/flow-core``.
"""

from __future__ import annotations

import operator
import os
from typing import Any

import ml_dtypes
import numpy as np

# The kernels' OpenMP threads alternate with NumPy's BLAS threads (a separate pthread pool) all through a
# training step. With libgomp's default wait policy an idle OpenMP thread spins for a while after each
# parallel region and takes a core from the BLAS call that follows (and BLAS's spinning threads from the
# next kernel): on 2 cores a 0.5 ms SGD update took 6 ms right after a matmul, and the matmul after it
# twice its time. Passive waiting sleeps instead; libgomp reads the variable once, when it loads (just
# below), and a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    from flow import _C
except ImportError as exc:  # extension not built / not importable
    _C = None
    HAVE_NATIVE: bool = False
    NATIVE_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    HAVE_NATIVE = True
    NATIVE_ERROR = None
    # one thread pool: NumPy's OpenBLAS single-threaded, its GEMM called from flow's OpenMP threads
    # (flow.backends.cpu.threads); FLOW_CPU_THREAD_POLICY=0 leaves OpenBLAS as NumPy set it up
    if os.environ.get("FLOW_CPU_THREAD_POLICY", "1") != "0":
        from flow.backends.cpu import threads as _policy

        _policy.install(_C)
    # the caching allocator for every ndarray from here on (FLOW_CPU_CACHING_ALLOCATOR=0: not installed)
    from flow.cpu import memory as _memory

    _memory.install(_C)

__all__ = [
    "HAVE_NATIVE",
    "NATIVE_ERROR",
    "adam_update",
    "adam_update_multi",
    "batch_norm_backward",
    "batch_norm_forward",
    "bf16_to_f32",
    "col2im",
    "f16_to_f32",
    "f32_to_bf16",
    "f32_to_f16",
    "gelu_backward",
    "gelu_forward",
    "get_num_threads",
    "im2col",
    "layer_norm_backward",
    "layer_norm_forward",
    "log_softmax_backward",
    "log_softmax_forward",
    "set_num_threads",
    "sgd_update",
    "sgd_update_multi",
    "silu_backward",
    "silu_forward",
    "softmax_backward",
    "softmax_forward",
]

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_GELU_APPROX = ("none", "tanh")


def _native(fn: str) -> Any:
    if _C is None:
        raise RuntimeError(
            f"{fn}: the flow native extension (flow._C) is not available ({NATIVE_ERROR}); "
            "check flow.backends.cpu.native.HAVE_NATIVE and use the NumPy implementation, or build it with "
            "`pip install --no-build-isolation -e packages/flow-core`"
        )
    return _C


def _check_dtype(fn: str, name: str, a: np.ndarray) -> None:
    if a.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{fn}: unsupported dtype {a.dtype} for '{name}' (expected float32 or float64)")


def _input(fn: str, name: str, a: Any) -> np.ndarray:
    """A read-only input: any float32/float64 array-like, made C-contiguous if needed."""
    a = np.asarray(a)
    _check_dtype(fn, name, a)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a


def _optional_input(fn: str, name: str, a: Any) -> np.ndarray | None:
    return None if a is None else _input(fn, name, a)


def _inplace(fn: str, name: str, a: Any) -> np.ndarray:
    """An array updated in place: must already be a C-contiguous, writable float array."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{fn}: '{name}' is updated in place and must be a numpy.ndarray, got {type(a).__name__}")
    _check_dtype(fn, name, a)
    if not a.flags.c_contiguous:
        raise ValueError(f"{fn}: '{name}' is updated in place and must be C-contiguous")
    if not a.flags.writeable:
        raise ValueError(f"{fn}: '{name}' is updated in place and must be writable")
    return a


def _approximate(fn: str, approximate: str) -> str:
    if approximate not in _GELU_APPROX:
        raise ValueError(f"{fn}: approximate must be 'none' or 'tanh', got {approximate!r}")
    return approximate


# ---------------------------------------------------------------------------------------------
# threads


def get_num_threads() -> int:
    """Number of OpenMP threads the kernels may use (1 when built without OpenMP)."""
    return int(_native("get_num_threads").get_num_threads())


def set_num_threads(n: int) -> None:
    """Set the OpenMP thread count for kernels called from the current thread."""
    _native("set_num_threads").set_num_threads(operator.index(n))


# ---------------------------------------------------------------------------------------------
# softmax / log_softmax (last axis)


def softmax_forward(x: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis."""
    fn = "softmax_forward"
    return _native(fn).softmax_forward(_input(fn, "x", x))


def softmax_backward(grad_out: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out * (grad_out - sum(grad_out * out, -1, keepdims=True))``."""
    fn = "softmax_backward"
    return _native(fn).softmax_backward(_input(fn, "grad_out", grad_out), _input(fn, "out", out))


def log_softmax_forward(x: np.ndarray) -> np.ndarray:
    """Numerically stable log_softmax over the last axis."""
    fn = "log_softmax_forward"
    return _native(fn).log_softmax_forward(_input(fn, "x", x))


def log_softmax_backward(grad_out: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``grad_out - exp(out) * sum(grad_out, -1, keepdims=True)``."""
    fn = "log_softmax_backward"
    return _native(fn).log_softmax_backward(_input(fn, "grad_out", grad_out), _input(fn, "out", out))


# ---------------------------------------------------------------------------------------------
# fused elementwise activations


def gelu_forward(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU: ``approximate="none"`` uses erf, ``"tanh"`` the tanh approximation (as in PyTorch)."""
    fn = "gelu_forward"
    return _native(fn).gelu_forward(_input(fn, "x", x), _approximate(fn, approximate))


def gelu_backward(grad_out: np.ndarray, x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """Gradient of GELU w.r.t. its input ``x``."""
    fn = "gelu_backward"
    return _native(fn).gelu_backward(
        _input(fn, "grad_out", grad_out), _input(fn, "x", x), _approximate(fn, approximate)
    )


def silu_forward(x: np.ndarray) -> np.ndarray:
    """SiLU: ``x * sigmoid(x)``."""
    fn = "silu_forward"
    return _native(fn).silu_forward(_input(fn, "x", x))


def silu_backward(grad_out: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Gradient of SiLU: ``grad_out * s * (1 + x * (1 - s))`` with ``s = sigmoid(x)``."""
    fn = "silu_backward"
    return _native(fn).silu_backward(_input(fn, "grad_out", grad_out), _input(fn, "x", x))


# ---------------------------------------------------------------------------------------------
# layer norm (last axis)


def layer_norm_forward(
    x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, eps: float = 1e-5
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LayerNorm over the last axis.

    Returns ``(y, mean, rstd)``; ``y`` has the shape of ``x``, ``mean`` and ``rstd`` have shape
    ``x.shape[:-1]`` and the dtype of ``x`` (``rstd = 1 / sqrt(var + eps)``, biased variance).
    ``weight`` / ``bias`` have shape ``(x.shape[-1],)`` and the dtype of ``x``.
    """
    fn = "layer_norm_forward"
    return tuple(
        _native(fn).layer_norm_forward(
            _input(fn, "x", x), _optional_input(fn, "weight", weight), _optional_input(fn, "bias", bias), float(eps)
        )
    )


def layer_norm_backward(
    grad_out: np.ndarray,
    x: np.ndarray,
    mean: np.ndarray,
    rstd: np.ndarray,
    weight: np.ndarray | None = None,
    *,
    need_weight_grad: bool | None = None,
    need_bias_grad: bool | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Backward of :func:`layer_norm_forward`: returns ``(dx, dweight, dbias)``.

    ``mean`` / ``rstd`` are the forward's outputs (any shape with one element per row of ``x``).
    ``dweight`` is computed when ``need_weight_grad`` (default: ``weight is not None``), ``dbias``
    when ``need_bias_grad`` (default: ``weight is not None``; pass it explicitly for a layer that
    has a bias but no weight, or a weight but no bias); otherwise they are ``None``.
    """
    fn = "layer_norm_backward"
    if need_weight_grad is None:
        need_weight_grad = weight is not None
    if need_bias_grad is None:
        need_bias_grad = weight is not None
    return tuple(
        _native(fn).layer_norm_backward(
            _input(fn, "grad_out", grad_out),
            _input(fn, "x", x),
            _input(fn, "mean", mean),
            _input(fn, "rstd", rstd),
            _optional_input(fn, "weight", weight),
            bool(need_weight_grad),
            bool(need_bias_grad),
        )
    )


# ---------------------------------------------------------------------------------------------
# batch norm (dim 1 of an (N, C, S) array)


def batch_norm_forward(
    x: np.ndarray,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    mean: np.ndarray | None = None,
    invstd: np.ndarray | None = None,
    eps: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BatchNorm of ``x`` of shape ``(N, C, S)`` over dims 0 and 2.

    Returns ``(y, mean, invstd)`` (``invstd = 1 / sqrt(var + eps)``, biased variance, shape ``(C,)``).
    Given ``mean`` and ``invstd`` (evaluation: from the running statistics) they are used instead of
    the batch statistics. Every vector has shape ``(C,)`` and the dtype of ``x``.
    """
    fn = "batch_norm_forward"
    return tuple(
        _native(fn).batch_norm_forward(
            _input(fn, "x", x),
            _optional_input(fn, "weight", weight),
            _optional_input(fn, "bias", bias),
            _optional_input(fn, "mean", mean),
            _optional_input(fn, "invstd", invstd),
            float(eps),
        )
    )


def batch_norm_backward(
    grad_out: np.ndarray,
    x: np.ndarray,
    weight: np.ndarray | None,
    mean: np.ndarray,
    invstd: np.ndarray,
    grad_mean: np.ndarray | None = None,
    grad_invstd: np.ndarray | None = None,
    training: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of :func:`batch_norm_forward`: returns ``(dx, dweight, dbias)``.

    ``grad_mean`` / ``grad_invstd`` are cotangents of the forward's ``mean`` / ``invstd`` outputs
    (added to ``dx`` in training). Without ``training`` the statistics are constants (``dx = g * w * invstd``).
    """
    fn = "batch_norm_backward"
    return tuple(
        _native(fn).batch_norm_backward(
            _input(fn, "grad_out", grad_out),
            _input(fn, "x", x),
            _optional_input(fn, "weight", weight),
            _input(fn, "mean", mean),
            _input(fn, "invstd", invstd),
            _optional_input(fn, "grad_mean", grad_mean),
            _optional_input(fn, "grad_invstd", grad_invstd),
            bool(training),
        )
    )


# ---------------------------------------------------------------------------------------------
# convolution columns (NCHW, 2-d): im2col and its adjoint col2im


def _conv_geometry(fn: str, img: np.ndarray, kernel_size, stride, padding, dilation) -> tuple:
    """``(kh, kw, sh, sw, pt, pl, dh, dw, Ho, Wo)`` of an (N, C, H, W) array; padding is (top, bottom, left, right)."""
    if img.ndim != 4:
        raise ValueError(f"{fn}: expected a 4-d (N, C, H, W) array, got shape {img.shape}")
    (kh, kw), (sh, sw), (dh, dw) = (tuple(operator.index(v) for v in a) for a in (kernel_size, stride, dilation))
    pt, pb, pl, pr = (operator.index(v) for v in padding)
    if min(kh, kw, sh, sw, dh, dw) < 1:
        raise ValueError(
            f"{fn}: kernel size, stride and dilation must be >= 1, got {kernel_size}, {stride}, {dilation}"
        )
    H, W = img.shape[2:]
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if H + pt + pb < eh or W + pl + pr < ew:
        raise ValueError(f"{fn}: kernel extent ({eh}, {ew}) exceeds the padded input ({H + pt + pb}, {W + pl + pr})")
    return kh, kw, sh, sw, pt, pl, dh, dw, (H + pt + pb - eh) // sh + 1, (W + pl + pr - ew) // sw + 1


def im2col(
    x: np.ndarray, kernel_size, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), out: np.ndarray | None = None
) -> np.ndarray:
    """The convolution columns of ``x`` (N, C, H, W): shape ``(C * kh * kw, N * Ho * Wo)``.

    Row ``(c * kh + i) * kw + j``, column ``n * Ho * Wo + p`` is the input value kernel tap ``(i, j)``
    of channel ``c`` reads for output pixel ``p`` of image ``n`` (zero in the padding), so
    ``weight.reshape(O, -1) @ cols`` is the convolution of a batch. ``padding`` is
    ``(top, bottom, left, right)`` (negative sides crop) and is applied while copying. ``out``, when
    given, is a C-contiguous writable array of that shape and dtype, filled and returned.
    """
    fn = "im2col"
    x = _input(fn, "x", x)
    g = _conv_geometry(fn, x, kernel_size, stride, padding, dilation)
    shape = (x.shape[1] * g[0] * g[1], x.shape[0] * g[8] * g[9])
    if out is None:
        out = np.empty(shape, dtype=x.dtype)
    else:
        out = _inplace(fn, "out", out)
        if out.shape != shape or out.dtype != x.dtype:
            raise ValueError(f"{fn}: 'out' must be a {x.dtype} array of shape {shape}, got {out.dtype} {out.shape}")
    _native(fn).im2col(x, out, *g)
    return out


def col2im(cols: np.ndarray, dx: np.ndarray, kernel_size, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)) -> None:
    """Add ``cols`` (the layout of :func:`im2col`) into ``dx`` (N, C, H, W) in place: the adjoint of im2col.

    Each column entry is added to the input position it was read from (entries read from the
    padding are dropped), which is the input gradient given the gradient of the columns.
    """
    fn = "col2im"
    dx = _inplace(fn, "dx", dx)
    cols = _input(fn, "cols", cols)
    _native(fn).col2im(cols, dx, *_conv_geometry(fn, dx, kernel_size, stride, padding, dilation))


# ---------------------------------------------------------------------------------------------
# fused optimizer steps (in place, flat buffers of equal size and dtype)


def sgd_update(
    param: np.ndarray,
    grad: np.ndarray,
    momentum_buf: np.ndarray | None,
    lr: float,
    momentum: float,
    dampening: float,
    nesterov: bool,
    weight_decay: float,
    first_step: bool,
) -> None:
    """One torch.optim.SGD step, updating ``param`` (and ``momentum_buf``) in place.

    ``momentum_buf`` is required when ``momentum != 0`` (ignored otherwise); on ``first_step``
    it is overwritten with the (weight-decayed) gradient, as PyTorch initialises its buffer.
    """
    fn = "sgd_update"
    param = _inplace(fn, "param", param)
    buf = _inplace(fn, "momentum_buf", momentum_buf) if momentum_buf is not None else None
    _native(fn).sgd_update(
        param,
        _input(fn, "grad", grad),
        buf,
        float(lr),
        float(momentum),
        float(dampening),
        bool(nesterov),
        float(weight_decay),
        bool(first_step),
    )


def adam_update(
    param: np.ndarray,
    grad: np.ndarray,
    exp_avg: np.ndarray,
    exp_avg_sq: np.ndarray,
    max_exp_avg_sq: np.ndarray | None,
    step: int,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    amsgrad: bool,
) -> None:
    """One torch.optim.Adam (``decoupled=False``) / AdamW (``decoupled=True``) step, in place.

    ``step`` is the 1-based step count *after* incrementing (as in PyTorch). Updates ``param``,
    ``exp_avg``, ``exp_avg_sq`` and, with ``amsgrad``, ``max_exp_avg_sq`` (required then).
    """
    fn = "adam_update"
    param = _inplace(fn, "param", param)
    exp_avg = _inplace(fn, "exp_avg", exp_avg)
    exp_avg_sq = _inplace(fn, "exp_avg_sq", exp_avg_sq)
    vmax = _inplace(fn, "max_exp_avg_sq", max_exp_avg_sq) if max_exp_avg_sq is not None else None
    _native(fn).adam_update(
        param,
        _input(fn, "grad", grad),
        exp_avg,
        exp_avg_sq,
        vmax,
        operator.index(step),
        float(lr),
        float(beta1),
        float(beta2),
        float(eps),
        float(weight_decay),
        bool(decoupled),
        bool(amsgrad),
    )


def sgd_update_multi(
    params: list,
    grads: list,
    momentum_buf: np.ndarray | None,
    lr: float,
    momentum: float,
    dampening: float,
    nesterov: bool,
    weight_decay: float,
    first_step: bool,
    maximize: bool = False,
) -> None:
    """:func:`sgd_update` over a list of parameter arrays in one call, each updated in its own memory.

    ``params`` are C-contiguous writable arrays of one float dtype, ``grads`` C-contiguous arrays of the
    same dtype and sizes (read only); ``momentum_buf`` is one flat buffer holding the parameters' momentum
    buffers one after the other. ``maximize`` ascends (the gradient negated). The extension checks every
    array and raises ``TypeError`` / ``ValueError`` naming it (``params[3]`` ...).
    """
    _native("sgd_update_multi").sgd_update_multi(
        params,
        grads,
        momentum_buf,
        float(lr),
        float(momentum),
        float(dampening),
        bool(nesterov),
        float(weight_decay),
        bool(first_step),
        bool(maximize),
    )


def adam_update_multi(
    params: list,
    grads: list,
    exp_avg: np.ndarray,
    exp_avg_sq: np.ndarray,
    max_exp_avg_sq: np.ndarray | None,
    step: int,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    amsgrad: bool,
    maximize: bool = False,
) -> None:
    """:func:`adam_update` over a list of parameter arrays in one call (flat states, as
    :func:`sgd_update_multi`)."""
    _native("adam_update_multi").adam_update_multi(
        params,
        grads,
        exp_avg,
        exp_avg_sq,
        max_exp_avg_sq,
        operator.index(step),
        float(lr),
        float(beta1),
        float(beta2),
        float(eps),
        float(weight_decay),
        bool(decoupled),
        bool(amsgrad),
        bool(maximize),
    )


# ---------------------------------------------------------------------------------------------
# low-precision conversions (bit-exact with ml_dtypes' / NumPy's astype; see csrc/lowp.cpp)

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def _bits_in(fn: str, a: Any, dtype: np.dtype) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != dtype:
        raise TypeError(f"{fn}: expected a {dtype} array, got {a.dtype}")
    return a if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(a.shape)


def _out(fn: str, out: np.ndarray | None, dtype: np.dtype, like: np.ndarray) -> np.ndarray | None:
    if out is None:
        return None
    if not isinstance(out, np.ndarray) or out.dtype != dtype or out.shape != like.shape:
        raise TypeError(f"{fn}: 'out' must be a {dtype} array of shape {like.shape}")
    return out


def _from_bits(fn: str, a: Any, dtype: np.dtype, out: np.ndarray | None) -> np.ndarray:
    a = _bits_in(fn, a, dtype)
    out = _out(fn, out, _F32, a)
    return getattr(_native(fn), fn)(a.view(np.uint16), out)


def _to_bits(fn: str, a: Any, dtype: np.dtype, out: np.ndarray | None) -> np.ndarray:
    a = _bits_in(fn, a, _F32)
    out = _out(fn, out, dtype, a)
    r = getattr(_native(fn), fn)(a, None if out is None else out.view(np.uint16))
    return out if out is not None else r.view(dtype)


def bf16_to_f32(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """bfloat16 -> float32 (exact), into ``out`` (C-contiguous float32) when given.

    >>> bf16_to_f32(np.ones(3, ml_dtypes.bfloat16)).dtype
    dtype('float32')
    """
    return _from_bits("bf16_to_f32", a, _BF16, out)


def f32_to_bf16(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 -> bfloat16, rounding to nearest even (NaN -> quiet NaN), as ``a.astype(ml_dtypes.bfloat16)``."""
    return _to_bits("f32_to_bf16", a, _BF16, out)


def f16_to_f32(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float16 -> float32 (exact; F16C when the CPU has it)."""
    return _from_bits("f16_to_f32", a, _F16, out)


def f32_to_f16(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 -> float16, rounding to nearest even, bit-exact with ``a.astype(np.float16)``."""
    return _to_bits("f32_to_f16", a, _F16, out)
