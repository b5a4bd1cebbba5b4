"""Fused nn activations with their own backward ops: softmax, log_softmax, silu.

Each op's gradient is another op (``softmax_backward`` ...) whose own gradient
is written with flow ops, so gradients of any order work. Native CPU kernels
(``flow._C``) override the reference kernels for float32/float64 (see
:mod:`flow.backends.cpu.kernels`); they work over the last axis, so the
reduced dim is moved last for them.
"""

from __future__ import annotations

import warnings

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import FLOAT, Attr

_DIM = [Attr("dim", int, -1)]


def _t():
    from flow._tensor import Tensor

    return Tensor


def _float_meta(op):
    def rule(x, dim=-1):
        if len(x.shape) == 0:
            raise OpError(op, "expected a tensor with at least 1 dimension (0-d inputs are reshaped by the caller)")
        M.wrap_dim(op, dim, len(x.shape))
        return M.TensorMeta(tuple(x.shape), x.dtype, x.device)

    return rule


def _bw_meta(op):
    base = M.elementwise(op)

    def rule(g, y, dim=-1):
        m = base(g, y)
        if tuple(g.shape) != tuple(y.shape):
            raise OpError(
                op, f"'grad_output' and 'output' must have the same shape, got {tuple(g.shape)} and {tuple(y.shape)}"
            )
        M.wrap_dim(op, dim, len(g.shape))
        return m

    return rule


# -- softmax / log_softmax -------------------------------------------------------------------------
def _softmax_grad(ctx, g):
    return (call(SOFTMAX_BACKWARD, g, ctx.outputs[0], dim=ctx.attrs["dim"]),)


def _log_softmax_grad(ctx, g):
    return (call(LOG_SOFTMAX_BACKWARD, g, ctx.outputs[0], dim=ctx.attrs["dim"]),)


def _softmax_backward_grad(ctx, gg):
    # dx = y * (g - sum(g * y));  d<gg, dx>/dg = softmax_backward(gg, y)
    # d<gg, dx>/dy = gg * (g - sum(g * y)) - g * sum(gg * y)
    g, y = ctx.inputs
    dim = ctx.attrs["dim"]
    dg = dy = None
    if ctx.next[0][0] is not None:
        dg = call(SOFTMAX_BACKWARD, gg, y, dim=dim)
    if ctx.next[1][0] is not None:
        dy = gg * (g - (g * y).sum(dim, keepdim=True)) - g * (gg * y).sum(dim, keepdim=True)
    return dg, dy


def _log_softmax_backward_grad(ctx, gg):
    # dx = g - exp(y) * sum(g)
    g, y = ctx.inputs
    dim = ctx.attrs["dim"]
    from flow.ops.unary import exp

    e = exp(y)
    dg = dy = None
    if ctx.next[0][0] is not None:
        dg = gg - (gg * e).sum(dim, keepdim=True)
    if ctx.next[1][0] is not None:
        dy = -(gg * e) * g.sum(dim, keepdim=True)
    return dg, dy


SOFTMAX = defop(
    "softmax", ["input"], _DIM, meta=_float_meta("softmax"), dtypes=FLOAT, grad=_softmax_grad, save="outputs"
)
LOG_SOFTMAX = defop(
    "log_softmax",
    ["input"],
    _DIM,
    meta=_float_meta("log_softmax"),
    dtypes=FLOAT,
    grad=_log_softmax_grad,
    save="outputs",
)
SOFTMAX_BACKWARD = defop(
    "softmax_backward",
    ["grad_output", "output"],
    _DIM,
    meta=_bw_meta("softmax_backward"),
    dtypes=FLOAT,
    grad=_softmax_backward_grad,
    save="inputs",
)
LOG_SOFTMAX_BACKWARD = defop(
    "log_softmax_backward",
    ["grad_output", "output"],
    _DIM,
    meta=_bw_meta("log_softmax_backward"),
    dtypes=FLOAT,
    grad=_log_softmax_backward_grad,
    save="inputs",
)


