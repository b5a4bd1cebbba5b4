"""Sorting and selection: sort argsort msort topk kthvalue median nanmedian mode, unique, searchsorted bucketize.

NaN sorts above every number, as in PyTorch. The value-selecting ops return
``(values, indices)`` named tuples and send their gradient back to the
selected positions with ``select_along_dim_backward`` (see
:mod:`flow.ops.reduction`).
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops.reduction import check_tensor, return_type
from flow.ops.reduction_minmax import _index_dim_meta, scatter_selected
from flow.registry.ops import ANY, INDEX64, NUMERIC, Attr

SortResult = return_type("sort", "SortResult", __name__)
TopkResult = return_type("topk", "TopkResult", __name__)
KthvalueResult = return_type("kthvalue", "KthvalueResult", __name__)
MedianResult = return_type("median", "MedianResult", __name__)
NanmedianResult = return_type("nanmedian", "NanmedianResult", __name__)
ModeResult = return_type("mode", "ModeResult", __name__)


def _int_arg(op: str, value, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise OpTypeError(op, f"'{arg}' must be an int, got {type(value).__name__} {value!r}")
    return int(value)


# -- kernels' helpers --------------------------------------------------------------------------
def stable_argsort(xp, x, axis: int, descending: bool = False):
    """Stable argsort along ``axis``; NaN last ascending and first descending; ties keep their order."""

    def sort(a):
        try:
            return xp.argsort(a, axis=axis, kind="stable")
        except TypeError:  # an array module without ``kind``: its sort is stable
            return xp.argsort(a, axis=axis)

    if not descending:
        return sort(x)
    n = x.shape[axis]
    # sorting the reversed array and reversing the result keeps equal elements in their original order
    return (n - 1) - xp.flip(sort(xp.flip(x, axis)), axis)


def _take_first(xp, a, axis: int, k: int):
    return xp.ascontiguousarray(xp.moveaxis(xp.moveaxis(a, axis, -1)[..., :k], -1, axis))


def _as0d(run):
    """Run a kernel on a 0-d array as on a 1-element 1-d array."""

    def wrapped(x, *args, **kw):
        if x.ndim != 0:
            return run(x, *args, **kw)
        outs = run(x.reshape(1), *args, **{**kw, "dim": 0})
        return tuple(o.reshape(()) for o in outs)

    return wrapped


def _selected_grad(ctx, gv, gi):
    return (scatter_selected(ctx, gv, ctx.outputs[1], ctx.op.name),)


# -- sort, topk ---------------------------------------------------------------------------------
def _sort_meta(x, dim=-1, descending=False, stable=False):
    M.wrap_dim("sort", dim, len(x.shape))
    return M.TensorMeta(tuple(x.shape), x.dtype, x.device), M.TensorMeta(tuple(x.shape), D.int64, x.device)


def _topk_meta(x, k=1, dim=-1, largest=True, sorted=True):  # noqa: A002
    shape = list(x.shape)
    d = M.wrap_dim("topk", dim, len(shape))
    n = shape[d] if shape else 1
    if isinstance(k, bool) or not isinstance(k, int):
        raise OpTypeError("topk", f"'k' must be an int, got {type(k).__name__}")
    if not 0 <= k <= n:
        raise OpIndexError("topk", f"'k'={k} is out of range for dim {d} of size {n} (expected 0 <= k <= {n})")
    if shape:
        shape[d] = k
    return M.TensorMeta(tuple(shape), x.dtype, x.device), M.TensorMeta(tuple(shape), D.int64, x.device)


# As PyTorch: sort and mode take bools, the selections by rank do not.
SORT = defop(
    "sort",
    ["input"],
    [Attr("dim", int, -1), Attr("descending", bool, False), Attr("stable", bool, False)],
    ("values", "indices"),
    meta=_sort_meta,
    dtypes=ANY,
    grad=_selected_grad,
    save="outputs",
)
TOPK = defop(
    "topk",
    ["input"],
    [Attr("k", int), Attr("dim", int, -1), Attr("largest", bool, True), Attr("sorted", bool, True)],
    ("values", "indices"),
    meta=_topk_meta,
    dtypes=NUMERIC,
    grad=_selected_grad,
    save="outputs",
)


@kernel(SORT)
def _sort_kernel(xp):
    @_as0d
    def run(x, dim=-1, descending=False, stable=False):
        i = stable_argsort(xp, x, dim, descending).astype(xp.int64)
        return xp.take_along_axis(x, i, axis=dim), i

    return run


@kernel(TOPK)
def _topk_kernel(xp):
    @_as0d
    def run(x, k=1, dim=-1, largest=True, sorted=True):  # noqa: A002
        i = _take_first(xp, stable_argsort(xp, x, dim, largest), dim, k).astype(xp.int64)
        return xp.take_along_axis(x, i, axis=dim), i

    return run


def sort(input, dim: int = -1, descending: bool = False, *, stable: bool = False):
    """``(values, indices)`` sorted along ``dim``; the sort is always stable (``stable=`` is accepted)."""
    check_tensor("sort", input)
    v, i = call(SORT, input, dim=_int_arg("sort", dim, "dim"), descending=bool(descending), stable=bool(stable))
    return SortResult(v, i)


def argsort(input, dim: int = -1, descending: bool = False, *, stable: bool = False):
    """The indices that sort ``input`` along ``dim``."""
    from flow.autograd import no_grad

    with no_grad():
        return sort(input, dim, descending, stable=stable).indices


def msort(input):
    """``input`` sorted along dim 0."""
    return sort(input, 0).values


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices, sorted."""
    check_tensor("topk", input)
    v, i = call(
        TOPK,
        input,
        k=_int_arg("topk", k, "k"),
        dim=_int_arg("topk", dim, "dim"),
        largest=bool(largest),
        sorted=bool(sorted),
    )
    return TopkResult(v, i)


