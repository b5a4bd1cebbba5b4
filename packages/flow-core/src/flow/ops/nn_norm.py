"""Normalization ops: ``layer_norm`` and its backward op ``layer_norm_backward``.

``layer_norm`` normalises over the trailing ``normalized_shape`` dims (biased
variance, as PyTorch). Its gradient is the fused ``layer_norm_backward`` op
(native on the CPU for float32/float64); when a graph of the gradient is being
built (``create_graph=True``) it is written with flow ops instead, so gradients
of any order work. ``layer_norm_backward``'s own gradient is written with flow
ops too. Batch/group/instance/RMS norms are composites in
:mod:`flow.nn.functional.normalization`.

Mixed precision, as PyTorch's mixed-type layer norm: a bfloat16 / float16 input may come with
float32 ``weight`` / ``bias``; the output has the input's dtype, the statistics accumulate in float32
(on the CPU the float32 kernel runs, :mod:`flow.backends.cpu.lowp`), and ``layer_norm_backward``
gives ``grad_input`` in the input's dtype and ``grad_weight`` / ``grad_bias`` in the weight's.
"""

from __future__ import annotations

from flow import _dtype as D
from flow._dispatch import call
from flow.autograd.grad_mode import STATE
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops.conversion import cast_like
from flow.registry.ops import FLOAT, Attr

_ATTRS = [Attr("normalized_shape", tuple, items=int), Attr("eps", float, 1e-5)]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _check_affine(op, x, t, arg, nshape):
    if t is None:
        return
    if tuple(t.shape) != nshape:
        raise OpError(op, f"'{arg}' must have shape {nshape} (normalized_shape), got {tuple(t.shape)}")
    check_param_dtype(op, arg, t, x)
    M.check_same_device(op, x, t)


_LOWP = (D.bfloat16, D.float16)


def check_param_dtype(op: str, arg: str, t, x) -> None:
    """A normalisation's weight / bias has the input's dtype, or float32 for a bfloat16 / float16
    input (PyTorch's mixed-dtype kernels; the output keeps the input's dtype)."""
    if t.dtype != x.dtype and not (t.dtype is D.float32 and x.dtype in _LOWP):
        also = " (or float32, for a bfloat16 / float16 input)" if x.dtype.is_floating_point else ""
        raise OpTypeError(op, f"'{arg}' must have the input's dtype {x.dtype}{also}, got {t.dtype}")


def _check_shape(op, x, nshape):
    k = len(nshape)
    if k == 0:
        raise OpError(op, "'normalized_shape' must name at least one dim, got ()")
    if tuple(x.shape[len(x.shape) - k :]) != nshape or len(x.shape) < k:
        raise OpError(
            op,
            f"'normalized_shape' {nshape} must match the trailing dims of the input, got input shape {tuple(x.shape)}",
        )


def _check_eps(op, eps):
    if not eps >= 0:  # NaN too
        raise OpError(op, f"'eps' must be non-negative, got {eps}")


def _ln_meta(x, weight=None, bias=None, normalized_shape=(), eps=1e-5):
    _check_eps("layer_norm", eps)
    nshape = tuple(normalized_shape)
    _check_shape("layer_norm", x, nshape)
    _check_affine("layer_norm", x, weight, "weight", nshape)
    _check_affine("layer_norm", x, bias, "bias", nshape)
    return M.TensorMeta(tuple(x.shape), x.dtype, x.device)


def _lnb_meta(g, x, weight=None, normalized_shape=(), eps=1e-5):
    op = "layer_norm_backward"
    _check_eps(op, eps)
    nshape = tuple(normalized_shape)
    _check_shape(op, x, nshape)
    _check_affine(op, x, weight, "weight", nshape)
    if tuple(g.shape) != tuple(x.shape) or g.dtype != x.dtype:
        raise OpError(
            op, f"'grad_output' must match the input ({tuple(x.shape)} {x.dtype}), got {tuple(g.shape)} {g.dtype}"
        )
    dev = M.check_same_device(op, g, x)
    pdt = x.dtype if weight is None else weight.dtype  # the parameters' gradients in their dtype
    return (
        M.TensorMeta(tuple(x.shape), x.dtype, dev),
        M.TensorMeta(nshape, pdt, dev),
        M.TensorMeta(nshape, pdt, dev),
    )


