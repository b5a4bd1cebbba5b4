"""opcheck samples of the ops of :mod:`flow.ops.shape_ops` (kept apart so that the op module
stays within its size budget)."""

from __future__ import annotations

from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import _samples as S
from flow.ops._define import set_samples
from flow.ops.shape_ops import CAT, FLIP, ONE_HOT, ROLL, STACK, TRIL, TRIU
from flow.testing import ErrorInput, SampleInput


def _cat_samples():
    yield SampleInput(([S.uniform((2, 3), seed=1), S.uniform((4, 3), seed=2)],), {"dim": 0})
    yield SampleInput(
        ([S.uniform((2, 3, 1), seed=3), S.uniform((2, 3, 2), seed=4), S.uniform((2, 3, 0))],), {"dim": -1}
    )
    a, b = S.uniform((2, 3), seed=1), S.uniform((4, 3), seed=2)
    yield ErrorInput(([a, b],), {"dim": 1}, OpError, "sizes of tensors must match except in dim 1")
    yield ErrorInput(([a, S.uniform((2, 3, 1))],), {"dim": 0}, OpError, "same number of dims")
    yield ErrorInput(([a, S.ints((4, 3))],), {"dim": 0}, OpTypeError, "same dtype")
    yield ErrorInput(([a, b],), {"dim": 2}, OpIndexError, "out of range")
    yield ErrorInput(([S.uniform(()), S.uniform(())],), {"dim": 0}, OpError, "zero-dimensional")
    yield ErrorInput(([],), {"dim": 0}, OpError, "")


def _stack_samples():
    yield SampleInput(([S.uniform((2, 3), seed=1), S.uniform((2, 3), seed=2)],), {"dim": 0})
    yield SampleInput(([S.uniform((2, 3), seed=3), S.uniform((2, 3), seed=4), S.uniform((2, 3), seed=5)],), {"dim": -1})
    yield SampleInput(([S.uniform((), seed=3)],), {"dim": 0})
    a = S.uniform((2, 3), seed=1)
    yield ErrorInput(([a, S.uniform((3, 2))],), {"dim": 0}, OpError, "same shape")
    yield ErrorInput(([a, S.ints((2, 3))],), {"dim": 0}, OpTypeError, "same dtype")
    yield ErrorInput(([a, a],), {"dim": 3}, OpIndexError, "out of range")
    yield ErrorInput(([],), {"dim": 0}, OpError, "")


def _flip_samples():
    yield SampleInput((S.uniform((2, 3, 4), seed=1),), {"dims": (0, 2)})
    yield SampleInput((S.uniform((5,), seed=2),), {"dims": (-1,)})
    yield from S.dim_errors(S.uniform((2, 3, 4), seed=1), name="dims")


def _roll_samples():
    x = S.uniform((3, 4), seed=1)
    yield SampleInput((x,), {"shifts": (1, -3), "dims": (0, 1)})
    yield SampleInput((S.uniform((3, 4), seed=2),), {"shifts": (5,), "dims": None})
    yield ErrorInput((x,), {"shifts": (1, 2), "dims": None}, OpError, "must be a single int")
    yield ErrorInput((x,), {"shifts": (1, 2), "dims": (0,)}, OpError, "must have the same length")
    yield ErrorInput((x,), {"shifts": (1,), "dims": (2,)}, OpIndexError, "out of range")


def _tri_samples(diagonals):
    def samples():
        yield SampleInput((S.uniform((4, 5), seed=1),), {"diagonal": diagonals[0]})
        yield SampleInput((S.uniform((2, 3, 4), seed=2),), {"diagonal": diagonals[1]})
        yield SampleInput((S.bools((3, 3), seed=3),), {"diagonal": 0})
        yield ErrorInput((S.uniform((5,), seed=1),), {"diagonal": 0}, OpError, "at least 2-d")

    return samples


def _one_hot_samples():
    yield SampleInput((S.ints((2, 3), 0, 4, seed=1),), {"num_classes": 5})
    yield SampleInput((S.ints((4,), 0, 3, seed=2),), {"num_classes": 3})
    yield SampleInput((S.ints((0,), 0, 3, seed=2),), {"num_classes": 0})
    yield ErrorInput((S.ints((4,), 0, 3),), {"num_classes": -2}, OpError, "num_classes must be non-negative")
    yield ErrorInput((S.ints((4,), 0, 3),), {"num_classes": 2}, OpIndexError, "out of range", values=True)
    yield ErrorInput((S.ints((4,), -1, 0),), {"num_classes": 2}, OpIndexError, "out of range", values=True)


set_samples(CAT, _cat_samples)
set_samples(STACK, _stack_samples)
set_samples(FLIP, _flip_samples)
set_samples(ROLL, _roll_samples)
set_samples(TRIL, _tri_samples((0, -1)))
set_samples(TRIU, _tri_samples((1, 0)))
set_samples(ONE_HOT, _one_hot_samples)
