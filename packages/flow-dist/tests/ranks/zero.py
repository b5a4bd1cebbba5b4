"""Run under mpiexec: ZeroRedundancyOptimizer trains like one process on the whole batch.

For a small MLP with SGD momentum (uneven shards, and a one-element bias that leaves some ranks an
empty shard) and the zoo GPT with AdamW (tied lm_head, dropout 0), float64, 3 steps, at stages 1
(with DDP), 2 and 3: losses and parameters equal the unsharded optimizer's on the whole batch to
1e-10; the shards and their states hold this rank's piece only; memory_report gives the expected
bytes; consolidate_state_dict gives the unsharded optimizer's state; a loaded state continues the
same. Prints the memory per rank and "zero ok" on rank 0."""

import numpy as np

import flow
from flow_dist.zero import ZeroRedundancyOptimizer, memory_report
from flow_models.nlp.gpt import GPT, GPTConfig

flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
nn, F = flow.nn, flow.nn.functional
DDP = flow.nn.parallel.DistributedDataParallel
world = flow.comm.get_backend("cpu")
rng = np.random.default_rng(0)


def mine(a):
    return np.split(a, n)[rank]


def train(make, batches, loss_fn, opt_cls, kw, stage, steps=3):
    """stage 0: the plain optimizer on the whole batch in this process; else ZeRO on this rank's slice."""
    flow.manual_seed(0 if stage == 0 else rank)  # replicas start different: rank 0's weights must win
    m = make()
    if stage == 0:
        model, opt = m, opt_cls(m.parameters(), **kw)
    elif stage == 1:
        model = DDP(m)
        opt = ZeroRedundancyOptimizer(model.parameters(), opt_cls, stage=1, **kw)
    else:
        model = m
        opt = ZeroRedundancyOptimizer(m.parameters(), opt_cls, stage=stage, module=m, **kw)
    losses = []
    for s in range(steps):
        inputs, target = batches(s, stage > 0)
        opt.zero_grad()
        loss = loss_fn(model(*inputs), target)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().numpy()))
    if stage > 0:  # each rank's loss is its slice's mean
        losses = [float(x) for x in world.all_reduce(np.array(losses), "avg")]
    return m, opt, losses


def params_of(m, opt):
    if isinstance(opt, ZeroRedundancyOptimizer):
        opt.gather_parameters()
    return [p.detach().numpy().copy() for p in m.parameters()]


def shard_elems(m):
    """Elements of this rank's numpy.array_split piece of every parameter."""
    return sum(len(np.array_split(np.arange(p.numel()), n)[rank]) for p in m.parameters())


