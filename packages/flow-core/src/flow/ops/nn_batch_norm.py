"""Batch normalization as fused ops: ``batch_norm`` and its backward op ``batch_norm_backward``.

``batch_norm`` normalises each channel (dim 1) of an ``(N, C, *)`` input over the other dims and
returns ``(out, save_mean, save_invstd)`` (``invstd = 1 / sqrt(var + eps)``, biased variance). In
training the statistics are the batch's; otherwise they come from ``running_mean`` /
``running_var`` (required then) and are returned as saved. The op is functional, as PyTorch's
``_native_batch_norm_legit_functional``: it never writes its inputs, so a traced graph sees the
running-statistics update that :func:`flow.nn.functional.batch_norm` makes with ``copy_``.

Its gradient is ``batch_norm_backward`` (native on the CPU for float32 / float64, with the
cotangents of the saved statistics folded into the same pass); while a graph of the gradient is
being built it is written with flow ops instead, so gradients of any order work. Every tensor input
has the input's dtype: low-precision inputs with float32 parameters stay on the composite path of
:func:`flow.nn.functional.batch_norm`.
"""

from __future__ import annotations

from flow._dispatch import call
from flow.autograd.grad_mode import STATE
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import FLOAT, Attr

_ATTRS = [Attr("training", bool, True), Attr("eps", float, 1e-5)]


def _check_input(op, x):
    if len(x.shape) < 2:
        raise OpError(op, f"'input' must have at least 2 dims (N, C, ...), got shape {tuple(x.shape)}")


def _check_vec(op, name, t, x):
    if t is None:
        return
    c = x.shape[1]
    if tuple(t.shape) != (c,):
        raise OpError(op, f"'{name}' must have shape ({c},) (one value per channel), got {tuple(t.shape)}")
    if t.dtype != x.dtype:
        raise OpTypeError(op, f"'{name}' must have the input's dtype {x.dtype}, got {t.dtype}")
    M.check_same_device(op, x, t)


def _check_eps(op, eps):
    if not eps >= 0:  # NaN too
        raise OpError(op, f"'eps' must be non-negative, got {eps}")


def _per_channel(x) -> int:
    n = 1
    for k, s in enumerate(x.shape):
        if k != 1:
            n *= int(s)
    return n


def _bn_meta(x, weight=None, bias=None, running_mean=None, running_var=None, training=True, eps=1e-5):
    op = "batch_norm"
    _check_eps(op, eps)
    _check_input(op, x)
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        _check_vec(op, name, t, x)
    if training and _per_channel(x) <= 1:
        raise OpError(op, f"expected more than 1 value per channel when training, got input size {tuple(x.shape)}")
    if not training and (running_mean is None or running_var is None):
        raise OpError(op, "expected running_mean and running_var when training=False")
    c = (x.shape[1],)
    return (M.TensorMeta(tuple(x.shape), x.dtype, x.device), M.TensorMeta(c, x.dtype, x.device)) + (
        M.TensorMeta(c, x.dtype, x.device),
    )


def _bnb_meta(g, x, weight, save_mean, save_invstd, grad_mean=None, grad_invstd=None, training=True, eps=1e-5):
    op = "batch_norm_backward"
    _check_eps(op, eps)
    _check_input(op, x)
    if tuple(g.shape) != tuple(x.shape) or g.dtype != x.dtype:
        raise OpError(
            op, f"'grad_output' must match the input ({tuple(x.shape)} {x.dtype}), got {tuple(g.shape)} {g.dtype}"
        )
    for name, t in (
        ("weight", weight),
        ("save_mean", save_mean),
        ("save_invstd", save_invstd),
        ("grad_mean", grad_mean),
        ("grad_invstd", grad_invstd),
    ):
        _check_vec(op, name, t, x)
    dev = M.check_same_device(op, g, x)
    c = (x.shape[1],)
    return (M.TensorMeta(tuple(x.shape), x.dtype, dev), M.TensorMeta(c, x.dtype, dev), M.TensorMeta(c, x.dtype, dev))


