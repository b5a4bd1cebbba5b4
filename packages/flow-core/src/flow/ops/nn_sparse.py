"""Embedding lookups: ``embedding`` and ``embedding_bag`` with their backward ops.

The weight gradient is a scatter-add of rows over indices, and a bag sum is a
gather-add: with NumPy both are one sparse-matrix product (scipy's CSR/CSC
kernels: a (num_weights, n) selection matrix, or a (bags, num_weights) bag
matrix holding per-sample weights / 1 / bag size), several times faster than
``add.at`` or sort + ``add.reduceat``. Without scipy (or for other array
modules / half precision) they fall back to ``add.at``. ``max`` bags use
``maximum.reduceat`` over the gathered rows.
"""

from __future__ import annotations

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpIndexError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import ANY, FLOAT, INDEX, INDEX64, Attr

MODES = ("sum", "mean", "max")
_PAD = Attr("padding_idx", (int, type(None)), None)
_BAG_ATTRS = [Attr("mode", str, "mean", MODES), _PAD, Attr("include_last_offset", bool, False)]


# -- meta rules ------------------------------------------------------------------------------------------
def _check_weight(op, w):
    if len(w.shape) != 2:
        raise OpError(op, f"'weight' must be 2-d (num_embeddings, embedding_dim), got shape {tuple(w.shape)}")


def _check_padding(op, padding_idx, v):
    # the Python functions turn a negative padding_idx into a row number
    if padding_idx is not None and not 0 <= padding_idx < v:
        raise OpIndexError(op, f"'padding_idx' must be a row of the weight, in [0, {v}), got {padding_idx}")


def _emb_meta(w, idx, padding_idx=None, scale_grad_by_freq=False, sparse=False):
    _check_weight("embedding", w)
    _check_padding("embedding", padding_idx, w.shape[0])
    dev = M.check_same_device("embedding", w, idx)
    return M.TensorMeta(tuple(idx.shape) + (w.shape[1],), w.dtype, dev)


def _embb_meta(g, idx, num_weights=0, padding_idx=None, scale_grad_by_freq=False):
    op = "embedding_backward"
    if num_weights < 0:
        raise OpError(op, f"'num_weights' must be non-negative, got {num_weights}")
    _check_padding(op, padding_idx, num_weights)
    if tuple(g.shape[:-1]) != tuple(idx.shape) or len(g.shape) != len(idx.shape) + 1:
        raise OpError(op, f"'grad_output' must have shape {tuple(idx.shape)} + (embedding_dim,), got {tuple(g.shape)}")
    return M.TensorMeta((num_weights, g.shape[-1]), g.dtype, M.check_same_device(op, g, idx))


def _bag_count(op, idx, offs, include_last_offset):
    if len(idx.shape) != 1 or len(offs.shape) != 1:
        raise OpError(op, f"'input' and 'offsets' must be 1-d, got shapes {tuple(idx.shape)} and {tuple(offs.shape)}")
    b = offs.shape[0] - (1 if include_last_offset else 0)
    if b < 0:
        raise OpError(op, "'offsets' must not be empty with include_last_offset=True")
    return b


def _bag_meta(w, idx, offs, psw=None, mode="mean", padding_idx=None, include_last_offset=False, sparse=False):
    op = "embedding_bag"
    _check_weight(op, w)
    _check_padding(op, padding_idx, w.shape[0])
    b = _bag_count(op, idx, offs, include_last_offset)
    if psw is not None:
        if mode != "sum":
            raise OpError(op, f"'per_sample_weights' is only supported for mode='sum', got mode={mode!r}")
        if tuple(psw.shape) != tuple(idx.shape) or psw.dtype != w.dtype:
            raise OpError(
                op,
                f"'per_sample_weights' must be {tuple(idx.shape)} {w.dtype} like 'input', got "
                f"{tuple(psw.shape)} {psw.dtype}",
            )
    if mode not in MODES:
        raise OpError(op, f"'mode' must be one of {MODES}, got {mode!r}")
    from flow import _dtype as D

    dev = M.check_same_device(op, w, idx, offs, psw)
    mshape = (b, w.shape[1]) if mode == "max" else (0,)
    return M.TensorMeta((b, w.shape[1]), w.dtype, dev), M.TensorMeta(mshape, D.int64, dev)


