"""The CPU threading policy: one thread pool, flow's own OpenMP one.

NumPy's OpenBLAS keeps a pthread pool of its own next to the OpenMP pool of flow's native kernels;
the two alternate all through a training step and each one's idle, spinning threads take the cores
the other is about to use (ResNet-18 used 4x the CPU time at 2 threads that it used at 1). So:

* OpenBLAS runs single-threaded by default (:func:`install`, when flow's native kernels load);
* parallelism is at op level, in flow's OpenMP pool: convolution over batch chunks, batch norm over
  channels, elementwise and fused kernels over rows, each thread calling single-threaded GEMM
  through the BLAS NumPy already loaded (its exported CBLAS symbols, bound by ``flow._C.blas_init``:
  no second BLAS library is ever loaded);
* OpenBLAS's threads are raised only around a large standalone GEMM (:func:`blas_threads`,
  :func:`matmul`), to :func:`flow.get_num_threads`, and put back to one after it.

OpenBLAS's thread count is process-wide (``openblas_set_num_threads_local`` is global too in the
pthreads build NumPy ships), so :func:`blas_threads` sets and restores it; flow runs its ops one at
a time on the calling thread, which is what makes that per call.

Without a recognised OpenBLAS (another BLAS, or not Linux) :data:`BLAS_PATH` is ``None``, nothing is
changed and the convolution kernels use NumPy's matmul.
"""

from __future__ import annotations

import contextlib
import ctypes
import operator
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "BLAS_PATH",
    "LARGE_GEMM",
    "blas_get_num_threads",
    "blas_set_num_threads",
    "blas_threads",
    "gemm_threads",
    "install",
    "matmul",
]

# Multiply-adds (m * n * k) from which a lone GEMM gets OpenBLAS's threads: below it (~1 ms on one
# core) waking the pool costs a visible share of the product.
LARGE_GEMM = 1 << 24

# (sgemm, dgemm, set_num_threads, get_num_threads) of the OpenBLAS builds NumPy wheels bundle: the
# ILP64 scipy-openblas of NumPy 2.x, then the ILP64 openblas64_ of older wheels. The C side takes
# 64-bit dimensions, so 32-bit-int builds are deliberately not listed.
_SYMBOLS = (
    (
        "scipy_cblas_sgemm64_",
        "scipy_cblas_dgemm64_",
        "scipy_openblas_set_num_threads64_",
        "scipy_openblas_get_num_threads64_",
    ),
    ("cblas_sgemm64_", "cblas_dgemm64_", "openblas_set_num_threads64_", "openblas_get_num_threads64_"),
)

BLAS_PATH: str | None = None  # the library install() bound, None until then or if none was found
_LIB: Any = None
_NAMES: tuple[str, str, str, str] | None = None
_NATIVE: Any = None  # flow._C, once install() ran


def _loaded_openblas() -> tuple[str, Any, tuple[str, str, str, str]] | None:
    """The OpenBLAS NumPy loaded: (path, ctypes handle, symbol names), or None."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split(None, 5)[5].strip() for line in fh if line.count(" ") >= 5 and "openblas" in line}
    except OSError:  # no /proc (not Linux)
        return None
    for path in sorted(paths):
        if not os.path.isfile(path):
            continue
        try:
            # RTLD_NOLOAD: the copy already mapped or nothing, never a second BLAS
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        for names in _SYMBOLS:
            if all(hasattr(lib, n) for n in names):
                return path, lib, names
    return None


def install(native: Any) -> bool:
    """Apply the policy: bind ``native`` (``flow._C``) to NumPy's OpenBLAS and make it single-threaded.

    Returns whether a BLAS was bound. Called once when :mod:`flow.backends.cpu.native` loads; calling
    it again only sets OpenBLAS back to one thread.
    """
    global BLAS_PATH, _LIB, _NAMES, _NATIVE
    if _LIB is None:
        found = _loaded_openblas()
        if found is None:
            return False
        path, lib, names = found
        lib[names[2]].argtypes = [ctypes.c_int]
        lib[names[2]].restype = None
        lib[names[3]].restype = ctypes.c_int
        native.blas_init(path, *names)
        BLAS_PATH, _LIB, _NAMES, _NATIVE = path, lib, names, native
    blas_set_num_threads(1)
    return True


def blas_get_num_threads() -> int:
    """OpenBLAS's current thread count (1 when no OpenBLAS is bound)."""
    return int(_LIB[_NAMES[3]]()) if _LIB is not None else 1


def blas_set_num_threads(n: int) -> None:
    """Set OpenBLAS's thread count (process-wide); does nothing when no OpenBLAS is bound."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"blas_set_num_threads expects an int, but got {type(n).__name__}")
    n = operator.index(n)
    if n <= 0:
        raise ValueError(f"blas_set_num_threads expects a positive integer, got {n}")
    if _LIB is not None:
        _LIB[_NAMES[2]](n)


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """OpenBLAS at ``n`` threads inside the block, its previous count restored after (even on error)."""
    prev = blas_get_num_threads()
    if n == prev:
        yield
        return
    blas_set_num_threads(n)
    try:
        yield
    finally:
        blas_set_num_threads(prev)


def gemm_threads(m: int, n: int, k: int) -> int:
    """OpenBLAS threads for a standalone (m, k) @ (k, n) product: flow's thread count when large, else 1."""
    if m * n * k < LARGE_GEMM or _NATIVE is None:
        return 1
    return max(1, int(_NATIVE.get_num_threads()))


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b, out=out)`` with OpenBLAS's threads raised for this call when the product is large."""
    if a.ndim < 2 or b.ndim < 2:  # vector products are not GEMMs (and are small)
        return np.matmul(a, b, out=out)
    # NumPy runs a batched product as one GEMM per matrix: the size of one decides (OpenBLAS's threads
    # do not pay for many small GEMMs)
    n = gemm_threads(a.shape[-2], b.shape[-1], a.shape[-1])
    with blas_threads(n):
        return np.matmul(a, b, out=out)
