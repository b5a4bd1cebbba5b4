"""Helpers shared by the benchmarks: thread setup, the machine's description, timing and memory.

Import this module before NumPy, PyTorch or flow: it sets the thread-count variables that their
thread pools read when they start (``setdefault``: a value already in the environment wins).
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import sys
import time

THREADS = 2
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

for _var in THREAD_VARS:
    os.environ.setdefault(_var, str(THREADS))

TIMERS = {"wall": time.perf_counter, "cpu": time.process_time}


# -- frameworks ---------------------------------------------------------------------------------
def setup_flow(threads: int = THREADS):
    """Import flow with its native kernels' OpenMP pool at ``threads`` threads."""
    import flow

    try:
        from flow.backends.cpu import native

        if native.HAVE_NATIVE:
            native.set_num_threads(threads)
    except ImportError:
        pass
    return flow


def setup_torch(threads: int = THREADS):
    import torch

    torch.set_num_threads(threads)
    return torch


def setup(framework: str, threads: int = THREADS):
    """The module of ``framework`` ('flow' or 'torch'), set up to use ``threads`` threads."""
    if framework == "flow":
        return setup_flow(threads)
    if framework == "torch":
        return setup_torch(threads)
    raise ValueError(f"unknown framework {framework!r} (expected 'flow' or 'torch')")


# -- the machine ----------------------------------------------------------------------------------
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_kernel() -> str:
    """NumPy's BLAS and the kernel it runs (as threadpoolctl reports it), e.g. 'openblas 0.3.31 SkylakeX, 2 threads'."""
    try:
        import numpy as np
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    del np
    for info in threadpool_info():
        if info.get("user_api") == "blas":
            arch = info.get("architecture") or "?"
            return f"{info.get('internal_api')} {info.get('version')} {arch}, {info.get('num_threads')} threads"
    return "unknown"


def machine_info() -> dict:
    """What the figures were measured on (imports NumPy; call it in the process that times)."""
    import numpy as np

    info = {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": THREADS,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas_kernel(),
    }
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if os.environ.get(var):
            info[var] = os.environ[var]
    return info


# -- time -----------------------------------------------------------------------------------------
def time_steps(step, steps: int, warmup: int, timer: str = "wall") -> list[float]:
    """Seconds of each of ``steps`` calls of ``step()`` after ``warmup`` untimed calls."""
    clock = TIMERS[timer]
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = clock()
        step()
        times.append(clock() - t0)
    return times


def median(xs) -> float:
    return statistics.median(xs)


# -- memory ---------------------------------------------------------------------------------------
def current_rss() -> int:
    """This process's resident set size now, in bytes (Linux: /proc/self/statm)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss()


def peak_rss() -> int:
    """This process's resident set size high-water mark so far, in bytes (getrusage's ru_maxrss)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024  # bytes on macOS, KiB elsewhere


def mib(n: float) -> float:
    return n / (1 << 20)
