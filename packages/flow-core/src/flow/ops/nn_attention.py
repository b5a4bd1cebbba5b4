"""Fused attention ops: ``flash_attention`` and its backward op ``flash_attention_backward``.

``flash_attention(query, key, value, is_causal, scale)`` on (..., L, E) query, (..., S, E) key and
(..., S, Ev) value (equal leading dims, no broadcasting) returns ``(out, lse)``: the attention output
``softmax(q @ k^T * scale) @ v`` (..., L, Ev) and the per-row log-sum-exp of the scaled scores (..., L).
``is_causal`` is PyTorch's top-left aligned mask (query ``i`` sees keys ``0..i``).

On the CPU, for float32 / float64, the kernel is native (``csrc/attention.cpp``): blocked over queries
and keys with an online softmax, so the (L, S) score matrix never exists; the backward recomputes the
probabilities tile by tile from ``lse``. Other devices and dtypes run the generic reference kernel
(plain array code, the whole score matrix at once).

Gradients: ``flash_attention``'s is ``flash_attention_backward``; that op's own gradient is autograd
through its flow-op composite, so gradients of any order work (as ``batch_norm_backward``).
:func:`flow.nn.functional.scaled_dot_product_attention` calls these ops where they apply.
"""

from __future__ import annotations

import math

from flow._dispatch import call
from flow.autograd.grad_mode import STATE
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import FLOAT, Attr

__all__ = ["flash_attention"]

_ATTRS = [Attr("is_causal", bool, False), Attr("scale", float, 1.0)]


def _check_qkv(op, q, k, v, scale):
    for name, t in (("query", q), ("key", k), ("value", v)):
        if len(t.shape) < 2:
            raise OpError(op, f"'{name}' must have at least 2 dims (..., L, E), got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise OpTypeError(op, f"query, key and value must have the same dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)
    if not (qs[:-2] == ks[:-2] == vs[:-2]):
        raise OpError(op, f"query, key and value must have the same leading dims, got {qs}, {ks} and {vs}")
    if qs[-1] != ks[-1]:
        raise OpError(op, f"query and key must have the same embedding size, got {qs} and {ks}")
    if ks[-2] != vs[-2]:
        raise OpError(op, f"key and value must have the same sequence length, got {ks} and {vs}")
    if ks[-2] == 0:
        raise OpError(op, f"'key' must have at least one position, got shape {ks}")
    if not math.isfinite(scale):
        raise OpError(op, f"'scale' must be finite, got {scale}")
    return M.check_same_device(op, q, k, v)


def _fa_meta(q, k, v, is_causal=False, scale=1.0):
    dev = _check_qkv("flash_attention", q, k, v, scale)
    lead_l = tuple(q.shape[:-1])
    return M.TensorMeta(lead_l + (v.shape[-1],), q.dtype, dev), M.TensorMeta(lead_l, q.dtype, dev)


def _fab_meta(g, q, k, v, out, lse, glse=None, is_causal=False, scale=1.0):
    op = "flash_attention_backward"
    dev = _check_qkv(op, q, k, v, scale)
    lead_l = tuple(q.shape[:-1])
    want = {"grad_out": lead_l + (v.shape[-1],), "out": lead_l + (v.shape[-1],), "lse": lead_l, "grad_lse": lead_l}
    for name, t in (("grad_out", g), ("out", out), ("lse", lse), ("grad_lse", glse)):
        if t is None:
            continue
        if tuple(t.shape) != want[name] or t.dtype != q.dtype:
            raise OpError(op, f"'{name}' must be {want[name]} {q.dtype} (as the query), got {tuple(t.shape)} {t.dtype}")
        M.check_same_device(op, q, t)
    return (
        M.TensorMeta(tuple(q.shape), q.dtype, dev),
        M.TensorMeta(tuple(k.shape), k.dtype, dev),
        M.TensorMeta(tuple(v.shape), v.dtype, dev),
    )


# -- gradients --------------------------------------------------------------------------------------------
def _fa_grad(ctx, g, glse):
    q, k, v = ctx.inputs
    out, lse = ctx.outputs
    if g is None:
        from flow._creation import zeros_like

        g = zeros_like(out)
    dq, dk, dv = call(FLASH_ATTENTION_BACKWARD, g, q, k, v, out, lse, glse, **ctx.attrs)
    return tuple(r if ctx.next[i][0] is not None else None for i, r in enumerate((dq, dk, dv)))


def _fab_composite(g, q, k, v, out, lse, glse, is_causal, scale):
    """``flash_attention_backward`` written with flow ops (the probabilities from the given ``lse``)."""
    import numpy as np

    from flow._creation import constant_for
    from flow.ops.clamp_where import where
    from flow.ops.linalg import matmul
    from flow.ops.unary import exp

    s = matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        L, S = s.shape[-2], s.shape[-1]
        s = where(constant_for(s, np.tril(np.ones((L, S), bool))), s, -math.inf)
    p = exp(s - lse.unsqueeze(-1))
    delta = (g * out).sum(-1, keepdim=True)
    if glse is not None:
        delta = delta - glse.unsqueeze(-1)
    ds = p * (matmul(g, v.transpose(-2, -1)) - delta)
    return matmul(ds, k) * scale, matmul(ds.transpose(-2, -1), q) * scale, matmul(p.transpose(-2, -1), g)


