"""Run under mpiexec with a path: a global module saved with global_dst_rank=0 holds logical
values, only rank 0 writes, and it loads (global_src_rank=0) into another layout; saving global
tensors without global_dst_rank is a clear error on every rank. With ``--load-only`` it loads what
a run at another world size saved. Prints "checkpoint ok"."""

import sys

import numpy as np

import flow

rank, n = flow.env.get_rank(), flow.env.get_world_size()
path = sys.argv[1]
assert path.endswith(".safetensors"), path
P = flow.placement("cpu", list(range(n)))
B, S0, S1 = flow.sbp.broadcast, flow.sbp.split(0), flow.sbp.split(1)

flow.manual_seed(3)
ref = flow.nn.Linear(5, 3)
whole = {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()}


def save():
    m = flow.nn.Linear(5, 3)
    m.load_state_dict(ref.state_dict())
    m.to_global(P, lambda name, t: S0 if name == "weight" else B)
    assert m.weight.sbp == (S0,) and m.bias.sbp == (B,)
    try:
        flow.save(m.state_dict(), path + ".bad")
        raise SystemExit("saving global tensors without global_dst_rank did not raise")
    except flow.errors.FlowError as e:
        assert "global_dst_rank" in str(e)
    flow.save(m.state_dict(), path, global_dst_rank=0)
    if rank == 0:
        saved = flow.load(path)
        for k, v in whole.items():
            np.testing.assert_array_equal(saved[k].numpy(), v)


if "--load-only" not in sys.argv:
    save()
m2 = flow.nn.Linear(5, 3)
m2.to_global(P, lambda name, t: S1 if name == "weight" else B)
m2.load_state_dict(flow.load(path, global_src_rank=0))
assert m2.weight.sbp == (S1,)
for k, v in whole.items():
    np.testing.assert_array_equal(getattr(m2, k).detach().numpy(), v)
if rank == 0:
    print("checkpoint ok", flush=True)
