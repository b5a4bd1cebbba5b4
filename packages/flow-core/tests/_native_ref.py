"""Shared by the native-kernel tests: the dtypes and shapes they cover, tolerances, inputs."""

from __future__ import annotations

import numpy as np

DTYPES = [np.float32, np.float64]
# (1 row, 1 column, 1-D, 3-D, large rows, enough work to take the OpenMP path, odd sizes)
SHAPES = [(1, 7), (5, 1), (9,), (3, 4, 5), (2, 4097), (300, 257), (64, 33)]


def tol(dtype, scale=1.0):
    if np.dtype(dtype) == np.float32:
        return dict(rtol=2e-5 * scale, atol=2e-6 * scale)
    return dict(rtol=1e-11 * scale, atol=1e-12 * scale)


def randn(shape, dtype, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(dtype)