def _fab_grad(ctx, a, b, c):
    """Gradient of flash_attention_backward: autograd through its flow-op composite."""
    import flow

    ins = ctx.inputs
    build = STATE.grad_enabled
    leaves = [None if t is None else (t if build else t.detach().requires_grad_(True)) for t in ins]
    with flow.enable_grad():
        outs = _fab_composite(*leaves, ctx.attrs["is_causal"], ctx.attrs["scale"])
        cots = [(o, t) for o, t in zip(outs, (a, b, c)) if t is not None]
        want = [t for t in leaves if t is not None]
        grads = flow.autograd.grad(
            [o for o, _ in cots], want, grad_outputs=[t for _, t in cots], allow_unused=True, create_graph=build
        )
    it = iter(grads)
    res = [None if t is None else next(it) for t in leaves]
    return tuple(r if ctx.next[i][0] is not None else None for i, r in enumerate(res))


FLASH_ATTENTION = defop(
    "flash_attention",
    ["query", "key", "value"],
    _ATTRS,
    outputs=("out", "lse"),
    meta=_fa_meta,
    dtypes=FLOAT,
    grad=_fa_grad,
    save="both",
)
FLASH_ATTENTION_BACKWARD = defop(
    "flash_attention_backward",
    ["grad_out", "query", "key", "value", "out", "lse", "grad_lse?"],
    _ATTRS,
    outputs=("grad_query", "grad_key", "grad_value"),
    meta=_fab_meta,
    dtypes=FLOAT,
    grad=_fab_grad,
    save="inputs",
)


# -- kernels ----------------------------------------------------------------------------------------------
def _probs(xp, q, k, lse, is_causal, scale):
    """(p, scores): softmax probabilities of the scaled (masked) scores; ``lse`` given: exp(s - lse)."""
    s = xp.matmul(q, xp.swapaxes(k, -1, -2)) * scale
    if is_causal:
        L, S = s.shape[-2:]
        s = xp.where(xp.tril(xp.ones((L, S), dtype=bool)), s, -xp.inf)
    if lse is None:
        m = s.max(axis=-1, keepdims=True)
        lse = m[..., 0] + xp.log(xp.exp(s - m).sum(axis=-1))
    return xp.exp(s - lse[..., None]), lse


def _compute_dtype(xp, dt):
    return xp.float32 if dt.itemsize < 4 else dt  # float16 / bfloat16 compute in float32


@kernel(FLASH_ATTENTION)
def _fa_kernel(xp):
    def run(q, k, v, is_causal=False, scale=1.0):
        dt = q.dtype
        cd = _compute_dtype(xp, dt)
        q, k, v = (a.astype(cd, copy=False) for a in (q, k, v))
        p, lse = _probs(xp, q, k, None, is_causal, scale)
        return xp.matmul(p, v).astype(dt, copy=False), lse.astype(dt, copy=False)

    return run


@kernel(FLASH_ATTENTION_BACKWARD)
def _fab_kernel(xp):
    def run(g, q, k, v, out, lse, glse, is_causal=False, scale=1.0):
        dt = q.dtype
        cd = _compute_dtype(xp, dt)
        g, q, k, v, out, lse = (a.astype(cd, copy=False) for a in (g, q, k, v, out, lse))
        p, _ = _probs(xp, q, k, lse, is_causal, scale)
        delta = (g * out).sum(axis=-1, keepdims=True)
        if glse is not None:
            delta = delta - glse.astype(cd, copy=False)[..., None]
        ds = p * (xp.matmul(g, xp.swapaxes(v, -1, -2)) - delta)
        dq = xp.matmul(ds, k) * scale
        dk = xp.matmul(xp.swapaxes(ds, -1, -2), q) * scale
        dv = xp.matmul(xp.swapaxes(p, -1, -2), g)
        return tuple(a.astype(dt, copy=False) for a in (dq, dk, dv))

    return run


def _native():
    """``flow._C`` when it is built and a BLAS is bound (the tiles' GEMMs), else None."""
    from flow.backends.cpu import native

    if not native.HAVE_NATIVE or not hasattr(native._C, "flash_attention_forward"):
        return None
    return native._C


_NATIVE_DTYPES = ("float32", "float64")


def _as3(a, n):
    import numpy as np

    return np.ascontiguousarray(a.reshape((n,) + a.shape[-2:]) if a.ndim != 3 else a)


def _lead(a) -> int:
    n = 1
    for s in a.shape[:-2]:
        n *= int(s)
    return n


