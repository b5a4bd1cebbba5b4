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
        yield SampleInput((uniform((0, 4), low, high, 7), uniform((1, 4), bl, bh, 8)), grad=grad)
        yield from broadcast_errors(uniform((3, 4), low, high, 1), uniform((2, 4), bl, bh, 2))

    return samples


def broadcast_errors(a, b):
    """Error inputs of a binary elementwise op: shapes that do not broadcast."""
    from flow.errors import OpError
    from flow.testing import ErrorInput

    yield ErrorInput((a, b), {}, OpError, "cannot be broadcast")
    yield ErrorInput((a.reshape(-1)[:3], b.reshape(-1)[:4]), {}, OpError, "cannot be broadcast")


def dim_errors(x, extra: dict | None = None, tuple_dims: bool = True, name: str = "dim"):
    """Error inputs of an op reducing (or scanning) ``x`` over ``dim``: a dim past the last one, and
    (``tuple_dims``) a dim named twice."""
    from flow.errors import OpError, OpIndexError
    from flow.testing import ErrorInput

    nd = max(x.ndim, 1)
    kw = dict(extra or {})
    yield ErrorInput((x,), {**kw, name: (nd,) if tuple_dims else nd}, OpIndexError, "out of range")
    yield ErrorInput((x,), {**kw, name: (-nd - 1,) if tuple_dims else -nd - 1}, OpIndexError, "out of range")
    if tuple_dims and x.ndim:
        yield ErrorInput((x,), {**kw, name: (0, -nd)}, OpError, "names a dimension twice")
