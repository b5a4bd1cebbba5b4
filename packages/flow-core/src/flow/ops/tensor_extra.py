"""kron, trace, cross, diff, trapezoid (trapz, cumulative_trapezoid), tril/triu_indices, histc, bincount.

All are composites of flow ops (their gradients come from the ops they call); histc and bincount
count, and as in PyTorch they have no gradient.
"""

from __future__ import annotations

import math

import numpy as np

from flow import _dtype as D
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops.composite import composite

__all__ = [
    "kron",
    "trace",
    "cross",
    "diff",
    "trapezoid",
    "trapz",
    "cumulative_trapezoid",
    "tril_indices",
    "triu_indices",
    "histc",
    "bincount",
]


def _tensor(op: str, x, arg: str = "input"):
    if not M.is_tensor_like(x):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
    return x


def _int(op: str, v, arg: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise OpTypeError(op, f"'{arg}' must be an int, got {type(v).__name__}")
    return int(v)


def kron(input, other):
    """The Kronecker product, as ``torch.kron`` (the operand with fewer dims gets leading 1s).

    >>> flow.kron(flow.eye(2), flow.ones(1, 2))
    tensor([[1., 1., 0., 0.],
            [0., 0., 1., 1.]])
    """
    a, b = _tensor("kron", input), _tensor("kron", other, "other")
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + tuple(a.shape)
    sb = (1,) * (nd - b.ndim) + tuple(b.shape)
    # interleave the dims: a's dim i pairs with b's dim i, then the pairs merge
    av = a.reshape(tuple(x for s in sa for x in (s, 1)))
    bv = b.reshape(tuple(x for s in sb for x in (1, s)))
    return (av * bv).reshape(tuple(p * q for p, q in zip(sa, sb)))


@composite("trace")
def trace(input):
    """The sum of the main diagonal of a 2-d tensor, as ``torch.trace`` (integer input sums to int64)."""
    x = _tensor("trace", input)
    if x.ndim != 2:
        raise OpError("trace", f"expected a 2-d tensor, got shape {tuple(x.shape)}")
    from flow.ops.views import diagonal

    return diagonal(x).sum()


def cross(input, other, dim: int | None = None):
    """The cross product of 3-vectors along ``dim``, as ``torch.cross`` (broadcasts).

    Without ``dim`` the first dim of size 3 is used (PyTorch's default, which it deprecates in
    favour of ``torch.linalg.cross``'s ``dim=-1``).
    """
    from flow.ops.shape_ops import broadcast_tensors, stack

    a, b = _tensor("cross", input), _tensor("cross", other, "other")
    if a.ndim != b.ndim:  # as PyTorch: sizes broadcast, the number of dims does not
        raise OpError(
            "cross", f"inputs must have the same number of dims, got shapes {tuple(a.shape)} and {tuple(b.shape)}"
        )
    shape = M.broadcast_shapes("cross", tuple(a.shape), tuple(b.shape))
    if dim is None:
        dims = [i for i, s in enumerate(shape) if s == 3]
        if not dims:
            raise OpError("cross", f"no dimension of size 3 in the broadcast shape {shape}")
        d = dims[0]
    else:
        d = M.wrap_dim("cross", _int("cross", dim, "dim"), len(shape))
        if shape[d] != 3:
            raise OpError("cross", f"dimension {d} must have size 3, got shape {shape}")
    a, b = broadcast_tensors(a, b)
    a0, a1, a2 = (a.select(d, i) for i in range(3))
    b0, b1, b2 = (b.select(d, i) for i in range(3))
    return stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim``, as ``torch.diff`` (bools give ``!=`` of neighbours).

    >>> flow.diff(flow.tensor([1, 4, 9, 16]))
    tensor([3, 5, 7])
    """
    from flow.ops.shape_ops import cat

    x = _tensor("diff", input)
    n = _int("diff", n, "n")
    if n < 0:
        raise OpError("diff", f"order 'n' must be non-negative, got {n}")
    if x.ndim == 0:
        raise OpError("diff", "expects input to be at least one-dimensional")
    d = M.wrap_dim("diff", _int("diff", dim, "dim"), x.ndim)
    parts = []
    for arg, extra in (("prepend", prepend), ("append", append)):
        if extra is None:
            parts.append(None)
            continue
        e = _tensor("diff", extra, arg)
        if e.ndim != x.ndim or any(i != d and p != q for i, (p, q) in enumerate(zip(e.shape, x.shape))):
            raise OpError(
                "diff",
                f"'{arg}' of shape {tuple(e.shape)} must match the input's shape {tuple(x.shape)} except in dim {d}",
            )
        parts.append(e)
    if parts[0] is not None or parts[1] is not None:
        x = cat([p for p in (parts[0], x, parts[1]) if p is not None], d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi, lo = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
        x = hi != lo if x.dtype is D.bool else hi - lo
    return x


def _trapezoid_dx(op: str, y, x, dx, d):
    """The widths of the intervals along dim ``d`` (a tensor broadcasting against y's intervals) or a number."""
    if x is None:
        dx = 1.0 if dx is None else dx
        if isinstance(dx, bool) or not isinstance(dx, (int, float)):
            raise OpTypeError(op, f"'dx' must be a number, got {type(dx).__name__}")
        return dx
    if dx is not None:
        raise OpError(op, "give either 'x' or 'dx', not both")
    x = _tensor(op, x, "x")
    n = y.shape[d]
    if x.ndim == 1:
        if x.shape[0] != n:
            raise OpError(op, f"'x' has {x.shape[0]} samples but dim {d} of y has {n}")
        w = x[1:] - x[:-1]
        return w.reshape((n - 1,) + (1,) * (y.ndim - 1 - d)) if n else w
    # x with the dims of y: its differences along the same dim must broadcast against y's
    dx_ = diff(x, dim=d - y.ndim)
    M.broadcast_shapes(op, tuple(dx_.shape), tuple(y.narrow(d, 0, max(n - 1, 0)).shape))
    return dx_


def _trapezoid_setup(op: str, y, x, dx, dim):
    y = _tensor(op, y, "y")
    if y.ndim == 0:
        raise OpError(op, "expects 'y' to be at least one-dimensional")
    d = M.wrap_dim(op, _int(op, dim, "dim"), y.ndim)
    if not y.dtype.is_floating_point:
        from flow.ops.conversion import to_dtype

        y = to_dtype(y, D._default_dtype)
    return y, d, _trapezoid_dx(op, y, x, dx, d)


def trapezoid(y, x=None, *, dx=None, dim: int = -1):
    """The trapezoidal rule along ``dim``: samples ``x`` (1-d, or with y's shape) or a spacing ``dx``.

    >>> flow.trapezoid(flow.tensor([1.0, 2.0, 3.0]))
    tensor(4.)
    """
    y, d, w = _trapezoid_setup("trapezoid", y, x, dx, dim)
    n = y.shape[d]
    if n == 0:
        return y.sum(d)
    mids = y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)
    return (mids * w).sum(d) * 0.5


def trapz(y, x=None, *, dx=None, dim: int = -1):
    """An alias of :func:`trapezoid` (``torch.trapz``)."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim: int = -1):
    """The running trapezoidal integral along ``dim`` (one element shorter than y there)."""
    from flow.ops.reduction_stats import cumsum

    y, d, w = _trapezoid_setup("cumulative_trapezoid", y, x, dx, dim)
    n = y.shape[d]
    if n == 0:
        return y
    mids = (y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)) * w * 0.5
    return cumsum(mids, d)


def _tri_indices(op: str, np_fn, row, col, offset, dtype, device):
    from flow._creation import tensor

    row, col, offset = _int(op, row, "row"), _int(op, col, "col"), _int(op, offset, "offset")
    if row < 0 or col < 0:
        raise OpError(op, f"'row' and 'col' must be non-negative, got {row} and {col}")
    dtype = D.int64 if dtype is None else dtype
    if dtype not in (D.int32, D.int64):
        raise OpTypeError(op, f"'dtype' must be int32 or int64, got {dtype}")
    r, c = np_fn(row, offset, col)  # row-major order, as PyTorch
    return tensor(np.stack([r, c]).astype(np.int64).reshape(2, -1), dtype=dtype, device=device)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None):
    """The (2, N) coordinates of the lower triangle of a row x col matrix (``offset`` shifts the diagonal)."""
    return _tri_indices("tril_indices", np.tril_indices, row, col, offset, dtype, device)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None):
    """The (2, N) coordinates of the upper triangle of a row x col matrix (``offset`` shifts the diagonal)."""
    return _tri_indices("triu_indices", np.triu_indices, row, col, offset, dtype, device)


def histc(input, bins: int = 100, min: float = 0, max: float = 0):  # noqa: A002
    """A histogram of ``bins`` equal bins over [min, max], as ``torch.histc``.

    With ``min == max`` the data's own range is used; values outside the range (and NaN) are not
    counted, and ``max`` itself falls in the last bin.

    >>> flow.histc(flow.tensor([1.0, 2.0, 1.0]), bins=4, min=0, max=3)
    tensor([0., 2., 1., 0.])
    """
    from flow._creation import zeros
    from flow.ops.clamp_where import clamp, where
    from flow.ops.indexing import scatter_add

    x = _tensor("histc", input)
    if not x.dtype.is_floating_point:
        raise OpTypeError("histc", f"'input' must be a floating-point tensor, got {x.dtype}")
    bins = _int("histc", bins, "bins")
    if bins <= 0:
        raise OpError("histc", f"'bins' must be positive, got {bins}")
    lo, hi = float(min), float(max)
    if lo > hi:
        raise OpError("histc", f"'max' ({hi}) must not be smaller than 'min' ({lo})")
    x = x.detach().reshape(-1)
    if lo == hi and x.numel():
        lo, hi = float(x.min().item()), float(x.max().item())
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise OpError("histc", f"the range [{lo}, {hi}] is not finite")
    inside = (x >= lo) & (x <= hi)
    pos = ((x - lo) * (bins / (hi - lo))).floor()
    idx = clamp(where(inside, pos, 0.0), 0, bins - 1).to(D.int64)
    return scatter_add(zeros(bins, dtype=x.dtype, device=x.device), 0, idx, inside.to(x.dtype))


def bincount(input, weights=None, minlength: int = 0):
    """How often each value of a 1-d non-negative integer tensor occurs (summing ``weights`` instead when given).

    The result has ``max(input) + 1`` (at least ``minlength``) bins: int64 counts, or the weights'
    dtype for float weights (float64 for others), as ``torch.bincount``.

    >>> flow.bincount(flow.tensor([0, 2, 2]))
    tensor([1, 0, 2])
    """
    from flow._creation import ones, zeros
    from flow.ops.indexing import scatter_add

    x = _tensor("bincount", input)
    if x.dtype.category != 1:
        raise OpTypeError("bincount", f"'input' must be an integer tensor, got {x.dtype}")
    if x.ndim != 1:
        raise OpError("bincount", f"'input' must be 1-d, got shape {tuple(x.shape)}")
    minlength = _int("bincount", minlength, "minlength")
    if minlength < 0:
        raise OpError("bincount", f"'minlength' must be non-negative, got {minlength}")
    if x.numel() and int(x.min().item()) < 0:
        raise OpIndexError("bincount", f"'input' must be non-negative, got a value {int(x.min().item())}")
    n = max(int(x.max().item()) + 1 if x.numel() else 0, minlength)
    idx = x.detach().to(D.int64)
    if weights is None:
        return scatter_add(zeros(n, dtype=D.int64, device=x.device), 0, idx, ones(x.numel(), dtype=D.int64))
    w = _tensor("bincount", weights, "weights")
    if tuple(w.shape) != tuple(x.shape):
        raise OpError("bincount", f"'weights' must have the input's shape {tuple(x.shape)}, got {tuple(w.shape)}")
    dtype = w.dtype if w.dtype in (D.float32, D.float64) else D.float64
    w = w.detach().to(dtype)
    return scatter_add(zeros(n, dtype=dtype, device=x.device), 0, idx, w)