# -- gradients written with flow ops ---------------------------------------------------------------------
def _dims(ctx_shape_len: int, k: int) -> tuple:
    return tuple(range(ctx_shape_len - k, ctx_shape_len))


def _stats(x, dims, eps):
    """(xhat, rstd) of ``x`` over ``dims``, with flow ops (differentiable)."""
    from flow.ops.unary import rsqrt

    xc = x - x.mean(dims, keepdim=True)
    r = rsqrt((xc * xc).mean(dims, keepdim=True) + eps)
    return xc * r, r


def _proj(v, xh, dims):
    """``v - mean(v) - xhat * mean(v * xhat)`` (the normalisation's symmetric Jacobian / rstd)."""
    return v - v.mean(dims, keepdim=True) - xh * (v * xh).mean(dims, keepdim=True)


def _lead_sum(t, nlead: int):
    return t.sum(tuple(range(nlead))) if nlead else t


def _ln_grad_composite(g, x, w, b, dims, eps, need):
    xh, r = _stats(x, dims, eps)
    gh = g if w is None else g * cast_like(w, x)  # a float32 weight of a low-precision input
    nlead = x.ndim - len(dims)
    dx = r * _proj(gh, xh, dims) if need[0] else None
    dw = cast_like(_lead_sum(g * xh, nlead), w) if need[1] else None
    db = cast_like(_lead_sum(g, nlead), b) if need[2] else None
    return dx, dw, db


def _ln_grad(ctx, g):
    x, w, b = ctx.inputs
    nshape, eps = ctx.attrs["normalized_shape"], ctx.attrs["eps"]
    need = (
        ctx.next[0][0] is not None,
        w is not None and ctx.next[1][0] is not None,
        b is not None and ctx.next[2][0] is not None,
    )
    if STATE.grad_enabled:  # building a graph of the gradient: differentiable composite
        return _ln_grad_composite(g, x, w, b, _dims(x.ndim, len(nshape)), eps, need)
    dx, dw, db = call(LAYER_NORM_BACKWARD, g, x, w, normalized_shape=nshape, eps=eps)
    if need[2] and db.dtype is not b.dtype:  # no weight: grad_bias came in the input's dtype
        db = db.to(b.dtype)
    return (dx if need[0] else None), (dw if need[1] else None), (db if need[2] else None)


def _lnb_grad(ctx, a, bw, bb):
    """Gradient of (dx, dw, db) = layer_norm_backward(g, x, w) with cotangents (a, bw, bb)."""
    g, x, w = ctx.inputs
    nshape, eps = ctx.attrs["normalized_shape"], ctx.attrs["eps"]
    dims = _dims(x.ndim, len(nshape))
    nlead = x.ndim - len(dims)
    k = float(_numel(nshape))
    xh, r = _stats(x, dims, eps)
    pa = _proj(a, xh, dims)
    wl = None if w is None else cast_like(w, x)  # a float32 weight of a low-precision input
    bw, bb = cast_like(bw, x), cast_like(bb, x)  # cotangents of the weight's gradients: its dtype
    gh = g if w is None else g * wl
    dg = dx = dw = None
    if ctx.next[0][0] is not None:
        dg = (r * pa if w is None else wl * r * pa) + bw * xh + bb
    if w is not None and ctx.next[2][0] is not None:
        dw = cast_like(_lead_sum(g * r * pa, nlead), w)
    if ctx.next[1][0] is not None:
        f = (gh * r * pa).sum(dims, keepdim=True)
        p = (a * xh).sum(dims, keepdim=True)
        q = (gh * xh).sum(dims, keepdim=True)
        d2 = xh * (r * f * (-1.0 / k)) - (r * r) * (q * pa + p * _proj(gh, xh, dims)) * (1.0 / k)
        dx = r * _proj(g * bw, xh, dims) + d2
    return dg, dx, dw


LAYER_NORM = defop(
    "layer_norm", ["input", "weight?", "bias?"], _ATTRS, meta=_ln_meta, dtypes=FLOAT, grad=_ln_grad, save="inputs"
)
LAYER_NORM_BACKWARD = defop(
    "layer_norm_backward",
    ["grad_output", "input", "weight?"],
    _ATTRS,
    outputs=("grad_input", "grad_weight", "grad_bias"),
    meta=_lnb_meta,
    dtypes=FLOAT,
    grad=_lnb_grad,
    save="inputs",
)


# -- kernels ---------------------------------------------------------------------------------------------
def _rows(x, nshape):
    k = _numel(nshape)
    return x.reshape(-1, k) if k else x.reshape(-1, 0)