def _bagb_meta(g, idx, offs, psw, max_indices, num_weights=0, mode="mean", padding_idx=None, include_last_offset=False):
    op = "embedding_bag_backward"
    if num_weights < 0:
        raise OpError(op, f"'num_weights' must be non-negative, got {num_weights}")
    _check_padding(op, padding_idx, num_weights)
    b = _bag_count(op, idx, offs, include_last_offset)
    if len(g.shape) != 2 or g.shape[0] != b:
        raise OpError(op, f"'grad_output' must have shape ({b}, embedding_dim), got {tuple(g.shape)}")
    if psw is not None and (mode != "sum" or tuple(psw.shape) != tuple(idx.shape) or psw.dtype != g.dtype):
        raise OpError(
            op,
            f"'per_sample_weights' must be {tuple(idx.shape)} {g.dtype} like 'input' (mode 'sum' only), "
            f"got {tuple(psw.shape)} {psw.dtype} with mode={mode!r}",
        )
    if mode == "max" and tuple(max_indices.shape) != tuple(g.shape):
        raise OpError(
            op,
            f"'max_indices' must have the shape {tuple(g.shape)} of 'grad_output' in mode 'max', "
            f"got {tuple(max_indices.shape)}",
        )
    return M.TensorMeta((num_weights, g.shape[1]), g.dtype, M.check_same_device(op, g, idx, offs))


# -- kernel helpers (NumPy-like xp) ------------------------------------------------------------------------------
def _check_range(xp, op, idx1, v):
    if idx1.size and (bool((idx1 < 0).any()) or bool((idx1 >= v).any())):
        bad = int(idx1[(idx1 < 0) | (idx1 >= v)][0])
        raise OpIndexError(op, f"index {bad} is out of range for a weight with {v} rows (expected 0 <= index < {v})")


def _scipy_sparse(xp, dtype):
    """scipy.sparse for NumPy float32/float64 arrays (its CSR/CSC products are single C passes), else None."""
    if xp is not np or np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover - scipy is optional
        return None
    return sp


def index_add_rows(xp, idx1, rows, v):
    """``out[idx1[i]] += rows[i]`` into a (v, D) zero array.

    A (v, n) CSC selection matrix times ``rows`` when scipy is there (several times faster than
    ``add.at``, and than sort + ``add.reduceat``); ``add.at`` otherwise.
    """
    n = int(idx1.size)
    sp = _scipy_sparse(xp, rows.dtype)
    if sp is not None and n:
        sel = sp.csc_matrix((np.ones(n, rows.dtype), idx1, np.arange(n + 1)), shape=(v, n))
        return np.ascontiguousarray(sel @ rows, dtype=rows.dtype)
    out = xp.zeros((v, rows.shape[1]), rows.dtype)
    if n:
        xp.add.at(out, idx1, rows)
    return out


def bag_layout(xp, offs, n, include_last_offset, op="embedding_bag"):
    """(number of bags, start of every bag, bag of each index, number of indices used)."""
    offs = offs.astype(xp.int64, copy=False)
    if offs.size and int(offs[0]) != 0:
        raise OpError(op, f"offsets[0] has to be 0 (the first bag starts at position 0), got {int(offs[0])}")
    # include_last_offset: CSR offsets, the last one ends the last bag (PyTorch documents it equal to
    # len(input); its float32 kernel ends the bag there, its float64 kernel at len(input))
    starts = offs[:-1] if include_last_offset else offs
    nb = int(starts.size)
    m = (int(offs[-1]) if include_last_offset else n) if nb else 0
    ends = xp.concatenate([starts[1:], xp.asarray([m], xp.int64)])
    if nb and (bool((ends < starts).any()) or m > n):
        raise OpError(op, f"'offsets' must be non-decreasing and at most len(input)={n}")
    return nb, starts, xp.repeat(xp.arange(nb), ends - starts), m


def _bag_weights(xp, nb, bag_of, psw, keep, mode, m, dt):
    """The weight of each index in its bag's sum: per-sample weight, 1 / bag size (mean), 0 for padding."""
    vals = psw.reshape(-1)[:m].astype(dt, copy=True) if psw is not None else xp.ones(m, dt)
    if keep is not None:
        vals = xp.where(keep, vals, 0).astype(dt, copy=False)
    if mode == "mean":
        cnt = xp.bincount(bag_of if keep is None else bag_of[keep], minlength=nb)
        vals = vals / xp.maximum(cnt, 1)[bag_of].astype(dt)
    return vals


