"""Sample inputs for opcheck, shared by the core's op modules.

Inputs are small, deterministic (a fixed seed per call) and kept away from
kinks and poles where finite differences are meaningless.
"""

from __future__ import annotations

import numpy as np


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def t(a, dtype=None):
    import flow

    a = np.asarray(a)
    if dtype is None and a.dtype.kind == "f":
        dtype = flow.float64
    return flow.tensor(a, dtype=dtype)


def uniform(shape, low=-2.0, high=2.0, seed: int = 0):
    return t(rng(seed).uniform(low, high, size=shape))


def away_from(shape, points=(0.0,), low=-2.0, high=2.0, gap=0.1, seed: int = 0):
    """Uniform values at least ``gap`` away from each point (kinks of relu, abs, ...)."""
    a = rng(seed).uniform(low, high, size=shape)
    for p in points:
        close = np.abs(a - p) < gap
        a[close] = p + np.where(a[close] >= p, gap, -gap) * 2
    return t(a)


def ints(shape, low=0, high=5, seed: int = 0, dtype=None):
    import flow

    return t(rng(seed).integers(low, high, size=shape), dtype=dtype or flow.int64)


def bools(shape, seed: int = 0):
    import flow

    return t(rng(seed).random(shape) > 0.5, dtype=flow.bool)


def unary(low=-2.0, high=2.0, kinks=()):
    from flow.testing import SampleInput

    def samples():
        yield SampleInput((away_from((3, 4), kinks, low, high, seed=1) if kinks else uniform((3, 4), low, high, 1),))
        yield SampleInput((away_from((5,), kinks, low, high, seed=2) if kinks else uniform((5,), low, high, 2),))
        yield SampleInput((uniform((), low, high, 3) if not kinks else away_from((), kinks, low, high, seed=3),))

    return samples


def binary(low=-2.0, high=2.0, b_low=None, b_high=None, kinks_equal=False, grad=True):
    from flow.testing import SampleInput

    bl = low if b_low is None else b_low
    bh = high if b_high is None else b_high

    def samples():
        yield SampleInput((uniform((3, 4), low, high, 1), uniform((3, 4), bl, bh, 2)), grad=grad)
        yield SampleInput((uniform((2, 3, 4), low, high, 3), uniform((3, 1), bl, bh, 4)), grad=grad)
        yield SampleInput((uniform((4,), low, high, 5), uniform((), bl, bh, 6)), grad=grad)

    return samples
