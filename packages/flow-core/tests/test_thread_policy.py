"""The CPU threading policy (flow.backends.cpu.threads): one thread pool, OpenBLAS single-threaded,
GEMM called from flow's OpenMP threads; thread-count semantics as in PyTorch."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import flow
from flow.backends.cpu import conv, native, threads

needs_blas = pytest.mark.skipif(
    not native.HAVE_NATIVE or threads.BLAS_PATH is None, reason="flow._C not built or NumPy's OpenBLAS not found"
)


@pytest.fixture
def nthreads():
    """Run a test at a given flow thread count, restoring the previous one after."""
    prev = flow.get_num_threads()
    yield flow.set_num_threads
    flow.set_num_threads(prev)


def _rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- flow.set_num_threads & co, as in PyTorch --------------------------------------------------------------
def test_set_get_num_threads_round_trip(nthreads):
    torch = pytest.importorskip("torch")
    prev_t = torch.get_num_threads()
    try:
        for n in (1, 3, 2):
            nthreads(n)
            torch.set_num_threads(n)
            assert flow.get_num_threads() == torch.get_num_threads() == n
    finally:
        torch.set_num_threads(prev_t)


def test_set_num_interop_threads_records_value():
    prev = flow.get_num_interop_threads()
    flow.set_num_interop_threads(3)
    try:
        assert flow.get_num_interop_threads() == 3
    finally:
        flow.set_num_interop_threads(prev)


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", None, True])
@pytest.mark.parametrize("fn", ["set_num_threads", "set_num_interop_threads"])
def test_bad_thread_counts_raise_like_torch(fn, bad, nthreads):
    torch = pytest.importorskip("torch")
    before = flow.get_num_threads(), flow.get_num_interop_threads()
    with pytest.raises((TypeError, ValueError), match=fn):
        getattr(flow, fn)(bad)
    assert (flow.get_num_threads(), flow.get_num_interop_threads()) == before  # nothing changed
    if fn == "set_num_threads" and bad is not True:  # torch takes True as 1; flow refuses a bool
        prev = torch.get_num_threads()
        with pytest.raises((TypeError, ValueError, RuntimeError)):
            torch.set_num_threads(bad)
        assert torch.get_num_threads() == prev


# -- OpenBLAS: one library, single-threaded, 1 inside flow's regions -----------------------------------------
@needs_blas
def test_only_numpys_blas_is_mapped():
    # a fresh process: other tests may import libraries that bring BLAS builds of their own
    code = (
        "import os, flow\nfrom flow.backends.cpu import native, threads\n"
        "libs = {l.split()[-1] for l in open('/proc/self/maps') if 'blas' in os.path.basename(l.split()[-1]).lower()}\n"
        "print(sorted(libs) == [threads.BLAS_PATH], threads.blas_get_num_threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "1"]


@needs_blas
def test_openblas_single_threaded_by_default(nthreads):
    nthreads(2)
    assert threads.blas_get_num_threads() == 1
    np.ones((64, 64), np.float32) @ np.ones((64, 64), np.float32)
    assert threads.blas_get_num_threads() == 1


@needs_blas
def test_openblas_is_one_inside_parallel_regions_and_restored(nthreads):
    nthreads(2)
    with threads.blas_threads(2):
        assert threads.blas_get_num_threads() == 2
        seen, team = native._C.blas_threads_in_parallel()
        assert seen == 1  # every OpenMP thread of the region saw a single-threaded BLAS
        assert team == 2
        assert threads.blas_get_num_threads() == 2  # put back after the region
    assert threads.blas_get_num_threads() == 1


@needs_blas
def test_blas_threads_restores_on_error():
    with pytest.raises(KeyError):
        with threads.blas_threads(2):
            raise KeyError("x")
    assert threads.blas_get_num_threads() == 1


@needs_blas
def test_large_standalone_gemm_gets_flow_threads(nthreads, monkeypatch):
    nthreads(2)
    assert threads.gemm_threads(64, 64, 64) == 1
    assert threads.gemm_threads(1024, 1024, 1024) == 2
    seen = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda *a, **k: seen.append(threads.blas_get_num_threads()) or real(*a, **k))
    a, b = _rand((512, 256), 0), _rand((256, 512), 1)
    np.testing.assert_array_equal(threads.matmul(a, b), real(a, b))
    small = threads.matmul(a[:8, :8], b[:8, :8])
    np.testing.assert_allclose(small, a[:8, :8] @ b[:8, :8], rtol=1e-6)
    assert seen == [2, 1] and threads.blas_get_num_threads() == 1


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1, ValueError), (1.0, TypeError), (False, TypeError)])
def test_blas_set_num_threads_rejects_bad_counts(bad, exc):
    with pytest.raises(exc, match="blas_set_num_threads"):
        threads.blas_set_num_threads(bad)


@needs_blas
def test_policy_can_be_turned_off():
    code = (
        "import numpy, flow\nfrom flow.backends.cpu import native, threads\n"
        "print(threads.BLAS_PATH is None, threads.blas_get_num_threads())"
    )
    env = dict(os.environ, FLOW_CPU_THREAD_POLICY="0", OPENBLAS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "1"]  # not bound: the policy neither reads nor sets OpenBLAS


# -- one-call conv kernels: values vs torch, identical at 1 and 2 threads -------------------------------------
CONV_CASES = [
    dict(n=4, c=3, h=16, o=8, k=3, stride=(1, 1), pad=(1, 1, 1, 1), dil=(1, 1)),  # per-image tasks
    dict(n=19, c=16, h=4, o=40, k=3, stride=(2, 2), pad=(1, 1, 1, 1), dil=(1, 1)),  # batched tasks, 2 row blocks
    dict(n=3, c=5, h=7, o=6, k=1, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1)),  # 1x1: the image is its columns
    dict(n=2, c=3, h=9, o=4, k=3, stride=(2, 1), pad=(2, 0, 1, 1), dil=(2, 1)),  # uneven padding, dilation
    dict(n=0, c=3, h=5, o=4, k=3, stride=(1, 1), pad=(1, 1, 1, 1), dil=(1, 1)),  # empty batch
]


def _conv_all(case, dtype):
    x = _rand((case["n"], case["c"], case["h"], case["h"]), 0, dtype)
    w = _rand((case["o"], case["c"], case["k"], case["k"]), 1, dtype)
    b = _rand((case["o"],), 2, dtype)
    at = (case["stride"], case["pad"], case["dil"])
    y = conv.conv2d_forward(x, w, b, *at, 1)
    g = _rand(y.shape, 3, dtype)
    dx = conv.conv2d_backward_input(g, w, x.shape[2:], *at, 1)
    dw = conv.conv2d_backward_weight(g, x, w.shape[2:], *at, 1)
    return x, w, b, g, y, dx, dw


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"n{c['n']}k{c['k']}s{c['stride'][0]}")
def test_conv_matches_torch(case, dtype):
    torch = pytest.importorskip("torch")
    x, w, b, g, y, dx, dw = _conv_all(case, dtype)
    pt, pb, pl, pr = case["pad"]
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    yt = torch.nn.functional.conv2d(
        torch.nn.functional.pad(xt, (pl, pr, pt, pb)), wt, torch.tensor(b), stride=case["stride"], dilation=case["dil"]
    )
    yt.backward(torch.tensor(g))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(y, yt.detach().numpy(), **tol)
    np.testing.assert_allclose(dx, xt.grad.numpy(), **tol)
    np.testing.assert_allclose(dw, wt.grad.numpy(), **tol)


@needs_blas
@pytest.mark.parametrize("case", CONV_CASES[:4], ids=lambda c: f"n{c['n']}k{c['k']}s{c['stride'][0]}")
def test_conv_identical_at_1_and_2_threads(case, nthreads):
    nthreads(1)
    one = _conv_all(case, np.float32)[4:]
    nthreads(2)
    two = _conv_all(case, np.float32)[4:]
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@needs_blas
def test_batch_norm_and_matmul_identical_at_1_and_2_threads(nthreads):
    x, g = _rand((16, 32, 64), 0), _rand((16, 32, 64), 1)
    w, b = _rand((32,), 2), _rand((32,), 3)
    a, m = _rand((384, 320), 4), _rand((320, 448), 5)
    res = []
    for n in (1, 2):
        nthreads(n)
        y, mean, invstd = native.batch_norm_forward(x, w, b)
        res.append((y, mean, invstd, *native.batch_norm_backward(g, x, w, mean, invstd), threads.matmul(a, m)))
    for u, v in zip(*res):
        np.testing.assert_array_equal(u, v)


# -- errors of the native entry points ----------------------------------------------------------------------
@needs_blas
def test_conv_kernels_reject_bad_arguments():
    x, w = _rand((2, 3, 5, 5), 0), _rand((4, 27), 1)
    out = np.empty((2, 4, 25), np.float32)
    geo = (3, 3, 1, 1, 1, 1, 1, 1, 5, 5)
    native._C.conv2d_gemm_forward(x, w, out, *geo, 1)  # the valid call
    with pytest.raises(ValueError, match="images per task"):
        native._C.conv2d_gemm_forward(x, w, out, *geo, 0)
    with pytest.raises(ValueError, match="'w' must have 27 columns"):
        native._C.conv2d_gemm_forward(x, w[:, :20].copy(), out, *geo, 1)
    with pytest.raises(ValueError, match=r"shape \(2, 4, 25\)"):
        native._C.conv2d_gemm_forward(x, w, np.empty((2, 4, 24), np.float32), *geo, 1)
    with pytest.raises(TypeError):
        native._C.conv2d_gemm_forward(x.astype(np.float64), w, out, *geo, 1)
    with pytest.raises(ValueError, match="stride"):
        native._C.conv2d_gemm_backward_weight(out, x, w.copy(), 3, 3, 0, 1, 1, 1, 1, 1, 5, 5, 1)


@needs_blas
def test_blas_init_refuses_a_library_not_loaded(tmp_path):
    fake = tmp_path / "libnotblas.so"
    fake.write_bytes(b"")
    with pytest.raises(ValueError, match="not loaded"):
        native._C.blas_init(str(fake), "a", "b", "c", "d")
    assert native._C.blas_ready()  # the bound BLAS is kept
