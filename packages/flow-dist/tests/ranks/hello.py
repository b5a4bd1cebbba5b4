"""For the launcher's tests: each rank prints its rank, the world size and its arguments; with
``--exit N`` every rank exits with status N."""

import sys

from flow_dist import env

args = sys.argv[1:]
print(f"hello rank {env.get_rank()} of {env.get_world_size()} args {args}", flush=True)
if "--exit" in args:
    sys.exit(int(args[args.index("--exit") + 1]))
