"""The cost of flow-dist's collective header check: all-reduce time with FLOW_COMM_CHECK=1 vs 0.

    mpiexec -n 2 python -m mpi4py benchmarks/comm_check.py

Each rank times `repeats` all-reduces of a 4-byte and a 4 MB float32 array with the check on and
off, alternating blocks of 50 calls; rank 0 prints the medians (microseconds per call) and the
check's share.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from flow_dist.comm.backend import get_backend

b = get_backend("cpu")
rows = []
for nbytes in (4, 4 << 20):
    a = np.ones(nbytes // 4, dtype=np.float32)
    per = {"1": [], "0": []}
    for block in range(20):
        for flag in ("1", "0") if block % 2 == 0 else ("0", "1"):
            os.environ["FLOW_COMM_CHECK"] = flag
            b.barrier()
            start = time.perf_counter()
            for _ in range(50):
                b.all_reduce(a)
            per[flag].append((time.perf_counter() - start) / 50)
    on, off = statistics.median(per["1"]) * 1e6, statistics.median(per["0"]) * 1e6
    rows.append((nbytes, on, off))
if b.rank == 0:
    print(f"{'bytes':>10}{'check on us':>14}{'check off us':>14}{'cost us':>10}{'share':>8}")
    for nbytes, on, off in rows:
        print(f"{nbytes:>10}{on:>14.1f}{off:>14.1f}{on - off:>10.1f}{(on - off) / on * 100:>7.0f}%")