def _segment_max(xp, rows, starts, bag_of, nb, fill):
    out = xp.full((nb, rows.shape[1]), fill, rows.dtype)
    if rows.shape[0] == 0:
        return out
    if hasattr(xp.maximum, "reduceat"):
        ne = xp.zeros(nb, bool)
        ne[bag_of] = True
        out[ne] = xp.maximum.reduceat(rows, starts[ne], axis=0)
    else:
        xp.maximum.at(out, bag_of, rows)
    return out


def _bag_max(xp, w, used, starts, bag_of, keep, nb, m):
    rows = xp.take(w, used, axis=0)
    if keep is not None:
        rows = xp.where(keep[:, None], rows, -xp.inf)
    out = _segment_max(xp, rows, starts, bag_of, nb, -xp.inf)
    cnt = xp.bincount(bag_of if keep is None else bag_of[keep], minlength=nb)
    out = xp.where((cnt > 0)[:, None], out, 0).astype(w.dtype, copy=False)
    # index of the first maximum in each bag and column (the row of weight it came from)
    hit = rows == out[bag_of]
    if keep is not None:
        hit &= keep[:, None]
    pos = xp.where(hit, -xp.arange(m)[:, None], -m)  # max of -position = first position
    first = -_segment_max(xp, pos, starts, bag_of, nb, -m)
    maxi = xp.where(first < m, used[xp.minimum(first, m - 1)], -1) if m else xp.full(first.shape, -1)
    return out, maxi.astype(xp.int64, copy=False)


def _bag_kernel(xp):
    def run(w, idx, offs, psw, mode="mean", padding_idx=None, include_last_offset=False, sparse=False):
        v, d = w.shape
        idx1 = idx.reshape(-1).astype(xp.int64, copy=False)
        _check_range(xp, "embedding_bag", idx1, v)
        nb, starts, bag_of, m = bag_layout(xp, offs, idx1.size, include_last_offset)
        used = idx1[:m]
        keep = used != padding_idx if padding_idx is not None else None
        if mode == "max":
            return _bag_max(xp, w, used, starts, bag_of, keep, nb, m)
        vals = _bag_weights(xp, nb, bag_of, psw, keep, mode, m, w.dtype)
        sp = _scipy_sparse(xp, w.dtype)
        if sp is not None:
            bags = sp.csr_matrix((vals, used, np.append(starts, m)), shape=(nb, v))
            out = np.ascontiguousarray(bags @ w, dtype=w.dtype)
        else:
            out = xp.zeros((nb, d), w.dtype)
            if m:
                xp.add.at(out, bag_of, xp.take(w, used, axis=0) * vals[:, None])
        return out, xp.zeros((0,), xp.int64)

    return run


def _bagb_kernel(xp):
    def run(g, idx, offs, psw, maxi, num_weights=0, mode="mean", padding_idx=None, include_last_offset=False):
        d = g.shape[1]
        _check_range(xp, "embedding_bag_backward", idx.reshape(-1), num_weights)
        if mode == "max":
            _check_range(xp, "embedding_bag_backward", maxi[maxi >= 0], num_weights)
            ok = maxi >= 0
            flat = (maxi * d + xp.arange(d))[ok]
            dw = xp.bincount(flat, weights=g[ok], minlength=num_weights * d)
            return dw.reshape(num_weights, d).astype(g.dtype, copy=False)
        idx1 = idx.reshape(-1).astype(xp.int64, copy=False)
        nb, starts, bag_of, m = bag_layout(xp, offs, idx1.size, include_last_offset, "embedding_bag_backward")
        used = idx1[:m]
        keep = used != padding_idx if padding_idx is not None else None
        vals = _bag_weights(xp, nb, bag_of, psw, keep, mode, m, g.dtype)
        sp = _scipy_sparse(xp, g.dtype)
        if sp is not None and m:
            bags_t = sp.csc_matrix((vals, used, np.append(starts, m)), shape=(num_weights, nb))
            return np.ascontiguousarray(bags_t @ g, dtype=g.dtype)
        return index_add_rows(xp, used, g[bag_of] * vals[:, None], num_weights)

    return run


@kernel("embedding")
def _emb_kernel(xp):
    def run(w, idx, padding_idx=None, scale_grad_by_freq=False, sparse=False):
        _check_range(xp, "embedding", idx.reshape(-1), w.shape[0])
        return xp.take(w, idx, axis=0)

    return run


