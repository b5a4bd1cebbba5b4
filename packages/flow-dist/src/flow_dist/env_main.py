"""``python -m flow_dist.env_main``: print this process's rank and the world size (to check a launch)."""

from flow_dist import env

print(f"rank={env.get_rank()}/{env.get_world_size()}", flush=True)
