"""Run under mpiexec (2 or 4 ranks): auto-parallel of the zoo GPT against one process.

The GPT (tiny, dropout 0, float64) is planned by ``flow_dist.auto_parallel.plan`` (a fixed device
profile, so the choice does not depend on this machine's load): without a cap (data parallel wins)
and with a memory cap that excludes pure data parallelism (a tensor-parallel plan), and trains 3
AdamW steps eagerly on the chosen layout; an ``nn.Graph`` with
``config.enable_auto_parallel(True, memory_cap=...)`` plans and lays out on its first call. Every
run gives the losses and parameters of one process on the whole batch (1e-10).
Prints "auto_parallel ok" on rank 0."""

import numpy as np

import flow
from flow_dist import auto_parallel as AP
from flow_dist.plan import Cluster, DeviceProfile
from flow_models.nlp.gpt import GPT, GPTConfig

flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
nn = flow.nn
CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
rng = np.random.default_rng(0)
IDX = rng.integers(0, 64, (3, 8, 16))
TGT = rng.integers(0, 64, (3, 8, 16))
DEV = DeviceProfile("cpu", 20e9, 8e9, dtype_bytes=8, fuses_elementwise=False)
CLUSTER = Cluster.local(n, device=DEV, cpu_share=1.0)


def make():
    flow.manual_seed(0)
    return GPT(CFG)


def reference():
    m = make()
    opt = flow.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.1)
    losses = []
    for s in range(3):
        opt.zero_grad()
        loss = m.loss(m(flow.tensor(IDX[s])), flow.tensor(TGT[s]))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().numpy()))
    return losses, {k: v.detach().numpy() for k, v in m.state_dict().items()}


def whole(state):
    # the logical values on every rank: the state dict of a global model, gathered to broadcast
    out = {}
    for k, v in state.items():
        v = v.detach()
        if getattr(v._data, "is_global", False):
            v = v.to_global(sbp=(flow.sbp.broadcast,) * v._data.placement.ndim).to_local()
        out[k] = v.numpy()
    return out


def check(what, losses, state, ref):
    rl, rs = ref
    assert np.allclose(losses, rl, rtol=0, atol=1e-10), (what, losses, rl)
    assert sorted(state) == sorted(rs), (what, sorted(set(state) ^ set(rs)))
    for k in rs:
        assert np.allclose(state[k], rs[k], rtol=0, atol=1e-10), (what, k, np.abs(state[k] - rs[k]).max())


def eager(cap):
    m = make()
    ap = AP.plan(m, flow.tensor(IDX[0]), n, memory_cap=cap, cluster=CLUSTER)
    ap.apply(m)
    opt = flow.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.1)
    losses = []
    for s in range(3):
        x, y = ap.shard_batch(flow.tensor(IDX[s])), ap.shard_batch(flow.tensor(TGT[s]))
        opt.zero_grad()
        loss = m.loss(m(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.to_global(sbp=(flow.sbp.broadcast,) * len(ap.input_sbp)).to_local().detach().numpy()))
    return ap, losses, whole(m.state_dict())


def graph(cap):
    m = make()
    opt = flow.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.1)  # built before the plan: rebound

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)
            self.config.enable_auto_parallel(True, memory_cap=cap, cluster=CLUSTER)

        def build(self, x, y):
            loss = m.loss(m(x), y)
            loss.backward()
            return loss

    step = Step()
    losses = []
    for s in range(3):
        loss = step(flow.tensor(IDX[s]), flow.tensor(TGT[s]))  # whole batches: the hook splits them
        nd = len(step.auto_plan.input_sbp)
        losses.append(float(loss.to_global(sbp=(flow.sbp.broadcast,) * nd).to_local().detach().numpy()))
    assert step.compiles == 1, step.compiles
    return step.auto_plan, losses, whole(m.state_dict())


ref = reference()
free, l0, s0 = eager(None)
# eagerly every gradient is its own all-reduce, so the choice is whichever scores fastest
assert free.best.step_time == min(c.step_time for c in free.candidates if c.fits and c.applicable), free.table()
check(f"eager, no cap, {free.best.name}", l0, s0, ref)
# a cap below pure data parallelism's memory: a tensor-parallel layout must be chosen
dp_mem = next(c.memory for c in free.candidates if c.tp == 1 and c.pp == 1)  # pipelines: scored only
cap = 0.75 * dp_mem
capped, l1, s1 = eager(cap)
assert capped.best.tp > 1 and capped.best.memory <= cap, capped.table()
check(f"eager, {capped.best.name}", l1, s1, ref)
g, l2, s2 = graph(cap)
# the graph hook plans for a graph (one gradient bucket): the choice of plan(mode="graph")
want = AP.plan(GPT(CFG), flow.tensor(IDX[0]), n, memory_cap=cap, cluster=CLUSTER, mode="graph").best
assert g.best.name == want.name and g.best.memory <= cap, (g.best.name, want.name)
check(f"graph, {g.best.name}", l2, s2, ref)
if rank == 0:
    print(capped.table())
    print("auto_parallel ok")