@kernel("embedding_backward")
def _embb_kernel(xp):
    def run(g, idx, num_weights=0, padding_idx=None, scale_grad_by_freq=False):
        idx1 = idx.reshape(-1).astype(xp.int64, copy=False)
        _check_range(xp, "embedding_backward", idx1, num_weights)
        rows = g.reshape(idx1.size, g.shape[-1])  # (-1 cannot be inferred when embedding_dim is 0)
        if scale_grad_by_freq and idx1.size:
            cnt = xp.bincount(idx1, minlength=num_weights)
            rows = rows / cnt[idx1][:, None].astype(rows.dtype)
        if padding_idx is not None:
            keep = idx1 != padding_idx
            idx1, rows = idx1[keep], rows[keep]
        return index_add_rows(xp, idx1, rows, num_weights)

    return run


kernel("embedding_bag")(_bag_kernel)
kernel("embedding_bag_backward")(_bagb_kernel)


# -- gradients (device ops only: they also run on devices whose values the host cannot read) -----------------
def _const(ref, a, dtype=None):
    import flow

    return flow.tensor(np.ascontiguousarray(a), dtype=dtype, device=ref.device)


def sparse_rows_grad(rows, idx1, num_weights: int, padding_idx=None):
    """The hybrid sparse COO gradient ``(num_weights, D)`` of a table whose rows ``idx1`` (host int64, in
    lookup order, repeats kept) received the gradient rows ``rows`` (n, D), as PyTorch's
    ``embedding_sparse_backward``: uncoalesced, ``padding_idx`` entries left out."""
    from flow.sparse import SparseTensor

    if padding_idx is not None:
        keep = np.flatnonzero(idx1 != padding_idx)
        if keep.size != idx1.size:
            rows = rows.index_select(0, _const(rows, keep))
            idx1 = idx1[keep]
    shape = (num_weights, rows.shape[-1])
    return SparseTensor._from_parts(idx1.reshape(1, -1).astype(np.int64), rows, shape, False)


def _emb_grad(ctx, g):
    w, idx = ctx.inputs
    a = ctx.attrs
    if a.get("sparse", False):  # nn.Embedding(sparse=True): only the looked-up rows, one entry per lookup
        idx1 = np.asarray(idx.numpy_host()).reshape(-1).astype(np.int64)
        rows = g.reshape(idx1.size, g.shape[-1])
        return sparse_rows_grad(rows, idx1, w.shape[0], a.get("padding_idx")), None
    return call(
        EMBEDDING_BACKWARD,
        g,
        idx,
        num_weights=w.shape[0],
        padding_idx=a.get("padding_idx"),
        scale_grad_by_freq=a.get("scale_grad_by_freq", False),
    ), None


def _embb_grad(ctx, gg):
    import flow

    g, idx = ctx.inputs
    a = ctx.attrs
    out = call(EMBEDDING, gg, idx)
    pad, scale = a.get("padding_idx"), a.get("scale_grad_by_freq", False)
    if scale:  # 1 / frequency of each index: counts scattered, then gathered back
        ones = flow.ones_like(idx, dtype=gg.dtype).unsqueeze(-1)
        counts = call(EMBEDDING_BACKWARD, ones, idx, num_weights=a["num_weights"])
        out = out / call(EMBEDDING, counts, idx)
    if pad is not None:
        out = out * (idx != pad).to(out.dtype).unsqueeze(-1)
    return out, None


def _bag_ids(idx, offs, a):
    """Bag of each index (int64, -1 where it takes no part), as the embedding_bag_ids op."""
    return call(
        EMBEDDING_BAG_IDS,
        idx,
        offs,
        padding_idx=a.get("padding_idx"),
        include_last_offset=a.get("include_last_offset", False),
    )


def _psw_grad(g, table, idx, offs, a):
    """d/d per_sample_weights of <g, bag sums>: <g[bag(i)], table[idx(i)]> for indices taking part."""
    from flow.ops.clamp_where import clamp

    ids = _bag_ids(idx, offs, a)
    rows_g = call(EMBEDDING, g, clamp(ids, min=0))
    rows_t = call(EMBEDDING, table, idx)
    return (rows_g * rows_t).sum(-1) * (ids >= 0).to(g.dtype)


