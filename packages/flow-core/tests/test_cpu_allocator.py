"""The CPU caching allocator (csrc/allocator.cpp, flow.cpu.memory): a NumPy memory handler that keeps
freed blocks of 64 KiB and more per size bucket for reuse."""

from __future__ import annotations

import contextvars
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import flow
from flow.backends.cpu import native

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # NumPy 1.x
    from numpy.core.multiarray import get_handler_name

pytestmark = pytest.mark.skipif(not native.HAVE_NATIVE, reason="flow._C not built")
OURS = "flow_caching_allocator"
MIN = 64 << 10


def stats() -> dict:
    return flow.cpu.memory_stats()


def bucket(n: int) -> int:
    """The bucket the design promises: the next multiple of a quarter of the power of two below n."""
    p = n.bit_length() - 1
    step = 1 << (p - 2)
    return -(-n // step) * step


@pytest.fixture(autouse=True)
def cache_on():
    """Every test starts with the allocator installed and an empty cache, and leaves it so."""
    if os.environ.get("FLOW_CPU_CACHING_ALLOCATOR", "1") == "0":
        pytest.skip("FLOW_CPU_CACHING_ALLOCATOR=0")
    flow.cpu.set_caching_allocator(True)
    limit = stats()["limit_bytes"]
    flow.cpu.empty_cache()
    yield
    flow.cpu.set_caching_allocator(True)
    flow.cpu.set_per_process_cache_limit(limit)
    flow.cpu.empty_cache()


def test_installed_when_kernels_load():
    assert get_handler_name() == OURS
    assert get_handler_name(np.empty(10)) == OURS
    assert flow.cpu.is_caching_allocator_enabled()
    assert flow.cpu.is_available() and flow.cpu.device_count() == 1 and flow.cpu.current_device() == "cpu"
    flow.cpu.synchronize()


def test_buckets():
    from flow import _C

    assert _C.alloc_bucket(100) == 100  # small: not bucketed
    for n in (MIN, MIN + 1, 81920, 100_000, 1 << 20, (1 << 20) + 1, 3_000_000, (1 << 30) + 5):
        b = _C.alloc_bucket(n)
        assert b == bucket(n) and n <= b < n * 1.25 + 1
    assert [_C.alloc_bucket(MIN * k // 4) for k in (4, 5, 6, 7, 8, 9)] == [MIN * k // 4 for k in (4, 5, 6, 7, 8, 10)]


def test_reuse_hits_the_same_block():
    n = 1 << 20
    a = np.empty(n, np.uint8)
    addr = a.ctypes.data
    s0 = stats()
    del a
    s1 = stats()
    assert s1["cached_bytes.current"] == s0["cached_bytes.current"] + n
    assert s1["num_frees"] == s0["num_frees"] + 1
    b = np.empty(n - 1000, np.uint8)  # same bucket
    s2 = stats()
    assert b.ctypes.data == addr
    assert s2["num_cache_hits"] == s1["num_cache_hits"] + 1
    assert s2["num_cache_misses"] == s1["num_cache_misses"]
    assert s2["cached_bytes.current"] == s0["cached_bytes.current"]
    c = np.empty(n, np.uint8)  # a second live block of that bucket is a miss
    assert c.ctypes.data != addr
    assert stats()["num_cache_misses"] == s2["num_cache_misses"] + 1


def test_calloc_zeroes_a_reused_block():
    n = 3 << 20
    a = np.empty(n, np.uint8)
    a[:] = 0xAB
    addr = a.ctypes.data
    del a
    z = np.zeros(n // 8, np.float64)
    assert z.ctypes.data == addr
    assert not z.any()
    z[:] = 7.0  # and a fresh calloc after the cache is emptied is zero too
    del z
    flow.cpu.empty_cache()
    assert not np.zeros(n, np.uint8).any()


def test_stats_arithmetic():
    s0 = stats()
    sizes = [70_000, 1 << 20, 5_000_000, 200_000]
    arrs = [np.empty(n, np.uint8) for n in sizes]
    s1 = stats()
    assert s1["allocated_bytes.current"] - s0["allocated_bytes.current"] == sum(map(bucket, sizes))
    assert s1["requested_bytes.current"] - s0["requested_bytes.current"] == sum(sizes)
    assert s1["active_blocks.current"] - s0["active_blocks.current"] == len(sizes)
    assert s1["num_allocs"] - s0["num_allocs"] == len(sizes)
    for s in (s0, s1):
        assert s["num_allocs"] == s["num_cache_hits"] + s["num_cache_misses"]
        assert s["reserved_bytes.current"] == s["allocated_bytes.current"] + s["cached_bytes.current"]
        assert s["allocated_bytes.peak"] >= s["allocated_bytes.current"]
        assert s["reserved_bytes.peak"] >= s["reserved_bytes.current"]
    del arrs
    s2 = stats()
    assert s2["allocated_bytes.current"] == s0["allocated_bytes.current"]
    assert s2["cached_bytes.current"] - s0["cached_bytes.current"] == sum(map(bucket, sizes))
    assert s2["cached_blocks.current"] - s0["cached_blocks.current"] == len(sizes)
    assert s2["allocated_bytes.peak"] >= s1["allocated_bytes.current"]
    assert flow.cpu.memory_allocated() == s2["allocated_bytes.current"]
    assert flow.cpu.memory_reserved() == s2["reserved_bytes.current"]
    flow.cpu.reset_peak_memory_stats()
    assert flow.cpu.max_memory_allocated() == flow.cpu.memory_allocated()
    assert flow.cpu.max_memory_reserved() == flow.cpu.memory_reserved()
    assert flow.cpu.empty_cache() == s2["cached_bytes.current"]
    assert stats()["cached_bytes.current"] == 0 and stats()["cached_buckets.current"] == 0


def test_cap_is_enforced_and_empty_cache_returns_memory():
    flow.cpu.set_per_process_cache_limit(1 << 20)
    assert stats()["limit_bytes"] == 1 << 20
    r0 = stats()["num_releases"]
    arrs = [np.empty(512 << 10, np.uint8) for _ in range(3)]
    del arrs
    s = stats()
    assert s["cached_bytes.current"] == 1 << 20  # two kept, the third returned to the OS
    assert s["num_releases"] == r0 + 1
    big = np.empty(4 << 20, np.uint8)  # larger than the whole cap: never cached
    del big
    assert stats()["num_releases"] == r0 + 2 and stats()["cached_bytes.current"] == 1 << 20
    flow.cpu.set_per_process_cache_limit(0)  # lowering the cap trims at once
    s = stats()
    assert s["cached_bytes.current"] == 0 and s["reserved_bytes.current"] == s["allocated_bytes.current"]


def test_big_tiny_and_zero_size_arrays():
    small0 = stats()["num_small_allocs"]
    alloc0 = stats()["allocated_bytes.current"]
    tiny = np.ones(5, np.uint8)
    empty = np.empty((0, 7), np.float32)
    assert stats()["num_small_allocs"] >= small0 + 2
    assert stats()["allocated_bytes.current"] == alloc0
    assert tiny.sum() == 5 and empty.size == 0 and (empty @ np.ones((7, 2), np.float32)).shape == (0, 2)
    big = np.ones(64 << 20, np.uint8)  # 64 MiB
    assert big[::4096].sum() == (64 << 20) // 4096
    assert stats()["allocated_bytes.current"] == alloc0 + bucket(64 << 20)
    del big, tiny, empty


def test_views_keep_their_base_alive():
    a = np.arange(1 << 18, dtype=np.float64)
    addr = a.ctypes.data
    v = a[1000:2000]
    del a
    b = np.empty(1 << 18, np.float64)  # the block is still in use by the view's base: not reused
    b[:] = -1
    assert b.ctypes.data != addr
    np.testing.assert_array_equal(v, np.arange(1000, 2000, dtype=np.float64))
    del v
    assert np.empty(1 << 18, np.float64).ctypes.data == addr  # now it is free, and reused


def test_arrays_outlive_switching_off():
    a = np.ones(1 << 20, np.float32)
    assert get_handler_name(a) == OURS
    flow.cpu.set_caching_allocator(False)
    assert get_handler_name() == "default_allocator" and not flow.cpu.is_caching_allocator_enabled()
    b = np.ones(1 << 20, np.float32)
    assert get_handler_name(b) == "default_allocator" and get_handler_name(a) == OURS
    s0 = stats()
    del a  # freed by the handler that allocated it, which now returns the block to the OS
    s1 = stats()
    assert s1["num_frees"] == s0["num_frees"] + 1 and s1["num_releases"] == s0["num_releases"] + 1
    assert s1["cached_bytes.current"] == 0
    del b
    assert stats()["num_frees"] == s1["num_frees"]  # b never was the cache's
    flow.cpu.set_caching_allocator(True)
    assert get_handler_name(np.empty(1 << 20)) == OURS


def test_resize_in_place_goes_through_realloc():
    a = np.arange(100_000, dtype=np.int64)  # 800 kB: a cache block
    a.resize(300_000, refcheck=False)  # grows into another bucket
    np.testing.assert_array_equal(a[:100_000], np.arange(100_000))
    assert not a[100_000:].any()  # NumPy zero-fills the new part
    a.resize(1000, refcheck=False)  # shrinks to a malloc-sized block
    np.testing.assert_array_equal(a, np.arange(1000))
    s = np.arange(10, dtype=np.int64)
    s.resize(50_000, refcheck=False)  # malloc block grown past the threshold: stays malloc's
    np.testing.assert_array_equal(s[:10], np.arange(10))


def test_threads():
    """Arrays allocated in one thread and freed in another; threads opting in allocate concurrently."""
    s0 = stats()
    shared = [np.full(1 << 17, i, np.float64) for i in range(8)]
    errors: list[BaseException] = []
    names: list[str] = []

    def work(i: int) -> None:
        try:
            names.append(get_handler_name())  # a new thread starts with NumPy's default handler
            flow.cpu.set_caching_allocator(True)
            assert shared[i][123] == i
            shared[i] = None  # the main thread's block, freed here
            for k in range(150):
                x = np.full((1 + k % 5) << 15, float(i), np.float64)
                assert get_handler_name(x) == OURS and x[-1] == i and x.sum() == i * x.size
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert names == ["default_allocator"] * 8
    s1 = stats()
    assert s1["allocated_bytes.current"] == s0["allocated_bytes.current"]
    assert s1["num_allocs"] - s0["num_allocs"] == s1["num_frees"] - s0["num_frees"] == 8 + 8 * 150
    assert s1["num_cache_hits"] > s0["num_cache_hits"]
    # a context copied from an opted-in thread carries the handler with it
    assert contextvars.copy_context().run(get_handler_name) == OURS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_another_thread_allocates():
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            np.empty(1 << 20, np.uint8)

    flow.cpu.set_caching_allocator(True)
    t = threading.Thread(target=lambda: (flow.cpu.set_caching_allocator(True), churn()))
    t.start()
    try:
        for _ in range(5):
            pid = os.fork()
            if pid == 0:  # the child: the cache's lock must be free, its blocks usable
                ok = np.ones(1 << 20, np.uint8).sum() == 1 << 20 and flow.cpu.memory_stats()["num_allocs"] > 0
                os._exit(0 if ok else 1)
            deadline = time.monotonic() + 30  # a child stuck on a lock held at fork time fails, not hangs
            while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            if done[0] == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("forked child deadlocked in the allocator")
            assert os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        stop.set()
        t.join()


def _train(steps: int = 3) -> list[float]:
    flow.manual_seed(0)
    m = flow.nn.Sequential(
        flow.nn.Conv2d(3, 16, 3, padding=1), flow.nn.BatchNorm2d(16), flow.nn.ReLU(), flow.nn.Flatten(),
        flow.nn.Linear(16 * 16 * 16, 10),
    )  # fmt: skip
    opt = flow.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    x = flow.randn(8, 3, 16, 16)
    y = flow.randint(0, 10, (8,))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = flow.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses + [float(p.detach().numpy().astype(np.float64).sum()) for p in m.parameters()]


def test_training_step_identical_on_and_off():
    h0 = stats()["num_cache_hits"]
    on = _train()
    assert stats()["num_cache_hits"] > h0  # the step's buffers did come from the cache
    flow.cpu.set_caching_allocator(False)
    off = _train()
    flow.cpu.set_caching_allocator(True)
    assert on == off


def test_graph_arena_goes_through_the_handler():
    from flow.graph.pass_tables import arena_rule

    arena = arena_rule("cpu").allocate(1 << 20, 64)
    assert arena.ctypes.data % 64 == 0
    assert get_handler_name(arena.base) == OURS


def test_bad_input():
    with pytest.raises(TypeError, match="enabled must be a bool"):
        flow.cpu.set_caching_allocator(1)
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        flow.cpu.set_per_process_cache_limit(-1)
    with pytest.raises(TypeError, match="nbytes must be an int"):
        flow.cpu.set_per_process_cache_limit(1.5)


def test_environment_switches(monkeypatch):
    from flow import _C
    from flow.cpu import memory

    monkeypatch.setenv("FLOW_CPU_CACHE_MB", "1.5")
    assert memory.install(_C) == OURS  # already there: left as it is
    assert stats()["limit_bytes"] == 3 << 19
    monkeypatch.setenv("FLOW_CPU_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="FLOW_CPU_CACHE_MB must be a number of megabytes, got 'lots'"):
        memory.install(_C)
    monkeypatch.setenv("FLOW_CPU_CACHE_MB", "-3")
    with pytest.raises(ValueError, match="FLOW_CPU_CACHE_MB must be >= 0"):
        memory.install(_C)
    monkeypatch.delenv("FLOW_CPU_CACHE_MB")
    assert 0 < memory._default_limit_bytes() <= memory.DEFAULT_CACHE_MB << 20
    # switched off before flow loads its kernels: NumPy's default handler stays
    code = (
        "import numpy as np, flow\nfrom flow.backends.cpu import native\n"
        "from numpy.lib import NumpyVersion\n"
        "mod = np._core.multiarray if NumpyVersion(np.__version__) >= '2.0.0' else np.core.multiarray\n"
        "print(mod.get_handler_name(), flow.cpu.memory_stats()['caching'])"
    )
    env = {**os.environ, "FLOW_CPU_CACHING_ALLOCATOR": "0"}
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["default_allocator", "False"]
