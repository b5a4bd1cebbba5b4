"""The order of an N-d boxing: which placement axis converts when, and through what.

An N-d conversion runs one placement axis at a time (:func:`flow_dist.boxing.convert_axis`). A step
on axis ``k`` is valid when no later axis splits a dim the step's SBPs split (a later split would
make the pieces along ``k`` interleave). Different valid orders cost different amounts: reducing a
partial sum to a split first makes the next axis's collective move a smaller piece, and two axes
splitting the same dim must be undone innermost first. :func:`plan` searches the orders (each axis
goes from its source SBP to its target, possibly through broadcast) for the one sending the fewest
bytes per rank by the alpha-free cost model of :func:`flow_dist.boxing.cost_1d`; ties go to fewer
steps, then to the lower axis first. Plans are cached per (shape, itemsize, hierarchy, from, to).
"""

from __future__ import annotations

import heapq
from functools import lru_cache

from flow_dist.sbp import Split, broadcast

__all__ = ["plan", "plan_cost"]


def _valid(state: tuple, k: int, to) -> bool:
    dims = {s.dim for s in (state[k], to) if s.__class__ is Split}
    if not dims:
        return True
    return not any(s.__class__ is Split and s.dim in dims for s in state[k + 1 :])


def _step_cost(total: float, hier: tuple, state: tuple, k: int, to) -> float:
    from flow_dist.boxing import cost_1d

    part = total
    for j, s in enumerate(state):
        if j != k and s.__class__ is Split:
            part /= hier[j]
    return cost_1d(state[k], to, part, hier[k])


@lru_cache(maxsize=4096)
def _search(total: float, hier: tuple, frm: tuple, to: tuple) -> tuple:
    changed = [k for k in range(len(frm)) if frm[k] != to[k]]
    if len(changed) == 1 and _valid(frm, changed[0], to[changed[0]]):
        k = changed[0]
        return ((k, to[k]),), _step_cost(total, hier, frm, k, to[k])
    # Dijkstra over the states whose axes each hold the source, broadcast or the target SBP
    options = [tuple(dict.fromkeys((frm[k], broadcast, to[k]))) for k in range(len(frm))]
    best = {frm: (0.0, 0)}
    heap = [(0.0, 0, 0, (), frm)]  # (bytes, steps, push order: lower axes first on ties, path, state)
    pushed = 0
    while heap:
        c, n, _, path, state = heapq.heappop(heap)
        if state == to:
            return path, c
        if best.get(state, (c, n)) < (c, n):
            continue
        for k in range(len(state)):
            for b in options[k]:
                if b == state[k] or not _valid(state, k, b):
                    continue
                nxt = state[:k] + (b,) + state[k + 1 :]
                nc = c + _step_cost(total, hier, state, k, b)
                key = (nc, n + 1)
                if key < best.get(nxt, (float("inf"), 0)):
                    best[nxt] = key
                    pushed += 1
                    heapq.heappush(heap, (nc, n + 1, pushed, path + ((k, b),), nxt))
    raise AssertionError((frm, to))  # pragma: no cover - broadcast connects every pair of states


def plan(shape: tuple, itemsize: int, hierarchy: tuple, frm: tuple, to: tuple) -> tuple:
    """The steps ``((axis, sbp), ...)`` converting a tensor of logical ``shape`` from ``frm`` to ``to``
    over a placement of ``hierarchy``, cheapest first (see the module docs); ``()`` when equal."""
    if frm == to:
        return ()
    return _search(_nbytes(shape, itemsize), tuple(hierarchy), tuple(frm), tuple(to))[0]


def plan_cost(shape: tuple, itemsize: int, hierarchy: tuple, frm: tuple, to: tuple) -> float:
    """Bytes one rank sends along :func:`plan`'s steps."""
    if frm == to:
        return 0.0
    return _search(_nbytes(shape, itemsize), tuple(hierarchy), tuple(frm), tuple(to))[1]


def _nbytes(shape: tuple, itemsize: int) -> float:
    total = float(itemsize)
    for s in shape:
        total *= s
    return total