def _sparse_bag_grad(g, w, idx, offs, psw, a):
    """The weight's hybrid sparse gradient of a 'sum' / 'mean' bag (PyTorch's
    ``_embedding_bag_sparse_backward``): one entry per index taking part, its bag's gradient row scaled by
    its per-sample weight or 1 / bag size."""
    ids = np.asarray(_bag_ids(idx, offs, a).numpy_host()).astype(np.int64)
    keep = np.flatnonzero(ids >= 0)  # padding (and unused trailing) indices have no entry
    bags = ids[keep]
    rows = g.index_select(0, _const(g, bags))
    if a.get("mode", "mean") == "mean" and bags.size:
        cnt = np.bincount(bags, minlength=int(g.shape[0]))
        rows = rows * _const(g, (1.0 / cnt[bags])[:, None], g.dtype)
    if psw is not None:
        rows = rows * psw.reshape(-1).index_select(0, _const(g, keep)).unsqueeze(1)
    idx1 = np.asarray(idx.numpy_host()).reshape(-1).astype(np.int64)[keep]
    return sparse_rows_grad(rows, idx1, w.shape[0])


def _bag_grad(ctx, g, _gmax):
    w, idx, offs, psw = ctx.inputs
    a = dict(ctx.attrs)
    sparse = a.pop("sparse", False)
    dw = dpsw = None
    if ctx.next[0][0] is not None and sparse:
        dw = _sparse_bag_grad(g, w, idx, offs, psw, a)
    elif ctx.next[0][0] is not None:
        dw = call(EMBEDDING_BAG_BACKWARD, g, idx, offs, psw, ctx.outputs[1].detach(), num_weights=w.shape[0], **a)
    if psw is not None and ctx.next[3][0] is not None:
        dpsw = _psw_grad(g, w, idx, offs, a)
    return dw, None, None, dpsw


def _bagb_grad(ctx, gg):
    from flow.ops.clamp_where import clamp

    g, idx, offs, psw, maxi = ctx.inputs
    a = ctx.attrs
    mode = a.get("mode", "mean")
    dg = dpsw = None
    if ctx.next[0][0] is not None:
        if mode == "max":  # gg[maxi[b, j], j]: a lookup in gg viewed as (V * D, 1)
            v, d = gg.shape
            flat = clamp(maxi * d + _const(gg, np.arange(d, dtype=np.int64)), min=0)
            dg = call(EMBEDDING, gg.reshape(v * d, 1), flat).reshape(tuple(g.shape))
            dg = dg * (maxi >= 0).to(gg.dtype)
        else:
            bag_attrs = {k: a[k] for k in ("mode", "padding_idx", "include_last_offset") if k in a}
            dg = call(EMBEDDING_BAG, gg, idx, offs, psw, **bag_attrs)[0]
    if psw is not None and ctx.next[3][0] is not None:
        dpsw = _psw_grad(g, gg, idx, offs, a)
    return dg, None, None, dpsw, None


def _ids_meta(idx, offs, padding_idx=None, include_last_offset=False):
    from flow import _dtype as D

    _bag_count("embedding_bag_ids", idx, offs, include_last_offset)
    return M.TensorMeta((idx.shape[0],), D.int64, M.check_same_device("embedding_bag_ids", idx, offs))


@kernel("embedding_bag_ids")
def _ids_kernel(xp):
    def run(idx, offs, padding_idx=None, include_last_offset=False):
        idx1 = idx.reshape(-1).astype(xp.int64, copy=False)
        nb, _, bag_of, m = bag_layout(xp, offs, idx1.size, include_last_offset, "embedding_bag_ids")
        ids = xp.full(idx1.shape, -1, xp.int64)
        ids[:m] = bag_of
        if padding_idx is not None:
            ids[idx1 == padding_idx] = -1
        return ids

    return run


# A table of any dtype (as PyTorch's embedding); bags average, so they need floats. Indices: int32 or int64.
_SPARSE_DTYPES = {
    "weight": FLOAT,
    "grad_output": FLOAT,
    "per_sample_weights": FLOAT,
    "input": INDEX,
    "indices": INDEX,
    "offsets": INDEX,
    "max_indices": INDEX64,
}


def _dt(*names, **over):
    return {n: over.get(n, _SPARSE_DTYPES[n]) for n in names}