def _upcast(xp, x):
    """Half-precision inputs are computed in float32 (as PyTorch accumulates them)."""
    return x.astype(xp.float32) if x.dtype.itemsize < 4 else x


def softmax_np(xp, x, dim):
    xf = _upcast(xp, x)
    if xf.size == 0:
        return xf.astype(x.dtype)
    e = xp.exp(xf - xp.max(xf, axis=dim, keepdims=True))
    return (e / xp.sum(e, axis=dim, keepdims=True)).astype(x.dtype, copy=False)


def log_softmax_np(xp, x, dim):
    xf = _upcast(xp, x)
    if xf.size == 0:
        return xf.astype(x.dtype)
    z = xf - xp.max(xf, axis=dim, keepdims=True)
    return (z - xp.log(xp.sum(xp.exp(z), axis=dim, keepdims=True))).astype(x.dtype, copy=False)


@kernel(SOFTMAX)
def _softmax_kernel(xp):
    return lambda x, dim=-1: softmax_np(xp, x, dim)


@kernel(LOG_SOFTMAX)
def _log_softmax_kernel(xp):
    return lambda x, dim=-1: log_softmax_np(xp, x, dim)


@kernel(SOFTMAX_BACKWARD)
def _softmax_bw_kernel(xp):
    def run(g, y, dim=-1):
        gf, yf = _upcast(xp, g), _upcast(xp, y)
        return (yf * (gf - xp.sum(gf * yf, axis=dim, keepdims=True))).astype(g.dtype, copy=False)

    return run


@kernel(LOG_SOFTMAX_BACKWARD)
def _log_softmax_bw_kernel(xp):
    def run(g, y, dim=-1):
        gf, yf = _upcast(xp, g), _upcast(xp, y)
        return (gf - xp.exp(yf) * xp.sum(gf, axis=dim, keepdims=True)).astype(g.dtype, copy=False)

    return run


def _softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def _softmax_call(handle, name, input, dim, dtype):
    if not isinstance(input, _t()):
        raise OpTypeError(name, f"'input' must be a Tensor, got {type(input).__name__}")
    if dtype is not None:
        input = input.to(D.as_dtype(dtype))
    if dim is None:
        dim = _softmax_dim(name, input.ndim)
    if not input.dtype.is_floating_point:
        raise OpTypeError(name, f"'input' must be a floating-point tensor, got {input.dtype} (pass dtype=)")
    if input.ndim == 0:
        M.wrap_dim(name, dim, 0)
        return call(handle, input.reshape(1), dim=0).reshape(())
    return call(handle, input, dim=M.wrap_dim(name, dim, input.ndim))


def softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    """``exp(x) / sum(exp(x), dim)``, computed stably; ``dtype`` casts the input first."""
    return _softmax_call(SOFTMAX, "softmax", input, dim, dtype)


def log_softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    """``log(softmax(x, dim))`` computed stably."""
    return _softmax_call(LOG_SOFTMAX, "log_softmax", input, dim, dtype)


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):
    """``softmax(-x, dim)``."""
    if dtype is not None:
        input = input.to(D.as_dtype(dtype))
    return _softmax_call(SOFTMAX, "softmin", -input, dim, None)


# -- silu ---------------------------------------------------------------------------------------------
def _silu_grad(ctx, g):
    return (call(SILU_BACKWARD, g, ctx.inputs[0]),)


def _silu_backward_grad(ctx, gg):
    # dx = g * s * (1 + x (1 - s));  silu''(x) = s (1 - s) (2 + x (1 - 2 s))
    from flow.ops.unary import sigmoid

    g, x = ctx.inputs
    dg = dx = None
    if ctx.next[0][0] is not None:
        dg = call(SILU_BACKWARD, gg, x)
    if ctx.next[1][0] is not None:
        s = sigmoid(x)
        dx = gg * g * (s * (1.0 - s) * (x * (1.0 - s * 2.0) + 2.0))
    return dg, dx