# -- kthvalue, median, nanmedian, mode ---------------------------------------------------------
def _kth_meta(x, k=1, dim=-1, keepdim=False):
    out = _index_dim_meta("kthvalue")(x, dim, keepdim)
    n = x.shape[M.wrap_dim("kthvalue", dim, len(x.shape))] if len(x.shape) else 1
    if isinstance(k, bool) or not isinstance(k, int):
        raise OpTypeError("kthvalue", f"'k' must be an int, got {type(k).__name__}")
    if not 1 <= k <= n:
        raise OpIndexError("kthvalue", f"'k'={k} is out of range for dim of size {n} (expected 1 <= k <= {n})")
    return out


_DIM_KEEP = [Attr("dim", int, -1), Attr("keepdim", bool, False)]
KTHVALUE = defop(
    "kthvalue",
    ["input"],
    [Attr("k", int)] + _DIM_KEEP,
    ("values", "indices"),
    meta=_kth_meta,
    dtypes=NUMERIC,
    grad=_selected_grad,
    save="outputs",
)
MEDIAN = defop(
    "median",
    ["input"],
    _DIM_KEEP,
    ("values", "indices"),
    meta=_index_dim_meta("median"),
    dtypes=NUMERIC,
    grad=_selected_grad,
    save="outputs",
)
NANMEDIAN = defop(
    "nanmedian",
    ["input"],
    _DIM_KEEP,
    ("values", "indices"),
    meta=_index_dim_meta("nanmedian"),
    dtypes=NUMERIC,
    grad=_selected_grad,
    save="outputs",
)
MODE = defop(
    "mode",
    ["input"],
    _DIM_KEEP,
    ("values", "indices"),
    meta=_index_dim_meta("mode"),
    dtypes=ANY,
    grad=_selected_grad,
    save="outputs",
)


def _pick(xp, x, order, pos, dim, keepdim):
    """Values and indices at sorted position ``pos`` (an array with ``dim`` kept) along ``dim``."""
    i = xp.take_along_axis(order, pos, axis=dim).astype(xp.int64)
    v = xp.take_along_axis(x, i, axis=dim)
    if not keepdim:
        v, i = xp.squeeze(v, dim), xp.squeeze(i, dim)
    return v, i


def _keep_shape_of(x, dim):
    s = list(x.shape)
    s[dim] = 1
    return tuple(s)


@kernel(KTHVALUE)
def _kth_kernel(xp):
    @_as0d
    def run(x, k=1, dim=-1, keepdim=False):
        order = stable_argsort(xp, x, dim)
        return _pick(xp, x, order, xp.full(_keep_shape_of(x, dim), k - 1, dtype=xp.int64), dim, keepdim)

    return run