EMBEDDING = defop(
    "embedding",
    ["weight", "input"],
    [_PAD, Attr("scale_grad_by_freq", bool, False), Attr("sparse", bool, False)],
    meta=_emb_meta,
    dtypes=_dt("weight", "input", weight=ANY),
    grad=_emb_grad,
    save="inputs",
)
EMBEDDING_BACKWARD = defop(
    "embedding_backward",
    ["grad_output", "indices"],
    [Attr("num_weights", int), _PAD, Attr("scale_grad_by_freq", bool, False)],
    meta=_embb_meta,
    dtypes=_dt("grad_output", "indices"),
    grad=_embb_grad,
    save="inputs",
)
EMBEDDING_BAG = defop(
    "embedding_bag",
    ["weight", "input", "offsets", "per_sample_weights?"],
    _BAG_ATTRS + [Attr("sparse", bool, False)],
    outputs=("out", "max_indices"),
    meta=_bag_meta,
    dtypes=_dt("weight", "input", "offsets", "per_sample_weights"),
    grad=_bag_grad,
    save="both",
)
EMBEDDING_BAG_IDS = defop(
    "embedding_bag_ids",
    ["input", "offsets"],
    [_PAD, Attr("include_last_offset", bool, False)],
    meta=_ids_meta,
    dtypes=_dt("input", "offsets"),
    save="none",
)
EMBEDDING_BAG_BACKWARD = defop(
    "embedding_bag_backward",
    ["grad_output", "input", "offsets", "per_sample_weights?", "max_indices"],
    [Attr("num_weights", int)] + _BAG_ATTRS,
    meta=_bagb_meta,
    dtypes=_dt("grad_output", "input", "offsets", "per_sample_weights", "max_indices"),
    grad=_bagb_grad,
    save="inputs",
)


# -- opcheck samples -------------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _emb_samples():
    w = S.uniform((6, 3), seed=1)
    idx = S.t(np.array([[0, 2, 5], [2, 2, 1]]))
    yield SampleInput((w, idx), {})
    yield SampleInput((w, S.t(np.array([4, 0, 4]))), {"padding_idx": 4}, grad=False)  # not the math gradient
    yield SampleInput((w, S.t(np.array(3))), {})
    yield SampleInput((S.ints((6, 3), -4, 4), idx.int()), {})
    yield ErrorInput((w[0], idx), {}, OpError, "'weight' must be 2-d")
    yield ErrorInput((w, idx), {"padding_idx": 6}, OpIndexError, "'padding_idx' must be a row of the weight")
    yield ErrorInput((w, idx + 4), {}, OpIndexError, "out of range", values=True)
    yield ErrorInput((w, idx - 3), {}, OpIndexError, "out of range", values=True)


def _embb_samples():
    idx = np.array([[0, 2, 5], [2, 2, 1]])
    yield SampleInput((S.uniform((2, 3, 3), seed=2), S.t(idx)), {"num_weights": 6})
    yield SampleInput((S.uniform((2, 3, 3), seed=3), S.t(idx)), {"num_weights": 6, "padding_idx": 2})
    yield SampleInput((S.uniform((2, 3, 3), seed=4), S.t(idx)), {"num_weights": 7, "scale_grad_by_freq": True})
    yield SampleInput((S.uniform((2, 3, 0), seed=4), S.t(idx)), {"num_weights": 6})
    g = S.uniform((2, 3, 3), seed=2)
    yield ErrorInput((g[0], S.t(idx)), {"num_weights": 6}, OpError, "'grad_output' must have shape (2, 3)")
    yield ErrorInput((g, S.t(idx)), {"num_weights": -1}, OpError, "'num_weights' must be non-negative")
    yield ErrorInput((g, S.t(idx)), {"num_weights": 6, "padding_idx": 7}, OpIndexError, "'padding_idx' must be")
    yield ErrorInput((g, S.t(idx)), {"num_weights": 3}, OpIndexError, "out of range", values=True)


def _bag_cases():
    idx = S.t(np.array([1, 4, 4, 0, 3, 2, 6, 1]))
    offs = S.t(np.array([0, 3, 3, 5]))
    psw = S.uniform((8,), 0.5, 1.5, seed=5)
    yield idx, offs, None, {"mode": "sum"}
    yield idx, offs, psw, {"mode": "sum", "padding_idx": 4}
    yield idx, offs, None, {"mode": "mean", "padding_idx": 3}
    yield idx, S.t(np.array([0, 2, 5, 7])), None, {"mode": "mean", "include_last_offset": True}
    yield idx, offs, None, {"mode": "max"}
    yield idx, offs, None, {"mode": "max", "padding_idx": 0}


