"""Native bfloat16 / float16 GEMM (csrc/lowp_gemm.cpp, flow.backends.cpu.lowp.gemm): bit-exact with NumPy's
float32 product of the widened operands rounded back, for matmul / linear / bmm and their backward products."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import flow
import flow.nn.functional as F
from flow import _dtype as D
from flow.backends.cpu import lowp, native, threads
from flow.registry import REGISTRY

pytestmark = pytest.mark.skipif(
    not native.HAVE_NATIVE or threads.BLAS_PATH is None, reason="needs flow._C bound to NumPy's OpenBLAS"
)

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)


@pytest.fixture(params=[1, 2], ids=["t1", "t2"])
def nthreads(request):
    prev = flow.get_num_threads()
    flow.set_num_threads(request.param)
    yield request.param
    flow.set_num_threads(prev)


def _rand(rng, shape, dt, transposed=False):
    """A random ``dt`` array of ``shape``; with ``transposed`` a transposed view of a C-contiguous one."""
    if transposed:
        full = rng.standard_normal(shape[:-2] + (shape[-1], shape[-2])).astype(dt)
        return np.swapaxes(full, -1, -2)
    return rng.standard_normal(shape).astype(dt)


def _ref(a, b, dt, bias=None):
    r = a.astype(F32) @ b.astype(F32)
    if bias is not None:
        r += bias.astype(F32)
    return r.astype(dt)


def _same_bits(got, ref):
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.dtype, ref.shape)
    g = got.view(np.uint16 if got.itemsize == 2 else np.uint32)
    r = ref.view(np.uint16 if ref.itemsize == 2 else np.uint32)
    bad = np.argwhere(g != r)
    assert bad.size == 0, f"{len(bad)} of {g.size} values differ, first at {bad[:3].tolist()}"


# (m, k, n): empty, one row / column, odd sizes, sizes one past a tile edge (128 rows, 256 columns)
SHAPES = [(0, 4, 3), (3, 0, 5), (4, 3, 0), (1, 7, 9), (9, 7, 1), (1, 1, 1), (7, 13, 5), (129, 33, 257), (130, 64, 258)]


@pytest.mark.parametrize("dt", [BF16, F16], ids=["bf16", "f16"])
@pytest.mark.parametrize("mkn", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_2d_bit_exact(dt, mkn, nthreads):
    m, k, n = mkn
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    for ta in (False, True):
        for tb in (False, True):
            a, b = _rand(rng, (m, k), dt, ta), _rand(rng, (k, n), dt, tb)
            _same_bits(lowp.gemm(a, b), _ref(a, b, dt))
    _same_bits(lowp.gemm(a, b, out_dtype=F32), a.astype(F32) @ b.astype(F32))


@pytest.mark.parametrize("dt", [BF16, F16], ids=["bf16", "f16"])
def test_large_row_blocks(dt, nthreads):
    """Products past the one-tile size run as row blocks (the last one ragged) over a shared widened B."""
    rng = np.random.default_rng(5)
    for ta, tb in [(False, False), (True, False), (False, True), (True, True)]:
        a, b = _rand(rng, (403, 130), dt, ta), _rand(rng, (130, 200), dt, tb)
        _same_bits(lowp.gemm(a, b), _ref(a, b, dt))
    a, b, bias = _rand(rng, (2, 300, 96), dt), _rand(rng, (96, 160), dt, True), _rand(rng, (160,), dt)
    _same_bits(lowp.gemm(a, b, bias), _ref(a, b, dt, bias))  # B broadcast over the batch: widened once
    _same_bits(lowp.gemm(a, b, out_dtype=F32), a.astype(F32) @ b.astype(F32))


@pytest.mark.parametrize("dt", [BF16, F16], ids=["bf16", "f16"])
def test_strided_and_batched_broadcast(dt, nthreads):
    rng = np.random.default_rng(1)
    big = rng.standard_normal((40, 70)).astype(dt)
    a, b = big[::3, 1::2], big[1::2, ::5]  # neither axis contiguous: the gathering panel path
    _same_bits(lowp.gemm(a[:, :14], b[:14]), _ref(a[:, :14], b[:14], dt))
    cases = [((4, 33, 17), (4, 17, 21)), ((2, 1, 5, 8), (3, 8, 6)), ((5, 9, 7), (7, 4)), ((6, 3), (2, 3, 3, 2))]
    for sa, sb in cases:
        x, y = _rand(rng, sa, dt), _rand(rng, sb, dt, transposed=True)
        _same_bits(lowp.gemm(x, y), _ref(x, y, dt))
    x = np.broadcast_to(_rand(rng, (1, 20, 10), dt), (3, 20, 10))  # stride-0 batch dim
    y = _rand(rng, (3, 10, 30), dt)
    _same_bits(lowp.gemm(x, y), _ref(x, y, dt))
    for v1, v2 in [((5,), (5, 3)), ((3, 5), (5,)), ((2, 4, 5), (5,))]:  # vector operands, as np.matmul
        x, y = _rand(rng, v1, dt), _rand(rng, v2, dt)
        _same_bits(lowp.gemm(x, y), _ref(x, y, dt))


@pytest.mark.parametrize("dt", [BF16, F16], ids=["bf16", "f16"])
def test_bias_out_and_fallback(dt, monkeypatch):
    rng = np.random.default_rng(2)
    x, w, bias = _rand(rng, (37, 24), dt), _rand(rng, (19, 24), dt), _rand(rng, (19,), dt)
    _same_bits(lowp.gemm(x, w.T, bias), _ref(x, w.T, dt, bias))
    out = np.empty((37, 19), dt)
    assert lowp.gemm(x, w.T, bias, out=out) is out
    _same_bits(out, _ref(x, w.T, dt, bias))
    out_f = np.empty((19, 37), F32).T  # not C-contiguous: written through a temporary
    assert lowp.gemm(x, w.T, out=out_f, out_dtype=F32) is out_f
    _same_bits(np.ascontiguousarray(out_f), x.astype(F32) @ w.T.astype(F32))
    monkeypatch.setattr(threads, "BLAS_PATH", None)  # no BLAS bound: the convert-and-call path, same bits
    _same_bits(lowp.gemm(x, w.T, bias), _ref(x, w.T, dt, bias))


def test_special_values_round_like_astype():
    a = np.array([[1e30, 1.0], [np.nan, 0.0], [np.inf, 1.0], [3e-41, 0.0]], F32)
    b = np.array([[1e10, 1.0], [1.0, 1.0]], F32)
    with np.errstate(over="ignore", invalid="ignore"):  # the overflows are the point
        for dt in (BF16, F16):
            x, y = a.astype(dt), b.astype(dt)
            _same_bits(lowp.gemm(x, y), _ref(x, y, dt))


def test_errors_name_the_problem():
    a = np.ones((2, 3), BF16)
    with pytest.raises(TypeError, match="one dtype"):
        lowp.gemm(a, np.ones((3, 2), F16))
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        lowp.gemm(a.astype(F32), a.astype(F32).T)
    with pytest.raises(TypeError, match="out_dtype"):
        lowp.gemm(a, a.T, out_dtype=np.float64)
    with pytest.raises(ValueError, match="at least 1 dimension"):
        lowp.gemm(np.ones((), BF16), a)
    with pytest.raises(ValueError):
        lowp.gemm(a, a)  # (2, 3) @ (2, 3): NumPy's shape error
    from flow import _C

    u = a.view(np.uint16)
    with pytest.raises(TypeError, match="'a' must be a uint16"):
        _C.lowp_gemm(a.astype(F32), u.T, None, np.empty((2, 2), np.uint16), "bfloat16")
    with pytest.raises(ValueError, match="inner dimensions"):
        _C.lowp_gemm(u, u, None, np.empty((2, 3), np.uint16), "bfloat16")
    with pytest.raises(ValueError, match="format"):
        _C.lowp_gemm(u, u.T, None, np.empty((2, 2), np.uint16), "float8")
    with pytest.raises(ValueError, match="'out' has the wrong size"):
        _C.lowp_gemm(u, u.T, None, np.empty((3, 3), np.uint16), "bfloat16")
    with pytest.raises(ValueError, match="'bias' must be"):
        _C.lowp_gemm(u, u.T, np.zeros(5, np.uint16), np.empty((2, 2), np.uint16), "bfloat16")
    with pytest.raises(flow.errors.FlowError, match="same dtype"):
        flow.tensor(np.ones((2, 3), np.float32)).bfloat16() @ flow.tensor(np.ones((3, 2), np.float32)).half()


@pytest.mark.parametrize("dt", [D.bfloat16, D.float16], ids=["bf16", "f16"])
def test_registered_and_autograd_matches_old_path(dt, nthreads):
    """matmul / linear / bmm dispatch to the native kernel; forward and every backward product equal
    the convert-and-call path's bits."""
    assert REGISTRY.resolve_kernel(REGISTRY.ops["matmul"], "cpu", dt).__name__ == "matmul"
    npdt = dt.np
    rng = np.random.default_rng(3)
    a32, b32 = rng.standard_normal((3, 17, 9)).astype(F32), rng.standard_normal((9, 11)).astype(F32)
    a = flow.tensor(a32).to(dt).requires_grad_()
    b = flow.tensor(b32).to(dt).requires_grad_()
    y = a @ b
    an, bn = a.detach().numpy(), b.detach().numpy()
    _same_bits(y.detach().numpy(), _ref(an, bn, npdt))
    g = rng.standard_normal(y.shape).astype(npdt)
    y.backward(flow.tensor(g))
    _same_bits(a.grad.numpy(), _ref(g, np.swapaxes(bn, -1, -2), npdt))
    # the broadcast operand's gradient: per-batch products (rounded), then summed over the batch
    per = _ref(np.swapaxes(an, -1, -2), g, npdt)
    _same_bits(b.grad.numpy(), flow.tensor(per).sum(0).numpy())

    x = flow.tensor(rng.standard_normal((13, 24)).astype(F32)).to(dt).requires_grad_()
    w = flow.tensor(rng.standard_normal((7, 24)).astype(F32)).to(dt).requires_grad_()
    bias = flow.tensor(rng.standard_normal(7).astype(F32)).to(dt).requires_grad_()
    out = F.linear(x, w, bias)
    xn, wn, bn_ = x.detach().numpy(), w.detach().numpy(), bias.detach().numpy()
    _same_bits(out.detach().numpy(), _ref(xn, wn.T, npdt, bn_))
    g = rng.standard_normal((13, 7)).astype(npdt)
    out.backward(flow.tensor(g))
    _same_bits(x.grad.numpy(), _ref(g, wn, npdt))
    _same_bits(w.grad.numpy(), _ref(g.T, xn, npdt))

    p = flow.tensor(rng.standard_normal((4, 6, 5)).astype(F32)).to(dt)
    q = flow.tensor(rng.standard_normal((4, 5, 3)).astype(F32)).to(dt)
    _same_bits(flow.bmm(p, q).numpy(), _ref(p.numpy(), q.numpy(), npdt))


def test_close_to_torch_bf16():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    a32, b32 = rng.standard_normal((2, 64, 96)).astype(F32), rng.standard_normal((2, 96, 48)).astype(F32)
    got = (flow.tensor(a32).bfloat16() @ flow.tensor(b32).bfloat16()).float().numpy()
    ref = (torch.from_numpy(a32).bfloat16() @ torch.from_numpy(b32).bfloat16()).float().numpy()
    # both accumulate in float32 and round once: at most one bfloat16 ulp apart
    np.testing.assert_allclose(got, ref, rtol=2**-7, atol=1e-6)
    x, w = torch.from_numpy(a32[0]).bfloat16(), torch.from_numpy(b32[0].T.copy()).bfloat16()
    got = F.linear(flow.tensor(a32[0]).bfloat16(), flow.tensor(b32[0].T.copy()).bfloat16()).float().numpy()
    np.testing.assert_allclose(got, torch.nn.functional.linear(x, w).float().numpy(), rtol=2**-7, atol=1e-6)