def check_run(name, make, batches, loss_fn, opt_cls, kw, n_states):
    ref_m, ref_opt, ref_losses = train(make, batches, loss_fn, opt_cls, kw, 0)
    ref_params = params_of(ref_m, ref_opt)
    ref_sd = ref_opt.state_dict()
    total = sum(p.numel() for p in ref_m.parameters())
    memory = {0: memory_report(ref_m, ref_opt)}
    for stage in (1, 2, 3):
        what = f"{name} stage {stage}"
        m, opt, losses = train(make, batches, loss_fn, opt_cls, kw, stage)
        memory[stage] = memory_report(m, opt)  # after the step: stage 3's parameters are released
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-10, err_msg=what)
        for x, y in zip(params_of(m, opt), ref_params):
            np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12, err_msg=what)
        # the shards and their states are this rank's pieces, and together the whole
        k = shard_elems(m)
        assert sum(e.shard.numel() for e in opt._entries) == k, what
        for e in opt._entries:
            for t in opt.optim.state[e.shard].values():
                assert t.dim() == 0 or tuple(t.shape) == (e.hi - e.lo,), (what, t.shape)
        assert int(world.all_reduce(np.array(k), "sum")) == total, what
        # memory per rank: parameters / gradients / state whole or 1/n as the stage says (8 bytes each)
        expect = {
            "parameters": 8 * (k if stage == 3 else total),
            "gradients": 8 * (total if stage == 1 else k),
            "optimizer_state": 8 * n_states * k,
        }
        got = {key: memory[stage][key] for key in expect}
        assert got == expect, (what, got, expect)
        # consolidate_state_dict: the unsharded optimizer's state on rank 0 only
        opt.consolidate_state_dict(to=0)
        if rank == 0:
            sd = opt.state_dict()
            assert sd["param_groups"] == ref_sd["param_groups"], what
            assert sorted(sd["state"]) == sorted(ref_sd["state"]), what
            for i, st in ref_sd["state"].items():
                assert sorted(sd["state"][i]) == sorted(st), (what, i)
                for key, v in st.items():
                    np.testing.assert_allclose(sd["state"][i][key].numpy(), v.numpy(), rtol=1e-10, atol=1e-14)
        else:
            try:
                opt.state_dict()
                raise AssertionError("state_dict() on a rank it was not consolidated to")
            except RuntimeError as err:
                assert "consolidate_state_dict" in str(err)
    exp = {0: (1, 1, 1), 1: (1, 1, n), 2: (1, n, n), 3: (n, n, n)}
    assert memory[0]["optimizer_state"] == 8 * n_states * total
    for stage, (fp, fg, fs) in exp.items():  # about 1/n (uneven pieces: within one element a parameter)
        slack = 8 * n_states * len(ref_params)
        assert abs(memory[stage]["parameters"] - 8 * total / fp) <= slack
        assert abs(memory[stage]["gradients"] - 8 * total / fg) <= slack
        assert abs(memory[stage]["optimizer_state"] - 8 * n_states * total / fs) <= slack
    gathered = world.all_gather(np.array([memory[s]["total"] for s in range(4)]))
    if rank == 0:
        for s in range(4):
            per_rank = ", ".join(str(int(g[s])) for g in gathered)
            print(f"memory {name} n={n} stage {s}: {per_rank} bytes (params {total} elements)")
    return ref_m, ref_opt


# -- MLP with SGD momentum --------------------------------------------------------------------------
X = rng.standard_normal((4, 4 * n, 20))
Y = rng.standard_normal((4, 4 * n, 1))


def mlp():
    return nn.Sequential(nn.Linear(20, 33), nn.Tanh(), nn.Linear(33, 3), nn.Tanh(), nn.Linear(3, 1))


def mlp_batches(s, split):
    x, y = (mine(X[s]), mine(Y[s])) if split else (X[s], Y[s])
    return [flow.tensor(x)], flow.tensor(y)


sgd = dict(lr=0.1, momentum=0.9)
ref_m, ref_opt = check_run("mlp", mlp, mlp_batches, F.mse_loss, flow.optim.SGD, sgd, 1)

# a loaded whole state continues like the unsharded optimizer (step 4 after 3), at stage 2
flow.manual_seed(0)
m = mlp()
m.load_state_dict(ref_m.state_dict())
opt = ZeroRedundancyOptimizer(m.parameters(), flow.optim.SGD, stage=2, **sgd)
opt.load_state_dict(ref_opt.state_dict())
x, y = mlp_batches(3, True)
F.mse_loss(m(*x), y).backward()
opt.step()
x, y = mlp_batches(3, False)
ref_opt.zero_grad()
F.mse_loss(ref_m(*x), y).backward()
ref_opt.step()
for a, b in zip(m.parameters(), ref_m.parameters()):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)

# -- the zoo GPT with AdamW -------------------------------------------------------------------------
cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
IDX = rng.integers(0, 64, (3, 2 * n, 16))
TGT = rng.integers(0, 64, (3, 2 * n, 16))


def gpt_batches(s, split):
    idx, tgt = (mine(IDX[s]), mine(TGT[s])) if split else (IDX[s], TGT[s])
    return [flow.tensor(idx)], flow.tensor(tgt.reshape(-1))


def gpt_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)


check_run("gpt", lambda: GPT(cfg), gpt_batches, gpt_loss, flow.optim.AdamW, dict(lr=3e-3, weight_decay=0.1), 2)

if rank == 0:
    print("zero ok")
