"""Where each rank's piece of a global tensor lies: SBP signatures checked against a shape and a
placement, and the slices of uneven splits.

An N-d SBP (one SBP per placement axis) is applied axis after axis: with hierarchy ``(2, 2)`` and
``(split(0), split(1))`` the rank at coordinate ``(i, j)`` holds rows piece ``i`` of 2 and columns
piece ``j`` of 2; with ``(split(0), split(0))`` the rows are split in 2 and each half in 2 again.
Pieces are ``numpy.array_split``'s: of ``L`` along a dim in ``n`` pieces, piece ``i`` has
``L // n + (1 if i < L % n else 0)`` elements.
"""

from __future__ import annotations

from typing import Sequence

from flow_dist.placement import Placement
from flow_dist.sbp import SbpError, Split, sbp, split

__all__ = ["normalize_sbp", "check_sbp", "contiguous", "piece_bounds", "local_slice", "local_shape"]


def normalize_sbp(value, placement: Placement) -> tuple:
    """One SBP per placement axis: a single SBP for a 1-d placement becomes a 1-tuple."""
    if isinstance(value, sbp):
        value = (value,)
    elif isinstance(value, list):
        value = tuple(value)
    if not isinstance(value, tuple) or not all(isinstance(s, sbp) for s in value):
        raise SbpError(
            f"sbp: expected a flow.sbp (split(dim), broadcast, partial_sum) or a tuple of them, got {value!r}"
        )
    if len(value) != placement.ndim:
        raise SbpError(
            f"sbp: {len(value)} SBP{'s' if len(value) != 1 else ''} {_fmt(value)} for a {placement.ndim}-d placement "
            f"(hierarchy {placement.hierarchy}); give one per placement axis"
        )
    return value


def check_sbp(nd_sbp: tuple, ndim: int, what: str = "tensor") -> tuple:
    """``nd_sbp`` with negative split dims made positive; a split dim outside ``ndim`` is an error."""
    out = []
    for s in nd_sbp:
        if s.__class__ is Split:
            d = s.dim
            if ndim == 0:
                raise SbpError(f"sbp: {what} is 0-d and cannot be split ({_fmt(nd_sbp)}); use broadcast or partial_sum")
            if not -ndim <= d < ndim:
                raise SbpError(f"sbp: split dim {d} is out of range for a {ndim}-d {what} ({_fmt(nd_sbp)})")
            if d < 0:
                s = split(d + ndim)
        out.append(s)
    return tuple(out)


def contiguous(a):
    """``a`` C-contiguous, as a copy only when it is not (``np.ascontiguousarray`` would make a 0-d
    array 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def piece_bounds(length: int, n: int, i: int) -> tuple:
    """``(start, stop)`` of piece ``i`` of ``n`` of a dim of ``length`` (``numpy.array_split``)."""
    q, r = divmod(length, n)
    start = i * q + min(i, r)
    return start, start + q + (1 if i < r else 0)


def local_slice(shape: Sequence[int], placement: Placement, nd_sbp: tuple, coord: tuple) -> tuple:
    """The slices of the logical tensor that the rank at ``coord`` holds (whole dims unless split)."""
    lo = [0] * len(shape)
    hi = list(shape)
    hier = placement.hierarchy
    for axis, s in enumerate(nd_sbp):
        if s.__class__ is Split:
            d = s.dim
            a, b = piece_bounds(hi[d] - lo[d], hier[axis], coord[axis])
            lo[d], hi[d] = lo[d] + a, lo[d] + b
    return tuple(slice(a, b) for a, b in zip(lo, hi))


def local_shape(shape: Sequence[int], placement: Placement, nd_sbp: tuple, coord: tuple) -> tuple:
    return tuple(s.stop - s.start for s in local_slice(shape, placement, nd_sbp, coord))


def _fmt(nd_sbp) -> str:
    from flow_dist.sbp import short

    try:
        return "(" + ", ".join(short(s) for s in nd_sbp) + ")"
    except Exception:
        return repr(nd_sbp)
