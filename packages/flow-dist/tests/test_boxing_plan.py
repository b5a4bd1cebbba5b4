"""The order of N-d boxing (flow_dist.boxing_plan): valid steps only, never dearer than going through
broadcast axis by axis, and cheaper where an order matters (single process: plans only; every pair of
layouts is converted for real under mpiexec in ranks/boxing.py)."""

from __future__ import annotations

import itertools

import pytest

import flow
from flow_dist.boxing import cost_1d
from flow_dist.boxing_plan import _valid, plan, plan_cost

S, B, P = flow.sbp.split, flow.sbp.broadcast, flow.sbp.partial_sum
ONE = [B, P, S(0), S(1)]
HIER = (2, 2)
SHAPE = (8, 8)


def _through_broadcast_cost(frm: tuple, to: tuple) -> float:
    """The old order: every axis to broadcast, last to first, then first to last to the target."""
    total, state, c = 8.0 * 64, list(frm), 0.0
    steps = [(k, B) for k in reversed(range(2))] + [(k, to[k]) for k in range(2)]
    for k, b in steps:
        part = total
        for j, s in enumerate(state):
            if j != k and s.__class__ is flow.sbp.split(0).__class__:
                part /= HIER[j]
        c += cost_1d(state[k], b, part, HIER[k])
        state[k] = b
    return c


@pytest.mark.parametrize("frm,to", list(itertools.product(itertools.product(ONE, repeat=2), repeat=2)))
def test_every_plan_is_valid_reaches_the_target_and_is_no_dearer(frm, to):
    steps = plan(SHAPE, 8, HIER, frm, to)
    state = frm
    for k, b in steps:
        assert _valid(state, k, b), (frm, to, steps)
        state = state[:k] + (b,) + state[k + 1 :]
    assert state == to
    assert plan_cost(SHAPE, 8, HIER, frm, to) <= _through_broadcast_cost(frm, to) + 1e-9
    assert (steps == ()) == (frm == to)


def test_an_order_that_matters_is_chosen():
    # partial sums to a 2-d split: two reduce-scatters (192 + ... bytes), not two all-reduces
    frm, to = (P, P), (S(0), S(1))
    assert plan(SHAPE, 8, HIER, frm, to) == ((0, S(0)), (1, S(1)))
    assert plan_cost(SHAPE, 8, HIER, frm, to) == 256 + 128
    assert _through_broadcast_cost(frm, to) == 1024
    # nested splits of one dim are undone innermost first
    assert plan(SHAPE, 8, HIER, (S(0), S(0)), (B, B)) == ((1, B), (0, B))
    assert plan(SHAPE, 8, (4,), (P,), (S(1),)) == ((0, S(1)),)
