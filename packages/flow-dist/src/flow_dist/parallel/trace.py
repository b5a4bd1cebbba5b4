"""``count_collectives()``: what boxing a block of code runs, per kind of conversion.

Every one-axis conversion, eager or in a compiled graph's ``sbp_boxing`` kernel, goes through
:func:`flow_dist.boxing.convert_axis`; within the block it is wrapped to record the conversion
(``"P->B"``: an all-reduce, ``"S->B"``: an all-gather, ...) and the bytes this rank sends for it
(:func:`flow_dist.boxing.cost_1d`). Local conversions (``B->S``) are counted too, with 0 bytes.
The graph's own gradient buckets (``sbp_all_reduce_start``) do not go through boxing and are
not counted.
"""

from __future__ import annotations

import contextlib
from collections import Counter

from flow_dist import boxing

__all__ = ["count_collectives", "Collectives"]


class Collectives:
    """The conversions seen: ``counts[kind]``, ``bytes[kind]`` (sent by this rank), ``on_axis[(axis,
    kind)]`` (per placement axis), ``total()``."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.bytes: Counter = Counter()
        self.on_axis: Counter = Counter()

    def total(self, communicating: bool = True) -> int:
        """The number of conversions (``communicating``: only those that send bytes)."""
        return sum(c for k, c in self.counts.items() if not communicating or _sends(k))

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {c} ({self.bytes[k]:.0f} B)" for k, c in sorted(self.counts.items()))
        return f"Collectives({parts})"


def _sends(kind: str) -> bool:
    return kind in ("P->B", "P->S", "S->B", "S->S")


@contextlib.contextmanager
def count_collectives():
    """Count the boxing conversions run inside the block (on this rank); yields a :class:`Collectives`."""
    seen = Collectives()
    inner = boxing.convert_axis

    def counting(x, axis, to):
        frm = x.sbp[axis]
        if frm != to:
            kind = f"{frm.kind}->{to.kind}"
            part = x.local.nbytes if frm.kind != "S" else x.local.nbytes * x.placement.hierarchy[axis]
            seen.counts[kind] += 1
            seen.on_axis[(axis, kind)] += 1
            seen.bytes[kind] += boxing.cost_1d(frm, to, float(part), x.placement.hierarchy[axis])
        return inner(x, axis, to)

    boxing.convert_axis = counting
    try:
        yield seen
    finally:
        boxing.convert_axis = inner
