"""For the launcher's fault test: rank 1 raises while rank 0 waits in a collective forever (the
marker argument names the job's processes for pgrep)."""

import sys
import time

import numpy as np

from flow_dist import env
from flow_dist.comm.backend import get_backend

marker = sys.argv[1]
if env.get_rank() == 1:
    time.sleep(0.2)
    raise ValueError(f"boom from rank 1 ({marker})")
get_backend("cpu").all_reduce(np.ones(3))  # never completes: rank 1 is gone
print("rank 0 should not get here", flush=True)
