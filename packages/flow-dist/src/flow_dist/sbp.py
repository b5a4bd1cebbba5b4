"""``flow.sbp``: how a global tensor is laid out along one axis of its placement.

- ``split(dim)``: each rank holds a piece of the logical tensor along ``dim`` (uneven lengths are
  split as ``numpy.array_split``: the first ``len % n`` pieces are one longer);
- ``broadcast``: each rank holds the whole logical tensor;
- ``partial_sum``: each rank holds a tensor of the logical shape, and the logical tensor is their
  sum (what a matmul of two split operands leaves before its all-reduce).

The names, equality and printing are OneFlow's (``flow.sbp.split(dim=0)``).
"""

from __future__ import annotations

from flow.errors import FlowError

__all__ = ["sbp", "split", "broadcast", "partial_sum", "SbpError", "Split", "Broadcast", "PartialSum"]


class SbpError(FlowError):
    """An SBP that does not fit a tensor or a placement (split dim out of range, wrong count)."""


class sbp:
    """The base class of the three SBP kinds (``isinstance(x, flow.sbp.sbp)``)."""

    __slots__ = ()
    kind = ""

    def is_split(self) -> bool:
        return False

    def is_broadcast(self) -> bool:
        return False

    def is_partial(self) -> bool:
        return False

    def __format__(self, spec: str) -> str:
        # format(s, "ir"): the compact form graph dumps print (flow.graph.debug)
        return short(self) if spec == "ir" else format(repr(self), spec)


class Split(sbp):
    __slots__ = ("dim",)
    kind = "S"

    def __init__(self, dim: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise SbpError(f"sbp.split: dim must be an int, got {dim!r}")
        self.dim = dim

    def is_split(self) -> bool:
        return True

    def __eq__(self, other) -> bool:
        return isinstance(other, Split) and other.dim == self.dim

    def __hash__(self) -> int:
        return hash(("S", self.dim))

    def __repr__(self) -> str:
        return f"flow.sbp.split(dim={self.dim})"

    def __reduce__(self):
        return (Split, (self.dim,))


class Broadcast(sbp):
    __slots__ = ()
    kind = "B"

    def is_broadcast(self) -> bool:
        return True

    def __eq__(self, other) -> bool:
        return isinstance(other, Broadcast)

    def __hash__(self) -> int:
        return hash("B")

    def __repr__(self) -> str:
        return "flow.sbp.broadcast"

    def __reduce__(self):
        return (_broadcast, ())


class PartialSum(sbp):
    __slots__ = ()
    kind = "P"

    def is_partial(self) -> bool:
        return True

    def __eq__(self, other) -> bool:
        return isinstance(other, PartialSum)

    def __hash__(self) -> int:
        return hash("P")

    def __repr__(self) -> str:
        return "flow.sbp.partial_sum"

    def __reduce__(self):
        return (_partial_sum, ())


_SPLITS: dict = {}


def split(dim: int) -> Split:
    """``split(dim)``: pieces along ``dim`` (a negative ``dim`` counts from the end once the
    tensor's rank is known)."""
    s = _SPLITS.get(dim)
    if s is None:
        s = _SPLITS[dim] = Split(dim)
    return s


broadcast = Broadcast()
partial_sum = PartialSum()


def _broadcast() -> Broadcast:
    return broadcast


def _partial_sum() -> PartialSum:
    return partial_sum


def short(s: sbp) -> str:
    """``S(0)``, ``B``, ``P``: the compact form errors and graph printing use."""
    return f"S({s.dim})" if s.kind == "S" else s.kind
