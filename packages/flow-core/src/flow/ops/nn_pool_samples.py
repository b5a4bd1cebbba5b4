"""opcheck samples of the ops of :mod:`flow.ops.nn_pool` (kept apart so that the op module
stays within its size budget). Values are distinct and well separated, so max pooling has no ties."""

from __future__ import annotations

import numpy as np

from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import _samples as S
from flow.ops._define import set_samples
from flow.ops.nn_pool import (
    ADAPTIVE_MAX_POOL2D,
    AVG_POOL2D,
    AVG_POOL2D_BACKWARD,
    MAX_POOL2D,
    MAX_POOL2D_BACKWARD,
    MAX_POOL2D_GATHER,
    MAX_UNPOOL2D,
    _avg_geometry,
)
from flow.testing import ErrorInput, SampleInput


def _distinct(shape, seed):
    n = int(np.prod(shape))
    return S.t((S.rng(seed).permutation(n) * (4.0 / n) - 2.0).reshape(shape))


_MAX_CASES = [
    ((1, 2, 5, 5), dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)),
    ((1, 2, 5, 5), dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1), ceil_mode=True)),
    ((2, 1, 6, 5), dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1), ceil_mode=False)),
]
_AVG_CASES = [
    (
        (1, 2, 4, 6),
        dict(
            kernel_size=(2, 2),
            stride=(2, 2),
            padding=(0, 0),
            ceil_mode=False,
            count_include_pad=True,
            divisor_override=None,
        ),
    ),
    (
        (1, 2, 5, 5),
        dict(
            kernel_size=(3, 3),
            stride=(2, 2),
            padding=(1, 1),
            ceil_mode=True,
            count_include_pad=False,
            divisor_override=None,
        ),
    ),
    (
        (2, 1, 5, 6),
        dict(
            kernel_size=(2, 3),
            stride=(1, 2),
            padding=(1, 1),
            ceil_mode=False,
            count_include_pad=True,
            divisor_override=None,
        ),
    ),
    (
        (1, 1, 5, 5),
        dict(
            kernel_size=(2, 2),
            stride=(3, 3),
            padding=(1, 0),
            ceil_mode=True,
            count_include_pad=True,
            divisor_override=3,
        ),
    ),
]
_ADAPTIVE_CASES = [((1, 2, 5, 7), (3, 4)), ((2, 1, 6, 6), (3, 2)), ((1, 1, 4, 3), (4, 5))]


def _pooled(shape, at, seed, adaptive=False):
    x = _distinct(shape, seed)
    with_idx = call(ADAPTIVE_MAX_POOL2D, x, output_size=at) if adaptive else call(MAX_POOL2D, x, **at)
    return x, with_idx[1]


def _window_errors(x, at):
    """Error inputs for bad pooling windows of ``x`` (attributes ``at``)."""
    yield ErrorInput((x[0],), at, OpError, "'input' must be 4-d")
    yield ErrorInput((x,), {**at, "kernel_size": (0, 2)}, OpError, "'kernel_size' must be positive")
    yield ErrorInput((x,), {**at, "stride": (2,)}, OpTypeError, "'stride' must be 2 int(s)")
    yield ErrorInput((x,), {**at, "padding": (-1, 0)}, OpError, "'padding' must be non-negative")
    yield ErrorInput((x,), {**at, "kernel_size": (2, 2), "padding": (2, 0)}, OpError, "at most half of the kernel")
    yield ErrorInput((x,), {**at, "kernel_size": (9, 2), "padding": (0, 0)}, OpError, "too small")


def _max_samples():
    for k, (shape, at) in enumerate(_MAX_CASES):
        yield SampleInput((_distinct(shape, k),), dict(at))
    yield SampleInput((S.ints((1, 2, 4, 4), -5, 5, seed=3),), dict(_MAX_CASES[0][1]))
    x, at = _distinct((1, 2, 5, 5), 0), _MAX_CASES[0][1]
    yield from _window_errors(x, at)
    yield ErrorInput((x,), {**at, "dilation": (0, 1)}, OpError, "'dilation' must be positive")


def _adaptive_max_samples():
    for k, (shape, out) in enumerate(_ADAPTIVE_CASES):
        yield SampleInput((_distinct(shape, 10 + k),), {"output_size": out})
    x = _distinct((1, 2, 5, 7), 10)
    yield ErrorInput((x,), {"output_size": (0, 2)}, OpError, "'output_size' must be 2 positive ints")
    yield ErrorInput((x,), {"output_size": (2,)}, OpError, "'output_size' must be 2 positive ints")
    yield ErrorInput((x[0],), {"output_size": (2, 2)}, OpError, "'input' must be 4-d")
    yield ErrorInput((S.uniform((1, 2, 0, 3)),), {"output_size": (2, 2)}, OpError, "non-empty spatial dims")