@kernel(MEDIAN)
def _median_kernel(xp):
    @_as0d
    def run(x, dim=-1, keepdim=False):
        order = stable_argsort(xp, x, dim)
        n = x.shape[dim]
        pos = xp.full(_keep_shape_of(x, dim), (n - 1) // 2, dtype=xp.int64)
        if x.dtype.kind == "f":  # a row with NaN has median NaN, at its first NaN (as PyTorch)
            nan = xp.isnan(x)
            pos = xp.where(xp.any(nan, axis=dim, keepdims=True), n - xp.sum(nan, axis=dim, keepdims=True), pos)
        return _pick(xp, x, order, pos, dim, keepdim)

    return run


@kernel(NANMEDIAN)
def _nanmedian_kernel(xp):
    @_as0d
    def run(x, dim=-1, keepdim=False):
        order = stable_argsort(xp, x, dim)
        n = x.shape[dim]
        if x.dtype.kind == "f":
            count = n - xp.sum(xp.isnan(x), axis=dim, keepdims=True)
            pos = xp.maximum(count - 1, 0) // 2
        else:
            pos = xp.full(_keep_shape_of(x, dim), (n - 1) // 2)
        return _pick(xp, x, order, pos.astype(xp.int64), dim, keepdim)

    return run


@kernel(MODE)
def _mode_kernel(xp):
    @_as0d
    def run(x, dim=-1, keepdim=False):
        # The most frequent value (the smallest on ties) and its last index, as PyTorch on the CPU.
        xm = xp.moveaxis(x, dim, -1)
        order = stable_argsort(xp, xm, -1)
        sv = xp.take_along_axis(xm, order, axis=-1)
        n = sv.shape[-1]
        pos = xp.broadcast_to(xp.arange(n), sv.shape)
        starts = xp.ones(sv.shape, dtype=bool)
        starts[..., 1:] = sv[..., 1:] != sv[..., :-1]
        run_start = xp.maximum.accumulate(xp.where(starts, pos, 0), axis=-1)
        end = xp.argmax(pos - run_start, axis=-1)[..., None]  # first longest run: the smallest value
        i = xp.take_along_axis(order, end, axis=-1).astype(xp.int64)  # stable: its last original index
        v = xp.take_along_axis(xm, i, axis=-1)
        v, i = xp.moveaxis(v, -1, dim), xp.moveaxis(i, -1, dim)
        if not keepdim:
            v, i = xp.squeeze(v, dim), xp.squeeze(i, dim)
        # (ascontiguousarray would make a 0-d result 1-d)
        return xp.ascontiguousarray(v).reshape(v.shape), xp.ascontiguousarray(i).reshape(i.shape)

    return run


def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False):
    """The ``k``-th smallest element (1-based) along ``dim`` and its index."""
    check_tensor("kthvalue", input)
    v, i = call(
        KTHVALUE, input, k=_int_arg("kthvalue", k, "k"), dim=_int_arg("kthvalue", dim, "dim"), keepdim=bool(keepdim)
    )
    return KthvalueResult(v, i)


def _median(op, result, name, input, dim, keepdim):
    check_tensor(name, input)
    if dim is None:  # the lower median of all elements, a 0-d tensor
        if input.numel() == 0:
            from flow._creation import full

            return full((), float("nan"), dtype=input.dtype, device=input.device)
        return call(op, input.reshape(-1), dim=0, keepdim=False)[0]
    v, i = call(op, input, dim=_int_arg(name, dim, "dim"), keepdim=bool(keepdim))
    return result(v, i)


def median(input, dim=None, keepdim: bool = False):
    """The lower median: of all elements (a tensor) or along ``dim`` (``(values, indices)``); NaN propagates."""
    return _median(MEDIAN, MedianResult, "median", input, dim, keepdim)


def nanmedian(input, dim=None, keepdim: bool = False):
    """Like :func:`median`, ignoring NaN."""
    return _median(NANMEDIAN, NanmedianResult, "nanmedian", input, dim, keepdim)


def mode(input, dim: int = -1, keepdim: bool = False):
    """The most frequent value along ``dim`` (the smallest on ties) and the index of its last occurrence."""
    check_tensor("mode", input)
    v, i = call(MODE, input, dim=_int_arg("mode", dim, "dim"), keepdim=bool(keepdim))
    return ModeResult(v, i)


# -- unique (data-dependent shapes: computed on the host, no gradient) ------------------------
def _to_device_tensor(a, dtype, device):
    from flow._creation import tensor

    return tensor(np.ascontiguousarray(a), dtype=dtype, device=device)


def unique(
    input,
    sorted: bool = True,
    return_inverse: bool = False,
    return_counts: bool = False,  # noqa: A002
    dim=None,
):
    """The distinct elements (sorted), and optionally the inverse indices and the counts."""
    check_tensor("unique", input)
    a = np.asarray(input.detach().numpy_host())
    if dim is not None:
        d = M.wrap_dim("unique", _int_arg("unique", dim, "dim"), a.ndim)
        if a.ndim == 0:
            raise OpIndexError("unique", "'dim' needs a tensor with at least one dim")
        vals, inv, cnt = np.unique(a, return_inverse=True, return_counts=True, axis=d)
    else:
        vals, inv, cnt = np.unique(a.reshape(-1), return_inverse=True, return_counts=True, equal_nan=False)
        inv = inv.reshape(a.shape)
    out = [_to_device_tensor(vals, input.dtype, input.device)]
    if return_inverse:
        out.append(_to_device_tensor(inv.reshape(-1) if dim is not None else inv, D.int64, input.device))
    if return_counts:
        out.append(_to_device_tensor(cnt, D.int64, input.device))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(input, return_inverse: bool = False, return_counts: bool = False, dim=None):
    """Collapse runs of equal consecutive elements (of the flattened input when ``dim`` is None)."""
    check_tensor("unique_consecutive", input)
    a = np.asarray(input.detach().numpy_host())
    if dim is None:
        flat = a.reshape(-1)
        d, rows = 0, flat
    else:
        d = M.wrap_dim("unique_consecutive", _int_arg("unique_consecutive", dim, "dim"), a.ndim)
        rows = np.moveaxis(a, d, 0)
    n = rows.shape[0]
    change = np.ones(n, dtype=bool)
    if n > 1:
        diff = rows[1:] != rows[:-1]
        change[1:] = diff.reshape(n - 1, -1).any(axis=1) if diff.ndim > 1 else diff
    starts = np.flatnonzero(change)
    vals = rows[starts]
    if dim is not None:
        vals = np.moveaxis(vals, 0, d)
    out = [_to_device_tensor(vals, input.dtype, input.device)]
    if return_inverse:
        inv = np.cumsum(change) - 1
        out.append(_to_device_tensor(inv.reshape(a.shape) if dim is None else inv, D.int64, input.device))
    if return_counts:
        out.append(_to_device_tensor(np.diff(np.append(starts, n)), D.int64, input.device))
    return out[0] if len(out) == 1 else tuple(out)


# -- searchsorted, bucketize ---------------------------------------------------------------------
def _searchsorted_meta(seq, values, sorter=None, out_int32=False, right=False):
    s, v = tuple(seq.shape), tuple(values.shape)
    if not s:
        raise OpError("searchsorted", "'sorted_sequence' must have at least one dim, got a 0-d tensor")
    if len(s) > 1 and s[:-1] != v[:-1]:
        raise OpError(
            "searchsorted",
            f"'sorted_sequence' of shape {s} needs 'input' with the same leading dims {s[:-1]}, got shape {v}",
        )
    if seq.dtype != values.dtype:
        raise OpTypeError(
            "searchsorted",
            f"'sorted_sequence' and 'input' must have the same dtype, got {seq.dtype} and {values.dtype}",
        )
    if sorter is not None and tuple(sorter.shape) != s:
        raise OpError(
            "searchsorted", f"'sorter' must have the shape {s} of 'sorted_sequence', got {tuple(sorter.shape)}"
        )
    return M.TensorMeta(v, D.int32 if out_int32 else D.int64, values.device)


SEARCHSORTED = defop(
    "searchsorted",
    ["sorted_sequence", "input", "sorter?"],
    [Attr("out_int32", bool, False), Attr("right", bool, False)],
    meta=_searchsorted_meta,
    dtypes={"sorted_sequence": NUMERIC, "input": NUMERIC, "sorter": INDEX64},
    save="none",
)


@kernel(SEARCHSORTED)
def _searchsorted_kernel(xp):
    def run(seq, values, sorter=None, out_int32=False, right=False):
        side = "right" if right else "left"
        if sorter is not None:
            from flow.ops.indexing import check_range

            check_range("searchsorted", sorter, seq.shape[-1], seq.ndim - 1)
            seq = xp.take_along_axis(seq, sorter, axis=-1)
        dt = xp.int32 if out_int32 else xp.int64
        if seq.ndim == 1:
            return xp.asarray(xp.searchsorted(seq, values, side=side)).astype(dt)
        rows = 1
        for d in seq.shape[:-1]:
            rows *= int(d)
        # explicit sizes: reshape(-1, ...) cannot tell them when a dim is 0 (an empty piece)
        s2 = seq.reshape(rows, seq.shape[-1])
        v2 = values.reshape(rows, values.shape[-1])
        out = xp.empty(v2.shape, dtype=dt)
        for r in range(s2.shape[0]):
            out[r] = xp.searchsorted(s2[r], v2[r], side=side)
        return out.reshape(values.shape)

    return run


def searchsorted(sorted_sequence, input, *, out_int32: bool = False, right: bool = False, side=None, sorter=None):
    """Indices where ``input`` would be inserted into the innermost dim of ``sorted_sequence`` to keep it sorted."""
    from flow._creation import tensor
    from flow._tensor import Tensor

    check_tensor("searchsorted", sorted_sequence, "sorted_sequence")
    if side is not None:
        if side not in ("left", "right"):
            raise OpError("searchsorted", f"'side' must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise OpError("searchsorted", "'side'='left' contradicts 'right'=True")
        right = side == "right"
    if not isinstance(input, Tensor):
        if not isinstance(input, (int, float, bool, np.number)):
            raise OpTypeError("searchsorted", f"'input' must be a Tensor or a number, got {type(input).__name__}")
        input = tensor(input, device=sorted_sequence.device)
    dt = D.promote_types(sorted_sequence.dtype, input.dtype)
    return call(
        SEARCHSORTED, sorted_sequence.to(dt), input.to(dt), sorter, out_int32=bool(out_int32), right=bool(right)
    )


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False):
    """The bucket of each element of ``input`` among the sorted 1-d ``boundaries``."""
    check_tensor("bucketize", boundaries, "boundaries")
    if boundaries.ndim != 1:
        raise OpError("bucketize", f"'boundaries' must be 1-d, got shape {tuple(boundaries.shape)}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


# -- opcheck samples ---------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _sort_samples():
    x = S.uniform((3, 5, 4), seed=31)  # distinct values
    yield SampleInput((x,), {"dim": -1, "descending": False, "stable": False})
    yield SampleInput((x,), {"dim": 1, "descending": True, "stable": True})
    yield SampleInput((S.uniform((), seed=32),), {"dim": 0, "descending": False, "stable": False})
    ties = S.ints((4, 6), 0, 3, seed=33)
    yield SampleInput((ties,), {"dim": 1, "descending": True, "stable": True})
    yield SampleInput((ties,), {"dim": 0, "descending": False, "stable": True})
    nan = S.t(np.array([[1.0, np.nan, -2.0, 0.5], [np.nan, 3.0, np.nan, 3.0]]))
    yield SampleInput((nan,), {"dim": 1, "descending": True, "stable": True}, grad=False)
    yield SampleInput((S.bools((3, 4)),), {"dim": 1, "descending": False, "stable": True})
    yield SampleInput((S.uniform((3, 0)),), {"dim": 1, "descending": False, "stable": True})
    yield from S.dim_errors(x, {"descending": False, "stable": False}, tuple_dims=False)


def _topk_samples():
    x = S.uniform((3, 5, 4), seed=34)
    yield SampleInput((x,), {"k": 2, "dim": 1, "largest": True, "sorted": True})
    yield SampleInput((x,), {"k": 3, "dim": -1, "largest": False, "sorted": True})
    yield SampleInput((x,), {"k": 0, "dim": 0, "largest": True, "sorted": False})
    yield SampleInput((S.ints((4, 6), 0, 3, seed=35),), {"k": 4, "dim": 1, "largest": True, "sorted": True})
    at = {"dim": 1, "largest": True, "sorted": True}
    yield ErrorInput((x,), {**at, "k": 6}, OpIndexError, "'k'=6 is out of range for dim 1 of size 5")
    yield ErrorInput((x,), {**at, "k": -1}, OpIndexError, "'k'=-1 is out of range")
    yield from S.dim_errors(x, {**at, "k": 1}, tuple_dims=False)


def _kth_samples():
    x = S.uniform((3, 5, 4), seed=36)
    yield SampleInput((x,), {"k": 2, "dim": 1, "keepdim": False})
    yield SampleInput((x,), {"k": 4, "dim": -1, "keepdim": True})
    yield SampleInput((S.uniform((), seed=37),), {"k": 1, "dim": 0, "keepdim": False})
    yield SampleInput((S.ints((4, 6), 0, 3, seed=38),), {"k": 3, "dim": 1, "keepdim": False})
    yield ErrorInput((x,), {"k": 0, "dim": 1, "keepdim": False}, OpIndexError, "'k'=0 is out of range")
    yield ErrorInput((x,), {"k": 6, "dim": 1, "keepdim": False}, OpIndexError, "'k'=6 is out of range")
    yield ErrorInput((S.uniform((3, 0)),), {"k": 1, "dim": 1, "keepdim": False}, OpIndexError, "size 0")
    yield from S.dim_errors(x, {"k": 1, "keepdim": False}, tuple_dims=False)


def _median_samples():
    x = S.uniform((3, 5, 4), seed=39)
    yield SampleInput((x,), {"dim": 1, "keepdim": False})
    yield SampleInput((x,), {"dim": -1, "keepdim": True})
    yield SampleInput((S.uniform((), seed=40),), {"dim": 0, "keepdim": False})
    yield SampleInput((S.ints((4, 6), 0, 3, seed=41),), {"dim": 0, "keepdim": False})
    nan = S.t(np.array([[1.0, np.nan, -2.0, 0.5, 0.25], [0.5, 3.0, 2.0, -3.0, np.nan], [1.0, 2.0, 3.0, 4.0, 5.0]]))
    yield SampleInput((nan,), {"dim": 1, "keepdim": False}, grad=False)
    yield ErrorInput((S.uniform((3, 0)),), {"dim": 1, "keepdim": False}, OpIndexError, "size 0")
    yield from S.dim_errors(x, {"keepdim": False}, tuple_dims=False)


def _mode_samples():
    yield SampleInput((S.uniform((3, 5, 4), seed=42),), {"dim": 1, "keepdim": False})  # all distinct
    yield SampleInput((S.ints((4, 7), 0, 3, seed=43),), {"dim": 1, "keepdim": False})
    yield SampleInput((S.ints((5, 3), 0, 2, seed=44),), {"dim": 0, "keepdim": True})
    rep = S.t(np.array([[1.5, 0.5, 1.5, -1.0, 0.5], [2.0, 2.0, 2.0, -1.0, -1.0]]))
    yield SampleInput((rep,), {"dim": 1, "keepdim": False}, grad=False)
    yield SampleInput((S.bools((4, 5)),), {"dim": 1, "keepdim": False}, grad=False)
    yield ErrorInput((S.uniform((0, 3)),), {"dim": 0, "keepdim": True}, OpIndexError, "size 0")
    yield from S.dim_errors(rep, {"keepdim": False}, tuple_dims=False)


def _searchsorted_samples():
    seq = S.t(np.array([-1.5, -0.5, 0.0, 0.75, 2.0]))
    vals = S.t(np.array([[-2.0, -0.5, 0.1], [0.75, 3.0, 1.0]]))
    yield SampleInput((seq, vals, None), {"out_int32": False, "right": False})
    yield SampleInput((seq, vals, None), {"out_int32": True, "right": True})
    seq2 = S.t(np.sort(S.rng(45).uniform(-2, 2, (2, 3, 6)), axis=-1))
    yield SampleInput((seq2, S.uniform((2, 3, 4), seed=46), None), {"out_int32": False, "right": False})
    unsorted = S.t(np.array([0.5, -1.0, 2.0, 0.0]))
    sorter = S.t(np.array([1, 3, 0, 2]), dtype=D.int64)
    yield SampleInput((unsorted, S.t(np.array([0.25, -3.0, 2.0])), sorter), {"out_int32": False, "right": True})
    yield SampleInput((S.ints((5,), 0, 9), S.ints((2, 3), 0, 9), None), {"out_int32": False, "right": False})
    at = {"out_int32": False, "right": False}
    yield ErrorInput((S.uniform(()), vals, None), at, OpError, "at least one dim")
    yield ErrorInput((seq2, S.uniform((3, 3, 4)), None), at, OpError, "the same leading dims (2, 3)")
    yield ErrorInput((seq, S.ints((2, 3)), None), at, OpTypeError, "must have the same dtype")
    yield ErrorInput((unsorted, vals, sorter[:3]), at, OpError, "'sorter' must have the shape (4,)")
    yield ErrorInput((unsorted, vals, sorter + 1), at, OpIndexError, "out of range", values=True)


set_samples(SORT, _sort_samples)
set_samples(TOPK, _topk_samples)
set_samples(KTHVALUE, _kth_samples)
set_samples(MEDIAN, _median_samples)
set_samples(NANMEDIAN, _median_samples)
set_samples(MODE, _mode_samples)
set_samples(SEARCHSORTED, _searchsorted_samples)

__all__ = [
    "sort",
    "argsort",
    "msort",
    "topk",
    "kthvalue",
    "median",
    "nanmedian",
    "mode",
    "unique",
    "unique_consecutive",
    "searchsorted",
    "bucketize",
]
