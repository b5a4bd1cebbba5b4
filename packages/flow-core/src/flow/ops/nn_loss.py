"""Classification losses as fused ops: ``cross_entropy`` (log_softmax + nll in one kernel, class-index
targets) and ``nll_loss``, each with a backward op.

Inputs are ``(C,)`` with a 0-d target or ``(N, C, d1, ...)`` with a ``(N, d1, ...)`` target; the class
dim is 1 (0 for 1-d inputs). Targets out of ``[0, C)`` (other than ``ignore_index``) raise
:class:`~flow.errors.OpIndexError`. Probability targets and the other losses are composites in
:mod:`flow.nn.functional.loss`.
"""

from __future__ import annotations

import numpy as np

from flow._dispatch import call
from flow.autograd.grad_mode import STATE
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops.clamp_where import where
from flow.registry.ops import FLOAT, Attr, dtypes

REDUCTIONS = ("none", "mean", "sum")
_NLL_ATTRS = [Attr("ignore_index", int, -100), Attr("reduction", str, "mean", REDUCTIONS)]
_CE_ATTRS = _NLL_ATTRS + [Attr("label_smoothing", float, 0.0)]
# class indices are int64 (or uint8), as PyTorch's nll_loss takes them
TARGETS = dtypes(names=["int64", "uint8"], text="an int64 (or uint8) tensor of class indices")


def _check_target(op, x, t, w, reduction):
    nd = len(x.shape)
    if nd == 0:
        raise OpError(op, "'input' must have at least 1 dim (C,) or (N, C, ...), got a 0-d tensor")
    c = x.shape[0] if nd == 1 else x.shape[1]
    want = () if nd == 1 else (x.shape[0],) + tuple(x.shape[2:])
    if tuple(t.shape) != want:
        raise OpError(op, f"'target' must have shape {want} for input of shape {tuple(x.shape)}, got {tuple(t.shape)}")
    if w is not None:
        if tuple(w.shape) != (c,):
            raise OpError(op, f"'weight' must have shape ({c},) (one weight per class), got {tuple(w.shape)}")
        if w.dtype != x.dtype:
            raise OpTypeError(op, f"'weight' must have the input's dtype {x.dtype}, got {w.dtype}")
    if reduction not in REDUCTIONS:
        raise OpError(op, f"'reduction' must be one of {REDUCTIONS}, got {reduction!r}")
    dev = M.check_same_device(op, x, t, w)
    return M.TensorMeta(want if reduction == "none" else (), x.dtype, dev)


