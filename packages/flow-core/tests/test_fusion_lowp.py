"""Fused elementwise kernels reading and writing bfloat16 / float16 (backends/cpu/codegen*.py)."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.backends.cpu import codegen

pytestmark = pytest.mark.skipif(codegen.find_compiler() is None, reason="no C compiler for the fused kernels")

LOW = [flow.bfloat16, flow.float16]


def _run(build, args, fuse: bool):
    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.config.enable_fusion(fuse)

        def build(self, *xs):
            return build(*xs)

    g = G()
    out = g(*args)
    out = out if isinstance(out, tuple) else (out,)
    return [o.float().numpy() for o in out], g._latest.ir.op_counts()


def _chain(x, y, s):
    a = F.gelu(x * 1.7 + y) - y.tanh()
    b = (a * a).sum(-1)
    c = flow.where(a > 0.1, a, y * 0.5).exp()
    d = (x.float() * s).to(x.dtype)  # a cast inside the group rounds like the unfused cast
    return a, b, c, d


@pytest.mark.parametrize("dt", LOW, ids=["bf16", "fp16"])
def test_fused_low_precision_matches_the_unfused_ops(dt):
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((64, 257)).astype(np.float32)).to(dt)
    y = flow.tensor(rng.standard_normal((64, 257)).astype(np.float32)).to(dt)
    s = flow.tensor(np.float32(3.3))
    fused, counts = _run(_chain, (x, y, s), True)
    plain, plain_counts = _run(_chain, (x, y, s), False)
    assert counts.get("fused_elementwise", 0) >= 2 and "fused_elementwise" not in plain_counts
    # every instruction rounds to the dtype as the unfused float32-kernel-then-round ops do; the
    # float32 math functions of the two paths may differ by an ulp of float32, which rounding to
    # bfloat16 hides and rounding to float16 (3 more mantissa bits) rarely shows as one ulp
    ulp = 2.0**-7 if dt is flow.bfloat16 else 2.0**-10
    for f, p in zip(fused, plain):
        scale = np.maximum(np.abs(p), 2.0**-14)
        assert np.all(np.abs(f - p) <= ulp * scale * 1.01), np.max(np.abs(f - p) / scale)
    if dt is flow.bfloat16:
        for f, p in zip(fused, plain):
            np.testing.assert_array_equal(f, p)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # the out-of-range specials, on purpose
@pytest.mark.parametrize("dt", LOW, ids=["bf16", "fp16"])
def test_fused_stores_round_like_astype(dt):
    """Rounding in the fused kernels: ties to even, overflow to inf, float16 subnormals, NaN and signs."""
    npdt = dt.np
    fin = np.finfo(npdt)
    specials = np.array(
        [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, float(fin.max), float(fin.max) * 1.01, 1e-8, -3e-6, 6e-5],
        np.float32,
    )
    rng = np.random.default_rng(1)
    xs = np.concatenate([specials, rng.standard_normal(8180).astype(np.float32) * 10.0 ** rng.integers(-8, 5, 8180)])
    x = flow.tensor(xs.reshape(4, -1))

    def build(x):
        return (x * 2.0).to(dt) * 0.5  # f32 math, a rounding cast, then low-precision math

    fused, counts = _run(build, (x,), True)
    assert counts.get("fused_elementwise") == 1
    ref = ((xs * np.float32(2.0)).astype(npdt).astype(np.float32) * np.float32(0.5)).astype(npdt).astype(np.float32)
    np.testing.assert_array_equal(fused[0].ravel(), ref)


@pytest.mark.parametrize("dt", LOW, ids=["bf16", "fp16"])
def test_amp_style_graph_fuses_low_precision_groups(dt):
    """A bf16 activation chain is fused (it was left unfused before the codegen knew 16-bit floats)."""
    rng = np.random.default_rng(2)
    x = flow.tensor(rng.standard_normal((32, 128)).astype(np.float32)).to(dt)
    b = flow.tensor(rng.standard_normal(128).astype(np.float32)).to(dt)

    def build(x, b):
        return F.relu(x + b) * 0.5 - x

    fused, counts = _run(build, (x, b), True)
    plain, _ = _run(build, (x, b), False)
    assert counts == {"fused_elementwise": 1}
    np.testing.assert_array_equal(fused[0], plain[0])