SILU = defop("silu", ["input"], meta=M.same, dtypes=FLOAT, grad=_silu_grad, save="inputs", elementwise=True)
# (its meta rule runs eagerly: the native kernel does not broadcast)
SILU_BACKWARD = defop(
    "silu_backward",
    ["grad_output", "input"],
    meta=M.same_shapes("silu_backward"),
    dtypes=FLOAT,
    grad=_silu_backward_grad,
    save="inputs",
    elementwise=True,
    eager_meta=True,
)


def _sigmoid_np(xp, x):
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


@kernel(SILU)
def _silu_kernel(xp):
    return lambda x: (x * _sigmoid_np(xp, x)).astype(x.dtype, copy=False)


@kernel(SILU_BACKWARD)
def _silu_bw_kernel(xp):
    def run(g, x):
        s = _sigmoid_np(xp, x)
        return (g * s * (1 + x * (1 - s))).astype(g.dtype, copy=False)

    return run


def silu(input, inplace: bool = False):
    """``x * sigmoid(x)`` (fused; ``inplace=True`` writes into ``input``)."""
    if not isinstance(input, _t()):
        raise OpTypeError("silu", f"'input' must be a Tensor, got {type(input).__name__}")
    out = call(SILU, input)
    if inplace:
        from flow.ops.inplace import apply_inplace

        return apply_inplace(input, out, "silu_")
    return out


# -- opcheck samples -------------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _sm_samples():
    yield SampleInput((S.uniform((3, 5), -3, 3, 1),), {"dim": 1})
    yield SampleInput((S.uniform((3, 5), -3, 3, 2),), {"dim": 0})
    yield SampleInput((S.uniform((2, 3, 4), -3, 3, 3),), {"dim": 1})
    yield SampleInput((S.uniform((2, 3, 4), -3, 3, 4),), {"dim": -1})
    yield SampleInput((S.uniform((6,), -3, 3, 5),), {"dim": 0})
    yield SampleInput((S.uniform((0, 3), -3, 3, 5),), {"dim": 1})
    yield from S.dim_errors(S.uniform((3, 5), -3, 3, 1), tuple_dims=False)
    yield ErrorInput((S.uniform((), seed=6),), {"dim": 0}, OpError, "at least 1 dimension")


def _sm_bw_samples(log: bool):
    def samples():
        for k, (shape, dim) in enumerate((((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4), -1))):
            x = S.uniform(shape, -2, 2, 10 + k)
            y = log_softmax(x, dim) if log else softmax(x, dim)
            yield SampleInput((S.uniform(shape, -1, 1, 20 + k), y.detach()), {"dim": dim})
        g, y = S.uniform((3, 5), -1, 1, 20), S.uniform((3, 5), seed=21)
        yield ErrorInput((g, y[:2]), {"dim": 1}, OpError, "")
        yield ErrorInput((g, y), {"dim": 2}, OpIndexError, "out of range")

    return samples


set_samples(SOFTMAX, _sm_samples)
set_samples(LOG_SOFTMAX, _sm_samples)
set_samples(SOFTMAX_BACKWARD, _sm_bw_samples(False))
set_samples(LOG_SOFTMAX_BACKWARD, _sm_bw_samples(True))
set_samples(SILU, S.unary(-4.0, 4.0))
set_samples(
    SILU_BACKWARD,
    lambda: [
        SampleInput((S.uniform((3, 4), -1, 1, 1), S.uniform((3, 4), -4, 4, 2))),
        SampleInput((S.uniform((5,), -1, 1, 3), S.uniform((5,), -4, 4, 4))),
        ErrorInput(
            (S.uniform((4,), seed=1), S.uniform((3, 4), seed=2)),
            {},
            OpError,
            "'input' must have the shape and dtype of 'grad_output'",
        ),
    ],
)

__all__ = ["softmax", "log_softmax", "softmin", "silu"]
