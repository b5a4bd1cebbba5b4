"""cdist, pdist (p-norm distances) and quantile, nanquantile: composites of flow ops.

The distances guard the zero distance so that its gradient is 0 (as PyTorch's) and never NaN;
the quantiles sort, gather the two neighbours of each rank and interpolate.
"""

from __future__ import annotations

import math

from flow import _dtype as D
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops.composite import composite

__all__ = ["cdist", "pdist", "quantile", "nanquantile"]


def _tensor(op: str, x, arg: str = "input"):
    if not M.is_tensor_like(x):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
    return x


def _p_norm_last(op: str, d, p: float):
    """The p-norm of ``d`` over its last dim; zero norms have zero gradient."""
    from flow.ops.clamp_where import where
    from flow.ops.reduction_minmax import amax

    if p == 0:
        return (d != 0).to(d.dtype).sum(-1)
    a = d.abs()
    if math.isinf(p):
        return amax(a, -1) if a.shape[-1] else a.sum(-1)
    if p == 2:
        s = (d * d).sum(-1)
    elif p == 1:
        return a.sum(-1)
    else:
        s = (a**p).sum(-1)
    zero = s == 0
    root = where(zero, 1.0, s)
    root = root.sqrt() if p == 2 else root ** (1.0 / p)
    return where(zero, 0.0, root)


def _check_p(op: str, p) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise OpTypeError(op, f"'p' must be a number, got {type(p).__name__}")
    if p < 0:
        raise OpError(op, f"'p' must be non-negative, got {p}")
    return float(p)