def _ce_meta(x, t, w=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if not 0.0 <= label_smoothing <= 1.0:
        raise OpError("cross_entropy", f"'label_smoothing' must be in [0, 1], got {label_smoothing}")
    return _check_target("cross_entropy", x, t, w, reduction)


def _nll_meta(x, t, w=None, ignore_index=-100, reduction="mean"):
    return _check_target("nll_loss", x, t, w, reduction)


def _bw_meta(op, inner):
    def rule(g, x, t, w=None, **attrs):
        m = inner(x, t, w, **attrs)
        if tuple(g.shape) != tuple(m.shape) or g.dtype != x.dtype:
            raise OpError(op, f"'grad_output' must be {tuple(m.shape)} {x.dtype}, got {tuple(g.shape)} {g.dtype}")
        return M.TensorMeta(tuple(x.shape), x.dtype, m.device)

    return rule


def _nllb_meta(g, t, w=None, num_classes=1, ignore_index=-100, reduction="mean"):
    if num_classes < 0:
        raise OpError("nll_loss_backward", f"'num_classes' must be non-negative, got {num_classes}")
    shape = (num_classes,) if len(t.shape) == 0 else (t.shape[0], num_classes) + tuple(t.shape[1:])
    return _bw_meta("nll_loss_backward", _nll_meta)(
        g, M.TensorMeta(shape, g.dtype, g.device), t, w, ignore_index=ignore_index, reduction=reduction
    )


# -- shared kernel pieces (NumPy-like ``xp``) --------------------------------------------------------------
def _rows(xp, x):
    """(M, C) rows with the class dim last (a copy for inputs with spatial dims)."""
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim == 2:
        return x
    return xp.ascontiguousarray(xp.moveaxis(x, 1, -1)).reshape(-1, x.shape[1])


def _unrows(xp, d2, shape):
    if len(shape) <= 2:
        return d2.reshape(shape)
    return xp.moveaxis(d2.reshape((shape[0],) + tuple(shape[2:]) + (shape[1],)), -1, 1)


def _targets(xp, op, t, c, ignore_index):
    """Flat targets with ignored ones replaced by 0, and the valid mask; raises on out-of-range classes."""
    t1 = t.reshape(-1)
    valid = t1 != ignore_index
    bad = valid & ((t1 < 0) | (t1 >= c))
    if bool(bad.any()):
        v = int(t1[bad][0])
        raise OpIndexError(op, f"'target' holds class index {v}, out of range [0, {c}) (ignore_index={ignore_index})")
    return xp.where(valid, t1, 0).astype(xp.int64, copy=False), valid


def _class_weights(xp, w, tt, valid, dt):
    wt = w[tt] if w is not None else xp.ones(tt.shape, dt)
    return xp.where(valid, wt, 0).astype(dt, copy=False)


def _reduce(xp, loss, wt, reduction, shape, dt):
    if reduction == "none":
        return loss.reshape(shape).astype(dt, copy=False)
    s = loss.sum()
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            s = s / wt.sum()
    return xp.asarray(s, dtype=dt)


def _scale(xp, g, wt, reduction, dt):
    """Per-row factor of the gradient: g (none), g (sum) or g / sum of weights (mean)."""
    if reduction == "none":
        return g.reshape(-1).astype(dt, copy=False)
    if reduction == "sum":
        return xp.full(wt.shape, g.reshape(()), dt)
    tot = wt.sum()
    return xp.full(wt.shape, g.reshape(()) / tot if tot != 0 else 0, dt)


def ce_forward(xp, lsm):
    """The cross_entropy kernel given a row log_softmax ``lsm((M, C)) -> (M, C)``."""

    def run(x, t, w, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        c = x.shape[0] if x.ndim == 1 else x.shape[1]
        tt, valid = _targets(xp, "cross_entropy", t, c, ignore_index)
        if tt.size == 0:
            return _reduce(xp, xp.zeros((0,), x.dtype), xp.zeros((0,), x.dtype), reduction, t.shape, x.dtype)
        logp = lsm(_rows(xp, x))
        wt = _class_weights(xp, w, tt, valid, x.dtype)
        loss = xp.where(valid, -xp.take_along_axis(logp, tt[:, None], 1)[:, 0] * wt, 0)
        if label_smoothing > 0:
            smooth = -(logp * w).sum(1) if w is not None else -logp.sum(1)
            loss = (1 - label_smoothing) * loss + (label_smoothing / c) * xp.where(valid, smooth, 0)
        return _reduce(xp, loss, wt, reduction, t.shape, x.dtype)

    return run


def ce_backward(xp, sm):
    """The cross_entropy_backward kernel given a row softmax ``sm``."""

    def run(g, x, t, w, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        c = x.shape[0] if x.ndim == 1 else x.shape[1]
        tt, valid = _targets(xp, "cross_entropy_backward", t, c, ignore_index)
        if tt.size == 0:
            return xp.zeros_like(x)
        d = sm(_rows(xp, x))  # a fresh array: scaled in place below
        eps = label_smoothing
        wt = _class_weights(xp, w, tt, valid, x.dtype)
        cs = _scale(xp, g, wt, reduction, x.dtype)
        wsum = w.sum() if w is not None else c
        s = ((1 - eps) * wt + xp.where(valid, eps / c * wsum, 0)).astype(x.dtype, copy=False)
        if d.dtype != x.dtype:
            d = d.astype(x.dtype)
        d *= (cs * s)[:, None]
        rows = xp.arange(tt.size)
        d[rows, tt] -= cs * (1 - eps) * wt
        if eps > 0:
            wv = w[None, :] if w is not None else 1.0
            d -= (xp.where(valid, cs, 0) * x.dtype.type(eps / c))[:, None] * wv
        return _unrows(xp, d.astype(x.dtype, copy=False), x.shape)

    return run


@kernel("cross_entropy")
def _ce_kernel(xp):
    from flow.ops.nn_act import log_softmax_np

    return ce_forward(xp, lambda r: log_softmax_np(xp, r, 1))


@kernel("cross_entropy_backward")
def _ceb_kernel(xp):
    from flow.ops.nn_act import softmax_np

    return ce_backward(xp, lambda r: softmax_np(xp, r, 1))


def native_kernels(native) -> dict:
    """CPU overrides: the same kernels with the native row softmax / log_softmax."""
    return {
        "cross_entropy": ce_forward(np, native.log_softmax_forward),
        "cross_entropy_backward": ce_backward(np, native.softmax_forward),
    }


def _pick(xp, x, tt, t_shape):
    """input[i, t_i, ...] along the class dim (no copy of the input)."""
    if x.ndim == 1:
        return x[tt].reshape(1)
    idx = tt.reshape((x.shape[0], 1) + tuple(x.shape[2:]))
    return xp.take_along_axis(x, idx, 1).reshape(-1)


@kernel("nll_loss")
def _nll_kernel(xp):
    def run(x, t, w, ignore_index=-100, reduction="mean"):
        c = x.shape[0] if x.ndim == 1 else x.shape[1]
        tt, valid = _targets(xp, "nll_loss", t, c, ignore_index)
        wt = _class_weights(xp, w, tt, valid, x.dtype)
        loss = xp.where(valid, -_pick(xp, x, tt, t.shape) * wt, 0) if tt.size else xp.zeros((0,), x.dtype)
        return _reduce(xp, loss, wt, reduction, t.shape, x.dtype)

    return run


@kernel("nll_loss_backward")
def _nllb_kernel(xp):
    def run(g, t, w, num_classes=1, ignore_index=-100, reduction="mean"):
        tt, valid = _targets(xp, "nll_loss_backward", t, num_classes, ignore_index)
        dt = g.dtype
        wt = _class_weights(xp, w, tt, valid, dt)
        vals = -_scale(xp, g, wt, reduction, dt) * wt
        if t.ndim == 0:
            d = xp.zeros((num_classes,), dt)
            d[tt] = vals
            return d
        shape = (t.shape[0], num_classes) + tuple(t.shape[1:])
        d = xp.zeros(shape, dt)
        inner = tt.reshape((t.shape[0], 1) + tuple(t.shape[1:]))
        xp.put_along_axis(d, inner, vals.reshape(inner.shape), 1)
        return d

    return run


# -- gradients -----------------------------------------------------------------------------------------
def _target_dist(x, t, w, ignore_index, eps):
    """The (unnormalised) target distribution T with loss = -sum(T * log_softmax(x)) in the input's layout,
    and the sum of the target weights (the 'mean' divisor, a 0-d tensor), with device ops only."""
    import flow

    cdim = 0 if x.ndim == 1 else 1
    c = x.shape[cdim]
    ones = flow.ones_like(t, dtype=x.dtype)
    onehot = -call(NLL_BACKWARD, ones, t, w, num_classes=c, ignore_index=ignore_index, reduction="none")
    T = onehot * (1.0 - eps) if eps else onehot
    if eps:
        valid = (t != ignore_index).to(x.dtype).unsqueeze(cdim)
        wv = w.reshape((c,) + (1,) * (x.ndim - 1 - cdim)) if w is not None else 1.0
        T = T + valid * wv * (eps / c)
    return T, onehot.sum()


def _row_scale(g, reduction, wsum, cdim, ndim):
    if reduction == "none":
        return g.unsqueeze(cdim) if ndim > 1 else g
    if reduction == "mean":  # g / wsum, and 0 when every target is ignored
        nz = wsum != 0
        return g / where(nz, wsum, 1.0) * nz.to(g.dtype)
    return g


def _attrs(ctx) -> dict:
    a = {"ignore_index": -100, "reduction": "mean", "label_smoothing": 0.0}
    a.update(ctx.attrs)
    return a


def _ce_composite_grad(g, x, t, w, attrs):
    from flow.ops.nn_act import softmax

    cdim = 0 if x.ndim == 1 else 1
    T, wsum = _target_dist(x, t, w, attrs["ignore_index"], attrs["label_smoothing"])
    c = _row_scale(g, attrs["reduction"], wsum, cdim, x.ndim)
    return c * (softmax(x, cdim) * T.sum(cdim, keepdim=True) - T)


def _ce_grad(ctx, g):
    x, t, w = ctx.inputs
    if STATE.grad_enabled:  # a graph of the gradient is being built: differentiable composite
        return _ce_composite_grad(g, x, t, w, _attrs(ctx)), None, None
    return call(CE_BACKWARD, g, x, t, w, **ctx.attrs), None, None


def _ceb_grad(ctx, gg):
    from flow.ops.nn_act import SOFTMAX_BACKWARD, softmax

    g, x, t, w = ctx.inputs
    cdim = 0 if x.ndim == 1 else 1
    a = _attrs(ctx)
    T, wsum = _target_dist(x, t, w, a["ignore_index"], a["label_smoothing"])
    s = T.sum(cdim, keepdim=True)
    p = softmax(x, cdim)
    red = a["reduction"]
    dg = dx = None
    if ctx.next[1][0] is not None:
        dx = call(SOFTMAX_BACKWARD, gg * _row_scale(g, red, wsum, cdim, x.ndim) * s, p, dim=cdim)
    if ctx.next[0][0] is not None:
        h = (gg * (p * s - T)).sum(cdim)
        if red == "sum":
            dg = h.sum()
        elif red == "mean":
            nz = wsum != 0
            dg = h.sum() / where(nz, wsum, 1.0) * nz.to(h.dtype)
        else:
            dg = h
    return dg, dx, None, None


def _nll_grad(ctx, g):
    x, t, w = ctx.inputs
    c = x.shape[0] if x.ndim == 1 else x.shape[1]
    return call(NLL_BACKWARD, g, t, w, num_classes=c, **ctx.attrs), None, None


def _nllb_grad(ctx, gg):
    g, t, w = ctx.inputs
    a = _attrs(ctx)
    return call(NLL_LOSS, gg, t, w, ignore_index=a["ignore_index"], reduction=a["reduction"]), None, None


_LOSS_DTYPES = {"grad_output": FLOAT, "input": FLOAT, "target": TARGETS, "weight": FLOAT}
CE = defop(
    "cross_entropy",
    ["input", "target", "weight?"],
    _CE_ATTRS,
    meta=_ce_meta,
    grad=_ce_grad,
    dtypes={k: _LOSS_DTYPES[k] for k in ("input", "target", "weight")},
    save="inputs",
)
CE_BACKWARD = defop(
    "cross_entropy_backward",
    ["grad_output", "input", "target", "weight?"],
    _CE_ATTRS,
    meta=_bw_meta("cross_entropy_backward", _ce_meta),
    grad=_ceb_grad,
    dtypes=_LOSS_DTYPES,
    save="inputs",
)
NLL_LOSS = defop(
    "nll_loss",
    ["input", "target", "weight?"],
    _NLL_ATTRS,
    meta=_nll_meta,
    grad=_nll_grad,
    dtypes={k: _LOSS_DTYPES[k] for k in ("input", "target", "weight")},
    save="inputs",
)
NLL_BACKWARD = defop(
    "nll_loss_backward",
    ["grad_output", "target", "weight?"],
    [Attr("num_classes", int)] + _NLL_ATTRS,
    meta=_nllb_meta,
    grad=_nllb_grad,
    dtypes={k: _LOSS_DTYPES[k] for k in ("grad_output", "target", "weight")},
    save="inputs",
)


def _check_common(op, input, target, reduction):
    from flow._tensor import Tensor

    for name, v in (("input", input), ("target", target)):
        if not isinstance(v, Tensor):
            raise OpTypeError(op, f"'{name}' must be a Tensor, got {type(v).__name__}")
    if reduction not in REDUCTIONS:
        raise OpError(op, f"'reduction' must be one of {REDUCTIONS}, got {reduction!r}")


def cross_entropy_indices(
    input, target, weight=None, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0
):
    """Cross entropy with class-index targets (fused log_softmax + nll)."""
    _check_common("cross_entropy", input, target, reduction)
    return call(
        CE,
        input,
        target,
        weight,
        ignore_index=int(ignore_index),
        reduction=reduction,
        label_smoothing=float(label_smoothing),
    )


# -- opcheck samples -------------------------------------------------------------------------------------
from flow import _dtype as D  # noqa: E402
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _target_errors(lead, at):
    """Error inputs shared by the class-index losses (``lead``: tensors before 'input')."""
    x, t, w = S.uniform((4, 5), seed=1), S.ints((4,), 0, 5, seed=2), S.uniform((5,), 0.5, 2, 4)
    yield ErrorInput((*lead, x, t[:3], w), at, OpError, "'target' must have shape (4,)")
    yield ErrorInput((*lead, x, t, w[:4]), at, OpError, "'weight' must have shape (5,)")
    yield ErrorInput((*lead, x, t, w.float()), at, OpTypeError, "'weight' must have the input's dtype")
    yield ErrorInput((*lead, x, t + 5, w), at, OpIndexError, "out of range [0, 5)", values=True)
    yield ErrorInput((*lead, x, t - 6, w), at, OpIndexError, "out of range [0, 5)", values=True)


def _cls_cases():
    yield S.uniform((4, 5), seed=1), S.ints((4,), 0, 5, seed=2), None, {}
    yield S.uniform((4, 5), seed=3), S.t(np.array([1, -100, 4, 0])), S.uniform((5,), 0.5, 2, 4), {}
    yield S.uniform((2, 3, 2, 2), seed=5), S.ints((2, 2, 2), 0, 3, seed=6), None, {"ignore_index": 1}
    yield S.uniform((5,), seed=7), S.t(np.array(3)), None, {}


def _ce_samples():
    for k, (x, t, w, kw) in enumerate(_cls_cases()):
        for red in REDUCTIONS:
            ls = 0.2 if (k + len(red)) % 2 else 0.0
            yield SampleInput((x, t, w), dict(kw, reduction=red, label_smoothing=ls), grad=w is None)
    at = {"reduction": "mean", "label_smoothing": 0.0}
    yield SampleInput((S.uniform((4, 5), seed=1), S.ints((4,), 0, 5, seed=2, dtype=D.uint8), None), at)
    yield from _target_errors((), at)
    yield ErrorInput((S.uniform(()), S.ints((), 0, 1), None), at, OpError, "at least 1 dim")
    yield ErrorInput(
        (S.uniform((4, 5)), S.ints((4,), 0, 5), None),
        {**at, "label_smoothing": 1.5},
        OpError,
        "'label_smoothing' must be in [0, 1]",
    )


def _ceb_samples():
    for s in _ce_samples():
        if not isinstance(s, SampleInput):
            continue
        x, t, w = s.args
        out = call(CE, x, t, w, **s.kwargs)
        yield SampleInput((S.uniform(tuple(out.shape), seed=11), x, t, w), s.kwargs, grad=s.grad)
    at = {"reduction": "mean", "label_smoothing": 0.0}
    yield from _target_errors((S.uniform((), seed=11),), at)
    yield ErrorInput(
        (S.uniform((4,)), S.uniform((4, 5)), S.ints((4,), 0, 5), None),
        at,
        OpError,
        "'grad_output' must be () flow.float64",
    )


def _nll_samples():
    for x, t, w, kw in _cls_cases():
        for red in REDUCTIONS:
            yield SampleInput((x, t, w), dict(kw, reduction=red), grad=w is None)
    yield from _target_errors((), {"reduction": "sum"})


def _nllb_samples():
    for s in _nll_samples():
        if not isinstance(s, SampleInput):
            continue
        x, t, w = s.args
        out = call(NLL_LOSS, x, t, w, **s.kwargs)
        c = x.shape[0] if x.ndim == 1 else x.shape[1]
        yield SampleInput((S.uniform(tuple(out.shape), seed=12), t, w), dict(s.kwargs, num_classes=c), grad=s.grad)
    g, t = S.uniform((), seed=12), S.ints((4,), 0, 5, seed=2)
    at = {"reduction": "mean", "num_classes": 5}
    yield ErrorInput((g, t, None), {**at, "num_classes": -1}, OpError, "'num_classes' must be non-negative")
    yield ErrorInput((S.uniform((4,)), t, None), at, OpError, "'grad_output' must be ()")
    yield ErrorInput((g, t, S.uniform((4,))), at, OpError, "'weight' must have shape (5,)")
    yield ErrorInput((g, t + 5, None), at, OpIndexError, "out of range [0, 5)", values=True)


set_samples(CE, _ce_samples)
set_samples(CE_BACKWARD, _ceb_samples)
set_samples(NLL_LOSS, _nll_samples)
set_samples(NLL_BACKWARD, _nllb_samples)

__all__: list[str] = []
