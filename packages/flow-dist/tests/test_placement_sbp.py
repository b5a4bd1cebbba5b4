"""Placements and SBPs as OneFlow has them: construction, equality, hashing, printing, bad input;
and where each rank's piece of a global tensor lies (uneven splits as numpy.array_split)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from flow_dist.layout import check_sbp, local_shape, local_slice, normalize_sbp, piece_bounds
from flow_dist.placement import Placement, PlacementError, placement
from flow_dist.sbp import SbpError, broadcast, partial_sum, sbp, split


def test_placement_1d_and_nd():
    p = placement("cpu", [0, 1])
    assert p.type == "cpu" and p.hierarchy == (2,) and p.ndim == 1 and p.rank_list == (0, 1)
    assert repr(p) == 'flow.placement(type="cpu", ranks=[0, 1])'
    q = placement("cuda", [[0, 1], [2, 3]])
    assert q.hierarchy == (2, 2) and q.ndim == 2 and q.size == 4
    assert q.rank_index(2) == (1, 0) and q.axis_group(2, 0) == (0, 2) and q.axis_group(2, 1) == (2, 3)
    assert 3 in q and 5 not in q
    assert placement("cpu", range(4), hierarchy=(2, 2)) == placement("cpu", [[0, 1], [2, 3]])
    np.testing.assert_array_equal(q.ranks, [[0, 1], [2, 3]])


def test_placement_equality_hash_and_pickle():
    a, b = placement("cpu", [0, 1]), Placement("cpu", [0, 1])
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != placement("cpu", [1, 0])  # rank order is where the pieces go
    assert a != placement("cuda", [0, 1]) and a != placement("cpu", [[0, 1]])
    assert pickle.loads(pickle.dumps(a)) == a


@pytest.mark.parametrize(
    "args, match",
    [
        (("tpu", [0]), "unknown device type"),
        (("cpu", []), "non-empty"),
        (("cpu", [0, 0]), "more than once"),
        (("cpu", [-1]), "non-negative"),
        (("cpu", [0.5]), "must be ints"),
        (("cpu", [[0, 1], [2]]), "rectangular"),
        (("cpu", None), "ranks= is required"),
    ],
)
def test_bad_placements(args, match):
    with pytest.raises(PlacementError, match=match):
        placement(*args)


def test_rank_out_of_range_names_rank_and_world():
    with pytest.raises(PlacementError, match=r"rank 4 is out of range for a job of 2 processes"):
        placement("cpu", [0, 4]).check_ranks(2)


def test_sbp_objects():
    assert split(0) == split(0) and split(0) != split(1) and hash(split(1)) == hash(split(1))
    assert broadcast == broadcast and broadcast != partial_sum
    assert repr(split(1)) == "flow.sbp.split(dim=1)"
    assert repr(broadcast) == "flow.sbp.broadcast" and repr(partial_sum) == "flow.sbp.partial_sum"
    assert all(isinstance(s, sbp) for s in (split(0), broadcast, partial_sum))
    assert pickle.loads(pickle.dumps(broadcast)) is broadcast
    assert pickle.loads(pickle.dumps(split(2))) == split(2)
    with pytest.raises(SbpError, match="must be an int"):
        split("0")


def test_normalize_and_check_sbp():
    p1, p2 = placement("cpu", [0, 1]), placement("cpu", [[0, 1], [2, 3]])
    assert normalize_sbp(split(0), p1) == (split(0),)
    assert normalize_sbp([broadcast, split(1)], p2) == (broadcast, split(1))
    with pytest.raises(SbpError, match="for a 2-d placement"):
        normalize_sbp(broadcast, p2)
    with pytest.raises(SbpError, match="expected a flow.sbp"):
        normalize_sbp("S0", p1)
    assert check_sbp((split(-1),), 3) == (split(2),)
    with pytest.raises(SbpError, match="out of range for a 2-d"):
        check_sbp((split(2),), 2)
    with pytest.raises(SbpError, match="0-d and cannot be split"):
        check_sbp((split(0),), 0)


@pytest.mark.parametrize("length", [0, 1, 5, 7, 8])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_pieces_are_numpy_array_split(length, n):
    pieces = np.array_split(np.arange(length), n)
    for i, piece in enumerate(pieces):
        a, b = piece_bounds(length, n, i)
        assert list(range(a, b)) == piece.tolist()


def test_nd_pieces_apply_one_axis_after_the_other():
    p = placement("cpu", [[0, 1], [2, 3]])
    whole = np.arange(7 * 5).reshape(7, 5)
    # (S(0), S(1)): rows by the first axis, columns by the second
    for r in range(4):
        i, j = p.rank_index(r)
        sl = local_slice(whole.shape, p, (split(0), split(1)), (i, j))
        np.testing.assert_array_equal(whole[sl], np.array_split(np.array_split(whole, 2, 0)[i], 2, 1)[j])
    # (S(0), S(0)): the rows split in two, each half in two again
    got = [local_shape(whole.shape, p, (split(0), split(0)), p.rank_index(r))[0] for r in range(4)]
    assert got == [2, 2, 2, 1]
    assert local_shape(whole.shape, p, (broadcast, partial_sum), (1, 1)) == (7, 5)