def _np_stats(xp, x2, eps):
    xf = x2.astype(xp.float64) if x2.dtype.itemsize < 4 else x2
    mean = xf.mean(axis=1, keepdims=True)
    xc = xf - mean
    rstd = 1.0 / xp.sqrt((xc * xc).mean(axis=1, keepdims=True) + eps)
    return xc * rstd, rstd


@kernel(LAYER_NORM)
def _ln_kernel(xp):
    def run(x, w, b, normalized_shape=(), eps=1e-5):
        if x.size == 0:
            return x.copy()
        x2 = _rows(x, normalized_shape)
        y, _ = _np_stats(xp, x2, eps)
        if w is not None:
            y = y * w.reshape(-1)
        if b is not None:
            y = y + b.reshape(-1)
        return y.reshape(x.shape).astype(x.dtype, copy=False)

    return run


@kernel(LAYER_NORM_BACKWARD)
def _lnb_kernel(xp):
    def run(g, x, w, normalized_shape=(), eps=1e-5):
        dt = x.dtype
        if x.size == 0:
            z = xp.zeros(normalized_shape, dt if w is None else w.dtype)
            return xp.zeros_like(x), z, z.copy()
        x2, g2 = _rows(x, normalized_shape), _rows(g, normalized_shape)
        xh, rstd = _np_stats(xp, x2, eps)
        g2 = g2.astype(xh.dtype, copy=False)
        gh = g2 if w is None else g2 * w.reshape(-1)
        dx = rstd * (gh - gh.mean(axis=1, keepdims=True) - xh * (gh * xh).mean(axis=1, keepdims=True))
        dw = (g2 * xh).sum(axis=0)
        db = g2.sum(axis=0)
        pdt = dt if w is None else w.dtype  # a float32 weight of a low-precision input: float32
        return (
            dx.reshape(x.shape).astype(dt, copy=False),
            dw.reshape(normalized_shape).astype(pdt, copy=False),
            db.reshape(normalized_shape).astype(pdt, copy=False),
        )

    return run


def native_kernels(native) -> dict:
    """CPU overrides calling the ``flow._C`` layer-norm row kernels (registered by the cpu backend)."""
    import numpy as np

    def ln(x, w, b, normalized_shape=(), eps=1e-5):
        if x.size == 0:
            return x.copy()
        x2 = _rows(x, normalized_shape)
        w1 = None if w is None else w.reshape(-1)
        b1 = None if b is None else b.reshape(-1)
        return native.layer_norm_forward(x2, w1, b1, eps)[0].reshape(x.shape)

    def lnb(g, x, w, normalized_shape=(), eps=1e-5):
        if x.size == 0:
            z = np.zeros(normalized_shape, x.dtype if w is None else w.dtype)
            return np.zeros_like(x), z, z.copy()
        x2, g2 = _rows(x, normalized_shape), _rows(g, normalized_shape)
        _, mean, rstd = native.layer_norm_forward(x2, None, None, eps)
        w1 = None if w is None else w.reshape(-1)
        dx, dw, db = native.layer_norm_backward(g2, x2, mean, rstd, w1, need_weight_grad=True, need_bias_grad=True)
        return dx.reshape(x.shape), dw.reshape(normalized_shape), db.reshape(normalized_shape)

    return {"layer_norm": ln, "layer_norm_backward": lnb}