def _bag_errors(lead, w, extra):
    """Error inputs of embedding_bag and its backward/ids ops: ``lead`` tensors come before 'input'."""
    idx, offs = S.t(np.array([1, 4, 4, 0, 3, 2, 6, 1])), S.t(np.array([0, 3, 3, 5]))
    tail = (None,) if w is not None else ()
    yield ErrorInput((*lead, idx[None], offs, *tail), extra, OpError, "'input' and 'offsets' must be 1-d")
    yield ErrorInput((*lead, idx, offs[None], *tail), extra, OpError, "'input' and 'offsets' must be 1-d")
    yield ErrorInput(
        (*lead, idx, offs[:0], *tail), {**extra, "include_last_offset": True}, OpError, "'offsets' must not be empty"
    )
    yield ErrorInput((*lead, idx, offs + 1, *tail), extra, OpError, "offsets[0] has to be 0", values=True)
    yield ErrorInput((*lead, idx, S.t(np.array([0, 5, 3, 5])), *tail), extra, OpError, "non-decreasing", values=True)


def _bag_samples():
    w = S.uniform((7, 3), seed=6)
    for idx, offs, psw, kw in _bag_cases():
        yield SampleInput((w, idx, offs, psw), kw)
    idx, offs = S.t(np.array([1, 4, 4, 0, 3, 2, 6, 1])), S.t(np.array([0, 3, 3, 5]))
    yield SampleInput((w, idx.int(), offs, None), {"mode": "sum"})
    yield from _bag_errors((w,), w, {"mode": "sum"})
    yield ErrorInput((w[0], idx, offs, None), {"mode": "sum"}, OpError, "'weight' must be 2-d")
    yield ErrorInput((w, idx, offs, S.uniform((8,))), {"mode": "mean"}, OpError, "only supported for mode='sum'")
    yield ErrorInput((w, idx, offs, S.uniform((7,))), {"mode": "sum"}, OpError, "'per_sample_weights' must be (8,)")
    yield ErrorInput((w, idx, offs, None), {"mode": "sum", "padding_idx": 7}, OpIndexError, "'padding_idx' must be")
    yield ErrorInput((w, idx + 1, offs, None), {"mode": "sum"}, OpIndexError, "out of range", values=True)


def _bagb_samples():
    w = S.uniform((7, 3), seed=6)
    for idx, offs, psw, kw in _bag_cases():
        out, maxi = call(EMBEDDING_BAG, w, idx, offs, psw, **kw)
        yield SampleInput((S.uniform(tuple(out.shape), seed=7), idx, offs, psw, maxi), dict(kw, num_weights=7))
    idx, offs = S.t(np.array([1, 4, 4, 0, 3, 2, 6, 1])), S.t(np.array([0, 3, 3, 5]))
    g, maxi = S.uniform((4, 3), seed=7), S.t(np.zeros((0,), np.int64))
    at = {"mode": "sum", "num_weights": 7}
    yield ErrorInput((g[:3], idx, offs, None, maxi), at, OpError, "'grad_output' must have shape (4, embedding_dim)")
    yield ErrorInput((g, idx, offs, None, maxi), {**at, "num_weights": -7}, OpError, "'num_weights' must be")
    yield ErrorInput((g, idx, offs, None, maxi), {**at, "padding_idx": 7}, OpIndexError, "'padding_idx' must be")
    yield ErrorInput((g, idx, offs, None, maxi), {**at, "num_weights": 3}, OpIndexError, "out of range", values=True)
    yield ErrorInput((g, idx, offs, None, maxi), {**at, "mode": "max"}, OpError, "'max_indices' must have the shape")
    yield ErrorInput((g, idx, offs, S.uniform((7,)), maxi), at, OpError, "'per_sample_weights' must be (8,)")


set_samples(EMBEDDING, _emb_samples)
set_samples(EMBEDDING_BACKWARD, _embb_samples)
set_samples(EMBEDDING_BAG, _bag_samples)
set_samples(EMBEDDING_BAG_BACKWARD, _bagb_samples)
set_samples(
    EMBEDDING_BAG_IDS,
    lambda: [
        *(SampleInput((idx, offs), {k: v for k, v in kw.items() if k != "mode"}) for idx, offs, _, kw in _bag_cases()),
        *_bag_errors((), None, {}),
    ],
)

__all__: list[str] = []