@composite("cdist")
def cdist(x1, x2, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distance between each row of ``x1`` (..., P, M) and each row of ``x2`` (..., R, M).

    Batch dims broadcast; the result is (..., P, R). ``compute_mode`` is accepted for PyTorch
    compatibility: distances are always computed from the differences (the exact way).

    >>> flow.cdist(flow.tensor([[0.0, 0.0]]), flow.tensor([[3.0, 4.0], [0.0, 1.0]]))
    tensor([[5., 1.]])
    """
    a, b = _tensor("cdist", x1, "x1"), _tensor("cdist", x2, "x2")
    p = _check_p("cdist", p)
    modes = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")
    if compute_mode not in modes:
        raise OpError("cdist", f"'compute_mode' must be one of {modes}, got {compute_mode!r}")
    if a.ndim < 2 or b.ndim < 2:
        raise OpError("cdist", f"'x1' and 'x2' must be at least 2-d, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-1]:
        raise OpError(
            "cdist",
            f"'x1' and 'x2' must have the same number of columns, got {a.shape[-1]} and {b.shape[-1]}",
        )
    if not a.dtype.is_floating_point or not b.dtype.is_floating_point:
        raise OpTypeError("cdist", f"'x1' and 'x2' must be floating-point tensors, got {a.dtype} and {b.dtype}")
    M.broadcast_shapes("cdist", tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    return _p_norm_last("cdist", a.unsqueeze(-2) - b.unsqueeze(-3), p)


def pdist(input, p: float = 2.0):
    """The p-norm distances between the rows of an (N, M) tensor, pairs i < j in row-major order (N(N-1)/2).

    >>> flow.pdist(flow.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]]))
    tensor([5.0000, 1.0000, 4.2426])
    """
    from flow.ops.indexing import index_select
    from flow.ops.tensor_extra import triu_indices

    x = _tensor("pdist", input)
    p = _check_p("pdist", p)
    if x.ndim != 2:
        raise OpError("pdist", f"'input' must be 2-d (N, M), got shape {tuple(x.shape)}")
    if not x.dtype.is_floating_point:
        raise OpTypeError("pdist", f"'input' must be a floating-point tensor, got {x.dtype}")
    n = x.shape[0]
    ij = triu_indices(n, n, 1, device=x.device)
    return _p_norm_last("pdist", index_select(x, 0, ij[0]) - index_select(x, 0, ij[1]), p)


# -- quantile, nanquantile --------------------------------------------------------------------------
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _q_tensor(op: str, q, like):
    from flow._creation import tensor

    if M.is_tensor_like(q):
        if q.ndim > 1:
            raise OpError(op, f"'q' must be a scalar or a 1-d tensor, got shape {tuple(q.shape)}")
        if q.dtype is not like.dtype:
            raise OpTypeError(op, f"'q' must have the input's dtype {like.dtype}, got {q.dtype}")
        qv = q  # not detached: with linear interpolation the result depends on q smoothly
    elif isinstance(q, (int, float)) and not isinstance(q, bool):
        qv = tensor(float(q), dtype=like.dtype, device=like.device)
    else:
        raise OpTypeError(op, f"'q' must be a number or a Tensor, got {type(q).__name__}")
    if qv.numel() and (bool((qv < 0).any().item()) or bool((qv > 1).any().item()) or bool((qv != qv).any().item())):
        raise OpError(op, "'q' values must lie in [0, 1]")
    return qv


def _quantile(op: str, input, q, dim, keepdim: bool, interpolation: str, ignore_nan: bool):
    from flow.ops.clamp_where import where
    from flow.ops.indexing import gather
    from flow.ops.sorting import sort

    x = _tensor(op, input)
    if not x.dtype.is_floating_point:
        raise OpTypeError(op, f"'input' must be a floating-point tensor, got {x.dtype}")
    if interpolation not in _INTERPOLATIONS:
        raise OpError(op, f"'interpolation' must be one of {_INTERPOLATIONS}, got {interpolation!r}")
    qv = _q_tensor(op, q, x)
    scalar_q = qv.ndim == 0
    if x.numel() == 0:
        raise OpError(op, "'input' must be non-empty")
    if dim is None:
        rows = x.reshape(1, -1)
        out_shape = (1,) * x.ndim if keepdim else ()
    else:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise OpTypeError(op, f"'dim' must be an int or None, got {type(dim).__name__}")
        d = M.wrap_dim(op, dim, max(x.ndim, 1))
        xm = x.reshape(1) if x.ndim == 0 else x.movedim(d, -1)
        rows = xm.reshape(-1, xm.shape[-1])
        kept = list(x.shape)
        if kept:
            if keepdim:
                kept[d] = 1
            else:
                kept.pop(d)
        out_shape = tuple(kept)
    n = rows.shape[-1]
    vals = sort(rows, -1).values  # NaN sorts last
    isnan = rows != rows
    if ignore_nan:
        count = n - isnan.sum(-1, keepdim=True).to(x.dtype)  # (R, 1) valid values per row
    else:
        count = x.new_full((rows.shape[0], 1), float(n))
    qs = qv.reshape(1, -1)  # (1, Q)
    rank = qs * (count - 1)  # (R, Q)
    rank = where(count > 0, rank, 0.0)
    lo = rank.floor()
    hi = rank.ceil()
    if interpolation == "nearest":
        lo = hi = rank.round()  # half to even, as PyTorch
    elif interpolation == "lower":
        hi = lo
    elif interpolation == "higher":
        lo = hi
    v_lo = gather(vals, -1, lo.to(D.int64))
    v_hi = gather(vals, -1, hi.to(D.int64))
    if interpolation == "linear":
        w = rank - lo
        # torch.lerp's two-sided formula: exact at both ends
        out = where(w < 0.5, v_lo + (v_hi - v_lo) * w, v_hi - (v_hi - v_lo) * (1.0 - w))
    elif interpolation == "midpoint":
        out = (v_lo + v_hi) * 0.5
    else:
        out = v_lo
    nan_rows = (count <= 0) if ignore_nan else isnan.any(-1, keepdim=True)
    out = where(nan_rows, math.nan, out)  # (R, Q)
    out = out.t().reshape(((qv.numel(),) if not scalar_q else ()) + out_shape)
    return out


@composite("quantile")
def quantile(input, q, dim: int | None = None, keepdim: bool = False, *, interpolation: str = "linear"):
    """The ``q``-quantiles of ``input`` (over ``dim``, or of all elements), as ``torch.quantile``.

    ``q`` is a number or a 1-d tensor in [0, 1]; a tensor ``q`` adds a leading dim. A slice that
    holds NaN gives NaN. ``interpolation`` is ``linear``, ``lower``, ``higher``, ``midpoint`` or
    ``nearest``.

    >>> flow.quantile(flow.tensor([1.0, 2.0, 3.0, 4.0]), 0.5)
    tensor(2.5000)
    """
    return _quantile("quantile", input, q, dim, keepdim, interpolation, ignore_nan=False)


@composite("nanquantile")
def nanquantile(input, q, dim: int | None = None, keepdim: bool = False, *, interpolation: str = "linear"):
    """As :func:`quantile`, ignoring NaN (a slice of NaN only gives NaN), as ``torch.nanquantile``."""
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, ignore_nan=True)