def _nshape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, int):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalise over the trailing ``normalized_shape`` dims, then scale by ``weight`` and shift by ``bias``."""
    from flow._tensor import Tensor

    if not isinstance(input, Tensor):
        raise OpTypeError("layer_norm", f"'input' must be a Tensor, got {type(input).__name__}")
    return call(LAYER_NORM, input, weight, bias, normalized_shape=_nshape(normalized_shape), eps=float(eps))


# -- opcheck samples -------------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _ln_errors(lead, extra_args=()):
    """Error inputs of layer_norm (``lead`` = tensors before 'input': layer_norm_backward's grad_output)."""
    x, w = S.uniform((3, 5), seed=1), S.uniform((5,), seed=2)
    at = {"normalized_shape": (5,), "eps": 1e-5}
    yield ErrorInput(
        (*lead, x, w, *extra_args), {**at, "normalized_shape": (4,)}, OpError, "must match the trailing dims"
    )
    yield ErrorInput((*lead, x, w, *extra_args), {**at, "normalized_shape": ()}, OpError, "at least one dim")
    yield ErrorInput(
        (*lead, x, w, *extra_args), {**at, "normalized_shape": (2, 3, 5)}, OpError, "must match the trailing dims"
    )
    yield ErrorInput((*lead, x, S.uniform((4,)), *extra_args), at, OpError, "'weight' must have shape (5,)")
    yield ErrorInput((*lead, x, S.uniform((5,)).float(), *extra_args), at, OpTypeError, "'weight' must have the")
    # only a bfloat16 / float16 input takes float32 parameters
    xf = x.float()
    lead_f = tuple(t.float() for t in lead)
    yield ErrorInput((*lead_f, xf, S.uniform((5,)), *extra_args), at, OpTypeError, "'weight' must have the")
    yield ErrorInput((*lead_f, xf, w.bfloat16(), *extra_args), at, OpTypeError, "'weight' must have the")
    xb = x.bfloat16()
    lead_b = tuple(t.bfloat16() for t in lead)
    yield ErrorInput((*lead_b, xb, w.half(), *extra_args), at, OpTypeError, "'weight' must have the")
    yield ErrorInput((*lead, x, w, *extra_args), {**at, "eps": -1e-5}, OpError, "'eps' must be non-negative")


def _ln_samples():
    yield SampleInput(
        (S.uniform((3, 5), seed=1), S.uniform((5,), seed=2), S.uniform((5,), seed=3)),
        {"normalized_shape": (5,), "eps": 1e-5},
    )
    yield SampleInput(
        (S.uniform((2, 3, 4), seed=4), S.uniform((3, 4), seed=5), S.uniform((3, 4), seed=6)),
        {"normalized_shape": (3, 4), "eps": 1e-5},
    )
    yield SampleInput((S.uniform((2, 3, 4), seed=7), None, None), {"normalized_shape": (4,), "eps": 1e-3})
    yield SampleInput((S.uniform((4,), seed=8), S.uniform((4,), seed=9), None), {"normalized_shape": (4,), "eps": 1e-5})
    yield SampleInput((S.uniform((0, 4), seed=8), None, None), {"normalized_shape": (4,), "eps": 1e-5})
    for low in _LOWP:  # mixed precision: a low-precision input, float32 parameters (dtypes as given)
        yield SampleInput(
            (S.uniform((3, 5), seed=1).to(low), S.uniform((5,), seed=2).float(), S.uniform((5,), seed=3).float()),
            {"normalized_shape": (5,), "eps": 1e-5},
            dtypes=(None,),
            rtol=1e-2,
            atol=1e-2,
        )
    yield from _ln_errors((), (None,))
    yield ErrorInput(
        (S.uniform((3, 5)), None, S.uniform((3,))),
        {"normalized_shape": (5,), "eps": 1e-5},
        OpError,
        "'bias' must have shape (5,)",
    )


def _lnb_samples():
    yield SampleInput(
        (S.uniform((3, 5), seed=1), S.uniform((3, 5), seed=2), S.uniform((5,), seed=3)),
        {"normalized_shape": (5,), "eps": 1e-5},
    )
    yield SampleInput(
        (S.uniform((2, 3, 4), seed=4), S.uniform((2, 3, 4), seed=5), S.uniform((3, 4), seed=6)),
        {"normalized_shape": (3, 4), "eps": 1e-5},
    )
    yield SampleInput(
        (S.uniform((2, 3, 4), seed=7), S.uniform((2, 3, 4), seed=8), None), {"normalized_shape": (4,), "eps": 1e-3}
    )
    for low in _LOWP:
        yield SampleInput(
            (S.uniform((3, 5), seed=1).to(low), S.uniform((3, 5), seed=2).to(low), S.uniform((5,), seed=3).float()),
            {"normalized_shape": (5,), "eps": 1e-5},
            dtypes=(None,),
            rtol=2e-2,
            atol=2e-2,
        )
    yield from _ln_errors((S.uniform((3, 5), seed=3),))
    yield ErrorInput(
        (S.uniform((3, 4)), S.uniform((3, 5)), None),
        {"normalized_shape": (5,), "eps": 1e-5},
        OpError,
        "'grad_output' must match the input",
    )


set_samples(LAYER_NORM, _ln_samples)
set_samples(LAYER_NORM_BACKWARD, _lnb_samples)

__all__ = ["layer_norm"]