# -- gradients ---------------------------------------------------------------------------------------------
def _bnb_composite(g, x, w, mean, invstd, gm, gi, training):
    """(grad_input, grad_weight, grad_bias) with flow ops (differentiable in every argument)."""
    cs = (x.shape[1],) + (1,) * (x.ndim - 2)
    dims = (0,) + tuple(range(2, x.ndim))
    m = float(_per_channel(x))
    r = invstd.reshape(cs)
    xc = x - mean.reshape(cs)
    sg = g.sum(dims)
    sgx = (g * xc).sum(dims)
    a = r if w is None else r * w.reshape(cs)
    if training:
        dx = a * (g - sg.reshape(cs) * (1.0 / m) - xc * (r * r * sgx.reshape(cs) * (1.0 / m)))
        if gm is not None:
            dx = dx + gm.reshape(cs) * (1.0 / m)
        if gi is not None:
            dx = dx - xc * (gi.reshape(cs) * r * r * r * (1.0 / m))
    else:
        dx = a * g
    return dx, sgx * invstd, sg


def _bn_grad(ctx, g, gm, gi):
    x, w, b, rm, rv = ctx.inputs
    _, mean, invstd = ctx.outputs
    training, eps = ctx.attrs.get("training", True), ctx.attrs.get("eps", 1e-5)
    if STATE.grad_enabled:  # building a graph of the gradient: differentiable composite
        dx, dw, db = _bnb_composite(g, x, w, mean, invstd, gm, gi, training)
    else:
        dx, dw, db = call(BATCH_NORM_BACKWARD, g, x, w, mean, invstd, gm, gi, training=training, eps=eps)
    drm = drv = None
    if not training:  # the statistics are the running ones: out = (x - rm) * invstd(rv) * w + b
        wv = 1.0 if w is None else w
        if ctx.next[3][0] is not None:
            drm = -(wv * invstd) * db + (gm if gm is not None else 0.0)
        if ctx.next[4][0] is not None:
            dinv = dw * wv * (1.0 / invstd) + (gi if gi is not None else 0.0)  # d/d invstd
            drv = dinv * (-0.5) * invstd * invstd * invstd
    return (
        dx if ctx.next[0][0] is not None else None,
        dw if w is not None and ctx.next[1][0] is not None else None,
        db if b is not None and ctx.next[2][0] is not None else None,
        drm,
        drv,
    )


def _bnb_grad(ctx, a, bw, bb):
    """Gradient of batch_norm_backward: autograd through its flow-op composite."""
    import flow

    ins = ctx.inputs
    training = ctx.attrs.get("training", True)
    build = STATE.grad_enabled
    leaves = [None if t is None else (t if build else t.detach().requires_grad_(True)) for t in ins]
    with flow.enable_grad():
        outs = _bnb_composite(*leaves, training)
        want = [t for t in leaves if t is not None]
        grads = flow.autograd.grad(outs, want, grad_outputs=(a, bw, bb), allow_unused=True, create_graph=build)
    it = iter(grads)
    res = [None if t is None else next(it) for t in leaves]
    return tuple(r if ctx.next[k][0] is not None else None for k, r in enumerate(res))


BATCH_NORM = defop(
    "batch_norm",
    ["input", "weight?", "bias?", "running_mean?", "running_var?"],
    _ATTRS,
    outputs=("out", "save_mean", "save_invstd"),
    meta=_bn_meta,
    dtypes=FLOAT,
    grad=_bn_grad,
    save="both",
    saved_outputs=(1, 2),  # mean and invstd: an in-place activation may overwrite the output
)
BATCH_NORM_BACKWARD = defop(
    "batch_norm_backward",
    ["grad_output", "input", "weight?", "save_mean", "save_invstd", "grad_mean?", "grad_invstd?"],
    _ATTRS,
    outputs=("grad_input", "grad_weight", "grad_bias"),
    meta=_bnb_meta,
    dtypes=FLOAT,
    grad=_bnb_grad,
    save="inputs",
)


