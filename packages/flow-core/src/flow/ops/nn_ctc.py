"""Connectionist temporal classification loss: the ``ctc_loss`` op and its backward op.

The forward (alpha) and backward (beta) recursions run in log space over the
extended label sequence ``blank, l1, blank, l2, ..., blank``, vectorised over
the batch and the sequence (a Python loop over time only). ``ctc_loss`` returns
the per-sample negative log-likelihood; the reductions are done by
:func:`flow.nn.functional.ctc_loss`.

The gradient is the true derivative with respect to ``log_probs``:
``-exp(log(alpha * beta) - log_probs + nll)`` summed per class. (PyTorch's
kernel adds ``exp(log_probs)``, which assumes ``log_probs`` is a log_softmax
output; after a log_softmax both give the same gradient.)
"""

from __future__ import annotations

import numpy as np

from flow._dispatch import call
from flow.errors import FlowError, OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import FLOAT, INDEX, Attr

_ATTRS = [Attr("blank", int, 0), Attr("zero_infinity", bool, False)]


def _ctc_meta(lp, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    op = "ctc_loss"
    if len(lp.shape) != 3:
        raise OpError(op, f"'log_probs' must be 3-d (T, N, C), got shape {tuple(lp.shape)}")
    t, n, c = lp.shape
    for name, x, nd in (
        ("targets", targets, 2),
        ("input_lengths", input_lengths, 1),
        ("target_lengths", target_lengths, 1),
    ):
        if len(x.shape) != nd or x.shape[0] != n:
            raise OpError(op, f"'{name}' must be {nd}-d with {n} (batch) rows, got shape {tuple(x.shape)}")
    if not 0 <= blank < c:
        raise OpIndexError(op, f"'blank' must be in [0, {c}), got {blank}")
    return M.TensorMeta((n,), lp.dtype, M.check_same_device(op, lp, targets))


def _ctcb_meta(g, lp, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    m = _ctc_meta(lp, targets, input_lengths, target_lengths, blank, zero_infinity)
    if tuple(g.shape) != tuple(m.shape):
        raise OpError("ctc_loss_backward", f"'grad_output' must have shape {tuple(m.shape)}, got {tuple(g.shape)}")
    return M.TensorMeta(tuple(lp.shape), lp.dtype, m.device)


def _lse(*xs):
    m = xs[0]
    for x in xs[1:]:
        m = np.maximum(m, x)
    safe = np.where(np.isfinite(m), m, 0.0)
    s = sum(np.exp(x - safe) for x in xs)
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(m), np.log(s) + safe, m)


def _prepare(lp, targets, il, tl, blank):
    """float64 log-probs, extended labels (N, L'), the 'may skip' mask, lengths, and per-step emissions."""
    T, N, C = lp.shape
    il = np.asarray(il, np.int64)
    tl = np.asarray(tl, np.int64)
    tg = np.asarray(targets, np.int64)
    if (il < 0).any() or (il > T).any():
        raise OpError("ctc_loss", f"'input_lengths' must be in [0, {T}], got {il.tolist()}")
    if (tl < 0).any() or (tl > tg.shape[1]).any():
        raise OpError("ctc_loss", f"'target_lengths' must be in [0, {tg.shape[1]}], got {tl.tolist()}")
    s = tg.shape[1]
    used = np.arange(s)[None, :] < tl[:, None]
    bad = used & ((tg < 0) | (tg >= C) | (tg == blank))
    if bad.any():
        raise OpIndexError(
            "ctc_loss", f"target labels must be in [0, {C}) and differ from blank={blank}, got {int(tg[bad][0])}"
        )
    L = 2 * s + 1
    ext = np.full((N, L), blank, np.int64)
    ext[:, 1::2] = np.where(used, tg, blank)
    skip = np.zeros((N, L), bool)
    skip[:, 3::2] = (ext[:, 3::2] != ext[:, 1:-2:2]) & used[:, 1:]
    lp64 = np.asarray(lp, np.float64)
    emit = np.take_along_axis(lp64, np.broadcast_to(ext[None], (T, N, L)), 2)  # (T, N, L')
    return lp64, ext, skip, il, tl, emit


def _alpha(emit, skip, il, tl):
    T, N, L = emit.shape
    ninf = -np.inf
    a = np.full((T, N, L), ninf)
    if T == 0:
        return a
    a[0, :, 0] = emit[0, :, 0]
    a[0, :, 1] = np.where(tl > 0, emit[0, :, 1], ninf) if L > 1 else ninf
    for t in range(1, T):
        prev = a[t - 1]
        s1 = np.concatenate([np.full((N, 1), ninf), prev[:, :-1]], 1)
        s2 = np.concatenate([np.full((N, 2), ninf), prev[:, :-2]], 1)[:, :L]
        a[t] = _lse(prev, s1, np.where(skip, s2, ninf)) + emit[t]
    return a


def _beta(emit, skip, il, tl):
    T, N, L = emit.shape
    ninf = -np.inf
    b = np.full((T, N, L), ninf)
    last = 2 * tl  # index of the final blank in each extended sequence
    rows = np.arange(N)
    skip_next = np.concatenate([skip[:, 2:], np.zeros((N, 2), bool)], 1)  # may s jump to s + 2
    for t in range(T - 1, -1, -1):
        init = np.full((N, L), ninf)
        init[rows, last] = emit[t, rows, last]
        lab = np.maximum(last - 1, 0)
        init[rows, lab] = np.where(tl > 0, emit[t, rows, lab], init[rows, lab])
        if t == T - 1:
            new = init
        else:
            nxt = b[t + 1]
            s1 = np.concatenate([nxt[:, 1:], np.full((N, 1), ninf)], 1)
            s2 = np.concatenate([nxt[:, 2:], np.full((N, 2), ninf)], 1)
            new = _lse(nxt, s1, np.where(skip_next, s2, ninf)) + emit[t]
        b[t] = np.where((t == il - 1)[:, None], init, np.where((t < il - 1)[:, None], new, ninf))
    return b


def _nll(a, il, tl):
    N = a.shape[1]
    rows = np.arange(N)
    tt = np.maximum(il - 1, 0)
    last = 2 * tl
    end = a[tt, rows, last]
    end2 = np.where(tl > 0, a[tt, rows, np.maximum(last - 1, 0)], -np.inf)
    ll = _lse(end, end2)
    ll = np.where(il > 0, ll, np.where(tl == 0, 0.0, -np.inf))
    return -ll


@kernel("ctc_loss")
def _ctc_kernel(xp):
    def run(lp, targets, il, tl, blank=0, zero_infinity=False):
        _, ext, skip, il, tl, emit = _prepare(lp, targets, il, tl, blank)
        nll = _nll(_alpha(emit, skip, il, tl), il, tl)
        if zero_infinity:
            nll = np.where(np.isinf(nll), 0.0, nll)
        return xp.asarray(nll.astype(lp.dtype))

    return run


@kernel("ctc_loss_backward")
def _ctcb_kernel(xp):
    def run(g, lp, targets, il, tl, blank=0, zero_infinity=False):
        lp64, ext, skip, il, tl, emit = _prepare(lp, targets, il, tl, blank)
        T, N, C = lp.shape
        a = _alpha(emit, skip, il, tl)
        nll = _nll(a, il, tl)
        b = _beta(emit, skip, il, tl)
        with np.errstate(invalid="ignore", over="ignore"):
            occ = np.exp(a + b - emit + nll[None, :, None])  # posterior of each (t, n, s)
        occ = np.where(np.isfinite(a + b)[...], occ, 0.0)
        flat = (np.arange(T)[:, None, None] * N + np.arange(N)[None, :, None]) * C + ext[None]
        post = np.bincount(flat.reshape(-1), weights=occ.reshape(-1), minlength=T * N * C).reshape(T, N, C)
        grad = -post * np.asarray(g, np.float64)[None, :, None]
        inf = np.isinf(nll)
        if inf.any():
            grad[:, inf, :] = 0.0 if zero_infinity else np.nan
        return xp.asarray(grad.astype(lp.dtype))

    return run


def _ctc_grad(ctx, g):
    lp, targets, il, tl = ctx.inputs
    return call(CTC_BACKWARD, g, lp, targets, il, tl, **ctx.attrs), None, None, None


def _ctcb_grad(ctx, gg):
    g, lp, targets, il, tl = ctx.inputs
    if ctx.next[1][0] is not None:
        raise FlowError("ctc_loss: the second derivative with respect to log_probs is not implemented")
    ones = g * 0.0 + 1.0
    base = call(CTC_BACKWARD, ones, lp, targets, il, tl, **ctx.attrs)
    return (gg * base).sum((0, 2)), None, None, None, None


_CTC_DTYPES = {
    "grad_output": FLOAT,
    "log_probs": FLOAT,
    "targets": INDEX,
    "input_lengths": INDEX,
    "target_lengths": INDEX,
}
CTC = defop(
    "ctc_loss",
    ["log_probs", "targets", "input_lengths", "target_lengths"],
    _ATTRS,
    meta=_ctc_meta,
    dtypes={k: v for k, v in _CTC_DTYPES.items() if k != "grad_output"},
    grad=_ctc_grad,
    save="inputs",
)
CTC_BACKWARD = defop(
    "ctc_loss_backward",
    ["grad_output", "log_probs", "targets", "input_lengths", "target_lengths"],
    _ATTRS,
    meta=_ctcb_meta,
    dtypes=_CTC_DTYPES,
    grad=_ctcb_grad,
    save="inputs",
)


def _as_long(x, device, name):
    import flow
    from flow._tensor import Tensor

    if isinstance(x, Tensor):
        if x.dtype.category != 1:
            raise OpTypeError("ctc_loss", f"'{name}' must have an integer dtype, got {x.dtype}")
        return x
    return flow.tensor(np.asarray(x, np.int64).reshape(-1), device=device)


def ctc_loss(
    log_probs,
    targets,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
):
    """CTC loss of (T, N, C) (or unbatched (T, C)) log-probabilities against padded (N, S) or concatenated
    targets; ``reduction='mean'`` divides each loss by its target length, then averages the batch."""
    import flow
    from flow._tensor import Tensor

    op = "ctc_loss"
    if not isinstance(log_probs, Tensor) or not isinstance(targets, Tensor):
        raise OpTypeError(op, "'log_probs' and 'targets' must be Tensors")
    if reduction not in ("none", "mean", "sum"):
        raise OpError(op, f"'reduction' must be one of ('none', 'mean', 'sum'), got {reduction!r}")
    unbatched = log_probs.ndim == 2
    dev = log_probs.device
    il = _as_long(input_lengths, dev, "input_lengths")
    tl = _as_long(target_lengths, dev, "target_lengths")
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
        targets = targets.reshape(1, -1) if targets.ndim <= 1 else targets
        il, tl = il.reshape(1), tl.reshape(1)
    n = log_probs.shape[1] if log_probs.ndim == 3 else 0
    if targets.ndim == 1:  # concatenated targets: pad into (N, max length)
        lens = np.asarray(tl.numpy_host(), np.int64).reshape(-1)
        flat = np.asarray(targets.numpy_host(), np.int64)
        if lens.sum() > flat.size:
            raise OpError(op, f"'target_lengths' sum to {int(lens.sum())} but 'targets' has {flat.size} labels")
        pad = np.full((n, max(int(lens.max()) if lens.size else 0, 1)), blank, np.int64)
        pos = 0
        for i, k in enumerate(lens):
            pad[i, :k] = flat[pos : pos + k]
            pos += k
        targets = flow.tensor(pad, device=dev)
    nll = call(CTC, log_probs, targets, il, tl, blank=int(blank), zero_infinity=bool(zero_infinity))
    if reduction == "mean":
        from flow.ops.clamp_where import clamp

        return (nll / clamp(tl, min=1).to(nll.dtype)).mean()
    if reduction == "sum":
        return nll.sum()
    return nll.reshape(()) if unbatched else nll


# -- opcheck samples -------------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _ctc_errors(lead):
    """Error inputs of ctc_loss (``lead``: tensors before 'log_probs')."""
    lp, t, il, tl, _ = next(_ctc_cases())
    yield ErrorInput((*lead, lp[0], t, il, tl), {}, OpError, "'log_probs' must be 3-d")
    yield ErrorInput((*lead, lp, t[:2], il, tl), {}, OpError, "'targets' must be 2-d with 3 (batch) rows")
    yield ErrorInput((*lead, lp, t, il[:2], tl), {}, OpError, "'input_lengths' must be 1-d with 3")
    yield ErrorInput((*lead, lp, t, il, tl[None]), {}, OpError, "'target_lengths' must be 1-d")
    yield ErrorInput((*lead, lp, t, il, tl), {"blank": 4}, OpIndexError, "'blank' must be in [0, 4)")
    yield ErrorInput((*lead, lp, t, il + 1, tl), {}, OpError, "'input_lengths' must be in [0, 6]", values=True)
    yield ErrorInput((*lead, lp, t, il, tl + 1), {}, OpError, "'target_lengths' must be in [0, 3]", values=True)
    yield ErrorInput((*lead, lp, t + 4, il, tl), {}, OpIndexError, "target labels must be in [0, 4)", values=True)


def _ctc_cases():
    from flow.ops.nn_act import log_softmax

    lp = log_softmax(S.uniform((6, 3, 4), seed=1), 2)
    targets = S.t(np.array([[1, 2, 2], [3, 1, 0], [2, 0, 0]]))
    yield lp.detach(), targets, S.t(np.array([6, 5, 4])), S.t(np.array([3, 2, 0])), {}
    yield lp.detach(), targets, S.t(np.array([6, 6, 3])), S.t(np.array([2, 1, 1])), {"blank": 0}
    lp2 = log_softmax(S.uniform((5, 2, 3), seed=2), 2)
    yield (
        lp2.detach(),
        S.t(np.array([[0, 1], [1, 1]])),
        S.t(np.array([5, 2])),
        S.t(np.array([2, 2])),
        {"blank": 2, "zero_infinity": True},
    )


def _ctc_samples():
    for lp, t, il, tl, kw in _ctc_cases():
        yield SampleInput((lp, t, il, tl), kw)
    yield from _ctc_errors(())


def _ctcb_samples():
    for k, (lp, t, il, tl, kw) in enumerate(_ctc_cases()):
        g = S.uniform((lp.shape[1],), seed=10 + k)
        # the second derivative w.r.t. log_probs is not implemented: no gradient check
        yield SampleInput((g, lp, t, il, tl), kw, grad=False)
    yield from _ctc_errors((S.uniform((3,), seed=10),))
    lp, t, il, tl, _ = next(_ctc_cases())
    yield ErrorInput((S.uniform((2,)), lp, t, il, tl), {}, OpError, "'grad_output' must have shape (3,)")


set_samples(CTC, _ctc_samples)
set_samples(CTC_BACKWARD, _ctcb_samples)

__all__ = ["ctc_loss"]