@kernel(FLASH_ATTENTION, "cpu", name="default")
def _fa_cpu(q, k, v, is_causal=False, scale=1.0):
    """The ``flow._C`` kernel for float32 / float64 (any layout: made (N, L, E) contiguous here)."""
    import numpy as np

    nat = _native()
    if nat is None or q.dtype.name not in _NATIVE_DTYPES:
        return _fa_kernel(np)(q, k, v, is_causal, scale)
    n = _lead(q)
    out, lse = nat.flash_attention_forward(_as3(q, n), _as3(k, n), _as3(v, n), bool(is_causal), float(scale))
    return out.reshape(q.shape[:-1] + (v.shape[-1],)), lse.reshape(q.shape[:-1])


@kernel(FLASH_ATTENTION_BACKWARD, "cpu", name="default")
def _fab_cpu(g, q, k, v, out, lse, glse, is_causal=False, scale=1.0):
    import numpy as np

    nat = _native()
    if nat is None or q.dtype.name not in _NATIVE_DTYPES:
        return _fab_kernel(np)(g, q, k, v, out, lse, glse, is_causal, scale)
    n = _lead(q)
    lse2 = np.ascontiguousarray(lse.reshape(n, q.shape[-2]))
    glse2 = None if glse is None else np.ascontiguousarray(glse.reshape(n, q.shape[-2]))
    dq, dk, dv = nat.flash_attention_backward(
        _as3(g, n), _as3(q, n), _as3(k, n), _as3(v, n), _as3(out, n), lse2, glse2, bool(is_causal), float(scale)
    )
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


def flash_attention(query, key, value, is_causal: bool = False, scale: float | None = None) -> tuple:
    """``(out, lse)`` of the fused attention op; ``scale`` defaults to ``1 / sqrt(E)``."""
    from flow._tensor import Tensor

    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise OpTypeError("flash_attention", f"'{name}' must be a Tensor, got {type(t).__name__}")
    sc = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    return call(FLASH_ATTENTION, query, key, value, is_causal=bool(is_causal), scale=sc)


# -- opcheck samples -------------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402

# (lead, L, S, E, Ev, is_causal): odd sizes, L != S both ways, one query, a causal L > S
_CASES = (
    ((2,), 3, 3, 4, 4, False),
    ((2,), 3, 3, 4, 4, True),
    ((1, 2), 2, 5, 3, 2, True),
    ((3,), 4, 2, 2, 3, True),
    ((), 1, 4, 3, 3, False),
)


def _qkv(lead, L, Sk, E, Ev, seed):
    return (
        S.uniform(lead + (L, E), seed=seed),
        S.uniform(lead + (Sk, E), seed=seed + 1),
        S.uniform(lead + (Sk, Ev), seed=seed + 2),
    )


def _errors(pre=(), post=()):
    q, k, v = _qkv((2,), 3, 4, 4, 4, 1)
    at = {"is_causal": False, "scale": 0.5}
    yield ErrorInput((*pre, q, k[:1], v, *post), at, OpError, "the same leading dims")
    yield ErrorInput((*pre, q, k[..., :3], v, *post), at, OpError, "the same embedding size")
    yield ErrorInput((*pre, q, k, v[:, :3], *post), at, OpError, "the same sequence length")
    yield ErrorInput((*pre, q, k[:, :0], v[:, :0], *post), at, OpError, "at least one position")
    yield ErrorInput((*pre, q[0, 0], k, v, *post), at, OpError, "at least 2 dims")
    yield ErrorInput((*pre, q, k.float(), v, *post), at, OpTypeError, "the same dtype")
    yield ErrorInput((*pre, q, k, v, *post), {**at, "scale": math.inf}, OpError, "'scale' must be finite")


def _fa_samples():
    for i, (lead, L, Sk, E, Ev, causal) in enumerate(_CASES):
        yield SampleInput(_qkv(lead, L, Sk, E, Ev, 10 * i), {"is_causal": causal, "scale": 0.7})
    yield from _errors()


def _fab_samples():
    import flow

    for i, (lead, L, Sk, E, Ev, causal) in enumerate(_CASES):
        q, k, v = _qkv(lead, L, Sk, E, Ev, 10 * i)
        with flow.no_grad():
            out, lse = flash_attention(q, k, v, is_causal=causal, scale=0.7)
        g = S.uniform(tuple(out.shape), seed=10 * i + 5)
        glse = S.uniform(tuple(lse.shape), seed=10 * i + 6) if i % 2 else None
        yield SampleInput((g, q, k, v, out, lse, glse), {"is_causal": causal, "scale": 0.7})
    q, k, v = _qkv((2,), 3, 4, 4, 4, 1)
    g, lse = S.uniform((2, 3, 4)), S.uniform((2, 3))
    yield from _errors((g,), (g, lse, None))
    at = {"is_causal": False, "scale": 0.5}
    yield ErrorInput((g[:, :2], q, k, v, g, lse, None), at, OpError, "'grad_out' must be (2, 3, 4)")
    yield ErrorInput((g, q, k, v, g, lse[:, :2], None), at, OpError, "'lse' must be (2, 3)")
    yield ErrorInput((g, q, k, v, g, lse, lse.float()), at, OpError, "'grad_lse' must be (2, 3)")


set_samples(FLASH_ATTENTION, _fa_samples)
set_samples(FLASH_ATTENTION_BACKWARD, _fab_samples)
