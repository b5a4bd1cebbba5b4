"""Run under mpiexec: DistributedDataParallel trains like one process on the whole batch.

Each rank takes its slice of every batch (equal slices; the loss is the mean over the local
batch, so the average of the ranks' gradients is the whole batch's gradient). Checked for the
benchmark MLP with SGD and Adam and a small GPT with AdamW, eager and compiled by nn.Graph (float64,
1e-10); replicas start from
rank 0's weights; no_sync accumulation; buffers broadcast; a parameter unused in a pass; and that
buckets start before backward reaches the first layer. Prints "ddp ok" on rank 0."""

import os
import sys

import numpy as np

import flow

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "benchmarks"))
from models import make_gpt, make_mlp  # noqa: E402

flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
nn, F = flow.nn, flow.nn.functional
DDP = flow.nn.parallel.DistributedDataParallel
world = flow.comm.get_backend("cpu")
rng = np.random.default_rng(0)


def mine(a):
    """This rank's equal slice of a batch (dim 0)."""
    return np.split(a, n)[rank]


def train(make, batches, loss_fn, make_opt, ddp, steps=3, graph=False, **kw):
    flow.manual_seed(rank if ddp else 0)  # replicas start different: DDP must take rank 0's weights
    m = make()
    model = DDP(m, **kw) if ddp else m
    opt = make_opt(model.parameters())

    class Step(nn.Graph):  # the same step compiled: DDP's averages become graph nodes
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, inputs, target):
            loss = loss_fn(self.model(*inputs), target)
            loss.backward()
            return loss

    def eager(inputs, target):
        opt.zero_grad()
        loss = loss_fn(model(*inputs), target)
        loss.backward()
        opt.step()
        return loss

    step = Step() if graph else eager
    losses = []
    for s in range(steps):
        inputs, target = batches(s, ddp)
        losses.append(float(step(inputs, target).detach().numpy()))
    if graph:
        counts = step.ir.op_counts()
        assert counts.get("sbp_all_reduce_start", 0) >= 1 and "sbp_boxing" not in counts, counts
    if ddp:  # each rank's loss is its slice's mean: their average is the whole batch's
        losses = [float(x) for x in world.all_reduce(np.array(losses), "avg")]
    return losses, [p.detach().numpy().copy() for p in m.parameters()]


def check(a, b, what):
    (la, pa), (lb, pb) = a, b
    np.testing.assert_allclose(la, lb, rtol=1e-10, err_msg=what)
    for x, y in zip(pa, pb):
        np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12, err_msg=what)


X = rng.standard_normal((3, 4 * n, 784))
Y = rng.integers(0, 10, (3, 4 * n))


def mlp_batches(s, ddp):
    x, y = (mine(X[s]), mine(Y[s])) if ddp else (X[s], Y[s])
    return [flow.tensor(x)], flow.tensor(y)


mlp = lambda: make_mlp(nn, F)  # noqa: E731
for name, make_opt in [("sgd", lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9)), ("adam", flow.optim.Adam)]:
    ref = train(mlp, mlp_batches, F.cross_entropy, make_opt, False)
    check(ref, train(mlp, mlp_batches, F.cross_entropy, make_opt, True, bucket_size_mb=1), f"mlp {name}")
    check(ref, train(mlp, mlp_batches, F.cross_entropy, make_opt, True, graph=True), f"mlp {name}, graph")

IDX = rng.integers(0, 64, (3, 2 * n, 16))
TGT = rng.integers(0, 64, (3, 2 * n, 16))


def gpt_batches(s, ddp):
    idx, tgt = (mine(IDX[s]), mine(TGT[s])) if ddp else (IDX[s], TGT[s])
    return [flow.tensor(idx), flow.tensor(np.arange(16))], flow.tensor(tgt.reshape(-1))


def gpt_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)


gpt = lambda: make_gpt(nn, F, vocab=64, d_model=32, n_heads=2, n_layers=2, seq_len=16, dropout=0.0)  # noqa: E731
adamw = lambda p: flow.optim.AdamW(p, lr=3e-3, weight_decay=0.1)  # noqa: E731
ref = train(gpt, gpt_batches, gpt_loss, adamw, False)
check(ref, train(gpt, gpt_batches, gpt_loss, adamw, True), "gpt")
check(ref, train(gpt, gpt_batches, gpt_loss, adamw, True, graph=True), "gpt, graph")

# -- no_sync accumulates locally; the next pass averages the total; buffers follow rank 0 ---------
flow.manual_seed(rank)
m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
model = DDP(m)
plain = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
plain.load_state_dict(m.state_dict())  # rank 0's weights, broadcast by DDP
xs = [flow.tensor(rng.standard_normal((2, 3)) + rank) for _ in range(2)]
with model.no_sync():
    model(xs[0]).sum().backward()
model(xs[1]).sum().backward()
for x in xs:
    plain(x).sum().backward()
expect = world.all_reduce(plain[0].weight.grad.numpy(), "avg")
np.testing.assert_allclose(m[0].weight.grad.numpy(), expect, rtol=1e-12)
with flow.no_grad():
    m[1].running_mean.fill_(float(rank))  # replicas' statistics drift apart
model.eval()  # (in training mode the forward would update them again from the local batch)
model(xs[0])  # forward broadcasts rank 0's first
stats = world.all_gather(m[1].running_mean.numpy())
assert all(np.array_equal(s, stats[0]) for s in stats)


# -- a parameter unused in a pass; buckets start while backward goes on ---------------------------
class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x, use_b):
        return self.b(self.a(x)) if use_b else self.a(x)


flow.manual_seed(0)
two = DDP(Two(), bucket_size_mb=1e-6)  # one bucket per parameter
two(flow.ones(2, 3), False).sum().backward()  # b is unused on every rank: its gradients stay None
assert two.module.b.weight.grad is None and two.module.a.weight.grad is not None
started = []
launch = two._launch
two._launch = lambda b: (started.append(b), launch(b))[1]
seen = []
two.module.a.weight.register_hook(lambda g: seen.append(len(started)))
two.zero_grad()
two(flow.ones(2, 3), True).sum().backward()
assert seen and seen[0] >= 2, (seen, len(started))  # b's buckets were in flight before a's gradient
if rank == 0:
    print("ddp ok", flush=True)
