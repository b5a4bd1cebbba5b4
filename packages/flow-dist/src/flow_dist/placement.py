"""``flow.placement``: the device type and the N-d array of ranks a global tensor lives on.

A placement is OneFlow's: ``flow.placement("cpu", ranks=[0, 1])`` puts a tensor on ranks 0 and 1;
``ranks=[[0, 1], [2, 3]]`` is a 2-d placement (hierarchy ``(2, 2)``) whose first axis may be used
for data parallelism and the second for tensor parallelism, each with an SBP of its own. The
order of the ranks matters: piece ``i`` of a split lives on the ``i``-th rank along its axis.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from flow.errors import FlowError

__all__ = ["Placement", "placement", "PlacementError"]

_TYPES = ("cpu", "cuda")


class PlacementError(FlowError):
    """A placement that cannot be: an unknown device type, bad or duplicate ranks."""


def _rank_array(ranks) -> np.ndarray:
    if isinstance(ranks, range):
        ranks = list(ranks)
    if isinstance(ranks, (int, np.integer)) and not isinstance(ranks, bool):
        ranks = [int(ranks)]
    try:
        arr = np.array(ranks, dtype=object)
    except ValueError as e:  # ragged nested lists (NumPy >= 1.24 refuses them)
        raise PlacementError(f"placement: ranks must be a rectangular (N-d) list of ints, got {ranks!r}") from e
    if arr.ndim == 0 or arr.size == 0:
        raise PlacementError(f"placement: ranks must be a non-empty list of ints, got {ranks!r}")
    flat = arr.reshape(-1)
    for r in flat:
        if isinstance(r, (list, tuple)):  # a ragged list NumPy kept as objects
            raise PlacementError(f"placement: ranks must be a rectangular (N-d) list of ints, got {ranks!r}")
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            raise PlacementError(f"placement: ranks must be ints, got {r!r} ({type(r).__name__}) in {ranks!r}")
        if r < 0:
            raise PlacementError(f"placement: ranks must be non-negative, got {int(r)} in {ranks!r}")
    out = arr.astype(np.int64)
    uniq, counts = np.unique(out, return_counts=True)
    if (counts > 1).any():
        raise PlacementError(f"placement: rank {int(uniq[counts > 1][0])} appears more than once in {ranks!r}")
    out.setflags(write=False)
    return out


class Placement:
    """A device type and an N-d array of process ranks (``flow.placement(type, ranks)``)."""

    __slots__ = ("_type", "_ranks", "_flat", "_hash", "_index")

    def __init__(self, type: str = "cpu", ranks: Iterable | None = None, *, hierarchy=None) -> None:
        if not isinstance(type, str) or type.split(":")[0] not in _TYPES:
            raise PlacementError(f"placement: unknown device type {type!r}; expected one of {list(_TYPES)}")
        if ranks is None:
            raise PlacementError("placement: ranks= is required (or use flow.placement.all(type))")
        arr = _rank_array(ranks)
        if hierarchy is not None:
            hierarchy = tuple(int(h) for h in hierarchy)
            if int(np.prod(hierarchy)) != arr.size:
                raise PlacementError(f"placement: hierarchy {hierarchy} does not hold {arr.size} ranks")
            arr = arr.reshape(hierarchy)
            arr.setflags(write=False)
        self._type = type.split(":")[0]
        self._ranks = arr
        self._flat = tuple(int(r) for r in arr.reshape(-1))
        self._hash = hash((self._type, arr.shape, self._flat))
        self._index = {r: tuple(int(i) for i in np.unravel_index(k, arr.shape)) for k, r in enumerate(self._flat)}

    @classmethod
    def all(cls, type: str = "cpu") -> Placement:
        """Every rank of the job, in order (a 1-d placement)."""
        from flow_dist import env

        return cls(type, list(range(env.get_world_size())))

    @property
    def type(self) -> str:
        return self._type

    @property
    def ranks(self) -> np.ndarray:
        """The N-d array of ranks (read-only)."""
        return self._ranks

    @property
    def hierarchy(self) -> tuple:
        """The shape of the rank array: ``(n,)`` for a 1-d placement."""
        return self._ranks.shape

    @property
    def ndim(self) -> int:
        return self._ranks.ndim

    @property
    def rank_list(self) -> tuple:
        """The ranks in row-major order."""
        return self._flat

    @property
    def size(self) -> int:
        return len(self._flat)

    def has(self, rank: int) -> bool:
        return rank in self._index

    __contains__ = has

    def rank_index(self, rank: int) -> tuple:
        """The coordinate of ``rank`` in the rank array (one index per placement axis)."""
        try:
            return self._index[rank]
        except KeyError:
            raise PlacementError(f"placement: rank {rank} is not in {self!r}") from None

    def axis_group(self, rank: int, axis: int) -> tuple:
        """The ranks that share every coordinate of ``rank`` but the one along ``axis``, in order:
        the group a conversion of that axis's SBP communicates in."""
        idx = list(self.rank_index(rank))
        idx[axis] = slice(None)
        return tuple(int(r) for r in self._ranks[tuple(idx)])

    def check_ranks(self, world_size: int) -> None:
        """Raise when a rank is not a process of a job of ``world_size`` processes."""
        bad = [r for r in self._flat if r >= world_size]
        if bad:
            raise PlacementError(
                f"placement: rank {bad[0]} is out of range for a job of {world_size} process"
                f"{'es' if world_size != 1 else ''} (ranks 0..{world_size - 1}) in {self!r}"
            )

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Placement)
            and other._type == self._type
            and other._ranks.shape == self._ranks.shape
            and other._flat == self._flat
        )

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f'flow.placement(type="{self._type}", ranks={self._ranks.tolist()})'

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        # format(p, "ir"): the compact form graph dumps print (flow.graph.debug)
        if spec == "ir":
            return f"{self._type}{self._ranks.tolist()}".replace(" ", "")
        return format(repr(self), spec)

    def __reduce__(self):
        return (Placement, (self._type, self._ranks.tolist()))


placement = Placement