# -- kernels -----------------------------------------------------------------------------------------------
def _x3(x):
    return x.reshape(x.shape[0], x.shape[1], -1) if x.size else x.reshape(x.shape[0], x.shape[1], 0)


def _eval_stats(xp, rm, rv, eps, dt):
    # per channel, in float64: one rounding to the input's dtype
    return rm.astype(dt), (1.0 / xp.sqrt(rv.astype(xp.float64) + eps)).astype(dt)


@kernel(BATCH_NORM)
def _bn_kernel(xp):
    def run(x, w, b, rm, rv, training=True, eps=1e-5):
        dt = x.dtype
        x3 = _x3(x).astype(xp.float64)
        if training:
            mean = x3.mean(axis=(0, 2)) if x3.size else xp.zeros(x.shape[1])
            xc = x3 - mean[:, None]
            var = (xc * xc).mean(axis=(0, 2)) if x3.size else xp.zeros(x.shape[1])
            invstd = 1.0 / xp.sqrt(var + eps)
        else:
            mean, invstd = (a.astype(xp.float64) for a in _eval_stats(xp, rm, rv, eps, dt))
            xc = x3 - mean[:, None]
        y = xc * invstd[:, None]
        if w is not None:
            y = y * w.astype(xp.float64)[:, None]
        if b is not None:
            y = y + b.astype(xp.float64)[:, None]
        return y.reshape(x.shape).astype(dt), mean.astype(dt), invstd.astype(dt)

    return run


@kernel(BATCH_NORM_BACKWARD)
def _bnb_kernel(xp):
    def run(g, x, w, mean, invstd, gm, gi, training=True, eps=1e-5):
        dt = x.dtype
        f = xp.float64
        g3, x3 = _x3(g).astype(f), _x3(x).astype(f)
        mu, r = mean.astype(f)[:, None], invstd.astype(f)[:, None]
        m = float(max(_per_channel(x), 1))
        xc = x3 - mu
        sg = g3.sum(axis=(0, 2))
        sgx = (g3 * xc).sum(axis=(0, 2))
        a = r if w is None else r * w.astype(f)[:, None]
        if training:
            dx = a * (g3 - sg[:, None] / m - xc * (r * r * sgx[:, None] / m))
            if gm is not None:
                dx = dx + gm.astype(f)[:, None] / m
            if gi is not None:
                dx = dx - xc * (gi.astype(f)[:, None] * r * r * r / m)
        else:
            dx = a * g3
        return dx.reshape(x.shape).astype(dt), (sgx * r[:, 0]).astype(dt), sg.astype(dt)

    return run


_NATIVE_DTYPES = ("float32", "float64")


def _native():
    from flow.backends.cpu import native

    return native if native.HAVE_NATIVE else None


@kernel(BATCH_NORM, "cpu", name="default")
def _bn_cpu(x, w, b, rm, rv, training=True, eps=1e-5):
    """The ``flow._C`` kernel for float32 / float64 (any layout: the wrapper makes it contiguous)."""
    import numpy as np

    nat = _native()
    if nat is None or x.dtype.name not in _NATIVE_DTYPES:
        return _bn_kernel(np)(x, w, b, rm, rv, training, eps)
    mean = invstd = None
    if not training:
        mean, invstd = _eval_stats(np, rm, rv, eps, x.dtype)
    y, mean, invstd = nat.batch_norm_forward(_x3(x), w, b, mean, invstd, eps)
    return y.reshape(x.shape), mean, invstd


@kernel(BATCH_NORM_BACKWARD, "cpu", name="default")
def _bnb_cpu(g, x, w, mean, invstd, gm, gi, training=True, eps=1e-5):
    import numpy as np

    nat = _native()
    if nat is None or x.dtype.name not in _NATIVE_DTYPES:
        return _bnb_kernel(np)(g, x, w, mean, invstd, gm, gi, training, eps)
    dx, dw, db = nat.batch_norm_backward(_x3(g), _x3(x), w, mean, invstd, gm, gi, training)
    return dx.reshape(x.shape), dw, db


