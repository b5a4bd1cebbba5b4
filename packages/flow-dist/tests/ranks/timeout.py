"""Run under mpiexec -n 2 with FLOW_COMM_TIMEOUT=1: rank 1 never joins an all-reduce; rank 0
raises CommTimeoutError after about a second. Prints "timeout ok <seconds>" on rank 0."""

import os
import time

import numpy as np

from flow_dist import env
from flow_dist.comm import CommTimeoutError
from flow_dist.comm.backend import get_backend

b = get_backend("cpu")
if env.get_rank() == 0:
    t = time.monotonic()
    try:
        b.all_reduce(np.ones(4))
        raise SystemExit("no timeout")
    except CommTimeoutError as e:
        took = time.monotonic() - t
        assert "FLOW_COMM_TIMEOUT=1" in str(e) and "unknown state" in str(e), str(e)
        print(f"timeout ok {took:.1f}", flush=True)
    os._exit(0)  # the abandoned collective would keep MPI from finalising
else:
    time.sleep(3)
    os._exit(0)