def _max_bw_samples():
    for k, (shape, at) in enumerate(_MAX_CASES):
        x, idx = _pooled(shape, at, k)
        yield SampleInput((S.uniform(tuple(idx.shape), seed=20 + k), idx), {"input_size": tuple(shape[2:])})
    x, idx = _pooled((1, 1, 5, 5), (2, 2), 30, adaptive=True)  # overlapping windows: repeated indices
    yield SampleInput((S.uniform(tuple(idx.shape), seed=31), idx), {"input_size": (5, 5)})
    g = S.uniform(tuple(idx.shape), seed=31)
    yield ErrorInput((g, idx[:, :, :1]), {"input_size": (5, 5)}, OpError, "must equal 'grad_output' shape")
    yield ErrorInput((g, idx[0]), {"input_size": (5, 5)}, OpError, "'indices' must be 4-d")
    yield ErrorInput((g, idx), {"input_size": (5, 0)}, OpError, "'input_size' must be 2 positive ints")
    yield ErrorInput((g, idx), {"input_size": (2, 2)}, OpIndexError, "out of range", values=True)
    yield ErrorInput((g[0], idx), {"input_size": (5, 5)}, OpError, "'grad_output' must be 4-d")


def _gather_samples():
    for k, (shape, at) in enumerate(_MAX_CASES):
        x, idx = _pooled(shape, at, k)
        yield SampleInput((S.uniform(shape, seed=40 + k), idx))
    x, idx = _pooled(*_MAX_CASES[0], 0)
    yield SampleInput((x[:, :0], idx[:, :0]))
    yield ErrorInput((x[0], idx), {}, OpError, "'input' must be 4-d")
    yield ErrorInput((x, idx[:, :1]), {}, OpError, "'indices' must be 4-d with batch and channels (1, 2)")
    yield ErrorInput((x, idx + 25), {}, OpIndexError, "out of range", values=True)


def _unpool_samples():
    for k, (shape, at) in enumerate(_MAX_CASES[:1]):
        x, idx = _pooled(shape, at, k)
        yield SampleInput((S.uniform(tuple(idx.shape), seed=70 + k), idx), {"output_size": tuple(shape[2:])})
    x, idx = _pooled(*_MAX_CASES[0], 0)
    v = S.uniform(tuple(idx.shape), seed=70)
    yield ErrorInput((v, idx[:, :, :1]), {"output_size": (5, 5)}, OpError, "must equal 'input' shape")
    yield ErrorInput((v, idx), {"output_size": (5,)}, OpError, "'output_size' must be 2 positive ints")
    yield ErrorInput((v, idx), {"output_size": (1, 1)}, OpIndexError, "out of range", values=True)


def _avg_samples():
    for k, (shape, at) in enumerate(_AVG_CASES):
        yield SampleInput((S.uniform(shape, seed=50 + k),), dict(at))
    yield SampleInput((S.ints((1, 2, 4, 6), -7, 8, seed=3),), dict(_AVG_CASES[0][1]))
    yield SampleInput((S.ints((1, 2, 5, 5), -7, 8, seed=4),), dict(_AVG_CASES[1][1]))
    x, at = S.uniform((1, 2, 4, 6), seed=50), _AVG_CASES[0][1]
    yield from _window_errors(x, at)
    yield ErrorInput((x,), {**at, "divisor_override": 0}, OpError, "'divisor_override' must be a non-zero int")


def _avg_bw_samples():
    for k, (shape, at) in enumerate(_AVG_CASES):
        out = _avg_geometry(
            shape[2],
            shape[3],
            at["kernel_size"],
            at["stride"],
            at["padding"],
            at["ceil_mode"],
            at["count_include_pad"],
            at["divisor_override"],
        )[:2]
        yield SampleInput((S.uniform(shape[:2] + tuple(out), seed=60 + k),), dict(at, input_size=tuple(shape[2:])))
    at = dict(_AVG_CASES[0][1], input_size=(4, 6))
    g = S.uniform((1, 2, 2, 3), seed=60)
    yield ErrorInput((g,), {**at, "input_size": (4, 8)}, OpError, "pools to (2, 4)")
    yield ErrorInput((g,), {**at, "input_size": (4,)}, OpError, "'input_size' must be 2 positive ints")
    yield ErrorInput((g[0],), at, OpError, "'grad_output' must be 4-d")


set_samples(MAX_POOL2D, _max_samples)
set_samples(ADAPTIVE_MAX_POOL2D, _adaptive_max_samples)
set_samples(MAX_POOL2D_BACKWARD, _max_bw_samples)
set_samples(MAX_POOL2D_GATHER, _gather_samples)
set_samples(MAX_UNPOOL2D, _unpool_samples)
set_samples(AVG_POOL2D, _avg_samples)
set_samples(AVG_POOL2D_BACKWARD, _avg_bw_samples)