def batch_norm_op(input, weight, bias, running_mean, running_var, training: bool, eps: float) -> tuple:
    """``(out, save_mean, save_invstd)`` of the fused op; ``running_*`` are read only when not ``training``."""
    return call(BATCH_NORM, input, weight, bias, running_mean, running_var, training=bool(training), eps=float(eps))


# -- opcheck samples ---------------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _pos(shape, seed):
    return S.uniform(shape, seed=seed) * 0.5 + 1.0  # a variance: positive


def _bn_samples():
    x = S.uniform((3, 4, 5), seed=1)
    w, b, rm, rv = S.uniform((4,), seed=2), S.uniform((4,), seed=3), S.uniform((4,), seed=4), _pos((4,), 5)
    yield SampleInput((x, w, b, None, None), {"training": True, "eps": 1e-5})
    yield SampleInput((x, w, b, rm, rv), {"training": False, "eps": 1e-5})
    yield SampleInput((S.uniform((4, 3), seed=6), None, None, None, None), {"training": True, "eps": 1e-3})
    yield SampleInput((S.uniform((2, 3, 2, 3), seed=7), None, S.uniform((3,), seed=8), None, None), {"eps": 1e-5})
    yield SampleInput((S.uniform((2, 1, 2, 2, 2), seed=9), S.uniform((1,), seed=10), None, None, None), {})
    yield SampleInput((S.uniform((1, 3), seed=11), None, None, rm[:3], rv[:3]), {"training": False, "eps": 1e-5})
    at = {"training": True, "eps": 1e-5}
    yield ErrorInput((x, S.uniform((3,)), None, None, None), at, OpError, "'weight' must have shape (4,)")
    yield ErrorInput((x, w.float(), None, None, None), at, OpTypeError, "'weight' must have the input's dtype")
    yield ErrorInput((x, None, None, rm, None), {**at, "training": False}, OpError, "expected running_mean and")
    yield ErrorInput((S.uniform((1, 4)), None, None, None, None), at, OpError, "more than 1 value per channel")
    yield ErrorInput((S.uniform((4,)), None, None, None, None), at, OpError, "at least 2 dims")
    yield ErrorInput((x, None, None, None, None), {**at, "eps": -1.0}, OpError, "'eps' must be non-negative")


def _bnb_samples():
    x, g = S.uniform((3, 4, 5), seed=1), S.uniform((3, 4, 5), seed=2)
    w, mean, inv = S.uniform((4,), seed=3), S.uniform((4,), seed=4), _pos((4,), 5)
    gm, gi = S.uniform((4,), seed=6), S.uniform((4,), seed=7)
    yield SampleInput((g, x, w, mean, inv, None, None), {"training": True, "eps": 1e-5})
    yield SampleInput((g, x, w, mean, inv, gm, gi), {"training": True, "eps": 1e-5})
    yield SampleInput((g, x, None, mean, inv, None, None), {"training": False, "eps": 1e-5})
    g4, x4 = S.uniform((2, 3, 2, 2), seed=8), S.uniform((2, 3, 2, 2), seed=9)
    yield SampleInput((g4, x4, None, mean[:3], inv[:3], gm[:3], None), {"training": True, "eps": 1e-5})
    at = {"training": True, "eps": 1e-5}
    yield ErrorInput((g[:2], x, w, mean, inv, None, None), at, OpError, "'grad_output' must match the input")
    yield ErrorInput((g, x, w, mean[:3], inv, None, None), at, OpError, "'save_mean' must have shape (4,)")
    yield ErrorInput((g, x, w, mean, inv.float(), None, None), at, OpTypeError, "'save_invstd' must have the")
    yield ErrorInput((g, x, w, mean, inv, gm[:2], None), at, OpError, "'grad_mean' must have shape (4,)")


set_samples(BATCH_NORM, _bn_samples)
set_samples(BATCH_NORM_BACKWARD, _bnb_samples)

__all__: list[str] = []
