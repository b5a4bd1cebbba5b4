"""Run under mpiexec: flow.distributed (torch.distributed's API) on every rank.

Each collective's values against a NumPy reference of what every rank holds, async work handles,
point-to-point, a subgroup, object collectives, errors, and the classic torch DDP script
(init_process_group, DistributedDataParallel, DistributedSampler, DataLoader) giving the same
losses and weights as one process on the whole batches (float64, 1e-10). Prints "torch api ok"
on rank 0."""

import os
import warnings

import numpy as np

import flow
import flow.distributed as dist
from flow.utils.data import DataLoader, DistributedSampler, TensorDataset
from flow_dist import env

flow.set_default_dtype(flow.float64)
assert dist.is_available() and not dist.is_initialized() and dist.group.WORLD is None
dist.init_process_group(backend="gloo", init_method="env://")
rank, n = dist.get_rank(), dist.get_world_size()
assert (rank, n) == (env.get_rank(), env.get_world_size()) and n > 1
assert dist.is_initialized() and dist.get_backend() == "gloo"
assert dist.group.WORLD.size() == n and dist.get_process_group_ranks(dist.group.WORLD) == list(range(n))
assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == (str(rank), str(n))
assert dist.get_node_local_rank() == int(os.environ["LOCAL_RANK"])
try:
    dist.init_process_group("gloo")
    raise AssertionError("a second init_process_group must raise")
except ValueError as e:
    assert "twice" in str(e)


def value(r, shape=(3, 2)):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) + 1 + r


def t(a):
    return flow.tensor(np.array(a, dtype=np.float64))


every = np.stack([value(r) for r in range(n)])

# -- all_reduce, every op, in place; async ------------------------------------------------------
reference = {
    dist.ReduceOp.SUM: every.sum(0),
    dist.ReduceOp.PRODUCT: every.prod(0),
    dist.ReduceOp.MIN: every.min(0),
    dist.ReduceOp.MAX: every.max(0),
    dist.ReduceOp.AVG: every.mean(0),
}
for op, expect in reference.items():
    x = t(value(rank))
    assert dist.all_reduce(x, op=op) is None
    np.testing.assert_allclose(x.numpy(), expect, rtol=1e-12, err_msg=str(op))
x = t(value(rank))
work = dist.all_reduce(x, async_op=True)
assert work.wait() is True and work.is_completed()
np.testing.assert_allclose(x.numpy(), every.sum(0))
x = t(value(rank))
dist.all_reduce(x, op=flow.comm.ReduceOp.MAX)  # flow.comm's names reduce the same
np.testing.assert_array_equal(x.numpy(), every.max(0))

# -- broadcast, reduce ------------------------------------------------------------------------------
x = t(value(rank))
dist.broadcast(x, src=n - 1)
np.testing.assert_array_equal(x.numpy(), value(n - 1))
x = t(value(rank))
dist.broadcast(x, group_src=0, async_op=True).wait()
np.testing.assert_array_equal(x.numpy(), value(0))
x = t(value(rank))
dist.reduce(x, dst=1, op=dist.ReduceOp.SUM)
np.testing.assert_array_equal(x.numpy(), every.sum(0) if rank == 1 else value(rank))  # others: unchanged

# -- all_gather, all_gather_into_tensor (concatenated and stacked) ---------------------------------
outs = [flow.zeros(3, 2, dtype=flow.float64) for _ in range(n)]
dist.all_gather(outs, t(value(rank)))
for r in range(n):
    np.testing.assert_array_equal(outs[r].numpy(), value(r))
cat = flow.zeros(3 * n, 2, dtype=flow.float64)
dist.all_gather_into_tensor(cat, t(value(rank)))
np.testing.assert_array_equal(cat.numpy(), np.concatenate(every))
stacked = flow.zeros(n, 3, 2, dtype=flow.float64)
dist.all_gather_into_tensor(stacked, t(value(rank)), async_op=True).wait()
np.testing.assert_array_equal(stacked.numpy(), every)

# -- reduce_scatter, reduce_scatter_tensor ----------------------------------------------------------
# rank s sends value(s) * (j + 1) to rank j: rank j gets (j + 1) * sum_s value(s)
out = flow.zeros(3, 2, dtype=flow.float64)
dist.reduce_scatter(out, [t(value(rank) * (j + 1)) for j in range(n)])
np.testing.assert_allclose(out.numpy(), (rank + 1) * every.sum(0))
big = t(np.concatenate([value(rank) * (j + 1) for j in range(n)]))
out = flow.zeros(3, 2, dtype=flow.float64)
dist.reduce_scatter_tensor(out, big, op=dist.ReduceOp.MAX)
np.testing.assert_allclose(out.numpy(), (rank + 1) * every.max(0))

# -- gather, scatter ----------------------------------------------------------------------------------
got = [flow.zeros(3, 2, dtype=flow.float64) for _ in range(n)] if rank == 0 else None
dist.gather(t(value(rank)), got, dst=0)
if rank == 0:
    for r in range(n):
        np.testing.assert_array_equal(got[r].numpy(), value(r))
x = flow.zeros(3, 2, dtype=flow.float64)
pieces = [t(value(r) * 7) for r in range(n)] if rank == n - 1 else None
dist.scatter(x, pieces, src=n - 1)
np.testing.assert_array_equal(x.numpy(), value(rank) * 7)

# -- all_to_all, all_to_all_single (even and uneven) ------------------------------------------------
ins = [t(np.full((2,), 100 * rank + j)) for j in range(n)]
outs = [flow.zeros(2, dtype=flow.float64) for _ in range(n)]
dist.all_to_all(outs, ins)
for s in range(n):
    np.testing.assert_array_equal(outs[s].numpy(), np.full((2,), 100 * s + rank))
inp = t(np.repeat(100 * rank + np.arange(n), 2)[:, None] * np.ones((1, 3)))  # rows 2j, 2j+1 go to rank j
out = flow.zeros(2 * n, 3, dtype=flow.float64)
dist.all_to_all_single(out, inp)
np.testing.assert_array_equal(out.numpy()[:, 0], np.repeat(100 * np.arange(n) + rank, 2))
# rank s sends s + 1 rows to every rank: rank r receives s + 1 rows from each s
rows_in = [rank + 1] * n
inp = t(np.full((sum(rows_in), 2), float(rank)))
out = flow.zeros(sum(s + 1 for s in range(n)), 2, dtype=flow.float64)
dist.all_to_all_single(out, inp, output_split_sizes=[s + 1 for s in range(n)], input_split_sizes=rows_in)
np.testing.assert_array_equal(out.numpy()[:, 0], np.repeat(np.arange(n, dtype=np.float64), np.arange(1, n + 1)))

# -- send / recv around the ring; isend / irecv ---------------------------------------------------
right, left = (rank + 1) % n, (rank - 1) % n
buf = flow.zeros(3, 2, dtype=flow.float64)
if rank % 2 == 0:
    dist.send(t(value(rank)), dst=right)
    assert dist.recv(buf, src=left) == left
else:
    assert dist.recv(buf, src=left) == left
    dist.send(t(value(rank)), dst=right)
np.testing.assert_array_equal(buf.numpy(), value(left))
buf = flow.zeros(3, 2, dtype=flow.float64)
reqs = [dist.isend(t(value(rank) * 2), dst=right, tag=3), dist.irecv(buf, src=left, tag=3)]
for w in reqs:
    w.wait()
np.testing.assert_array_equal(buf.numpy(), value(left) * 2)
dist.barrier()
dist.barrier(async_op=True).wait()

# -- groups: the whole world, and rank 0 alone ---------------------------------------------------
everyone = dist.new_group(list(range(n)))
x = t(value(rank))
dist.all_reduce(x, group=everyone)
np.testing.assert_allclose(x.numpy(), every.sum(0))
alone = dist.new_group([0])
x = t(value(rank))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert dist.all_reduce(x, group=alone) is None
np.testing.assert_array_equal(x.numpy(), value(rank))  # a group of one: its own value
assert dist.get_rank(alone) == (0 if rank == 0 else -1) and dist.get_world_size(alone) == (1 if rank == 0 else -1)
assert (len(caught) == 0) == (rank == 0), [str(w.message) for w in caught]

# -- objects -------------------------------------------------------------------------------------
objs = [None] * n
dist.all_gather_object(objs, {"rank": rank, "name": "r" * (rank + 1)})
assert objs == [{"rank": r, "name": "r" * (r + 1)} for r in range(n)], objs
lst = [("hello", 1), [2.5]] if rank == 1 else [None, None]
dist.broadcast_object_list(lst, src=1)
assert lst == [("hello", 1), [2.5]], lst

# -- errors (raised on every rank before any communication) ---------------------------------------
for call, kind, words in [
    (lambda: dist.all_reduce(t(value(rank)), op=dist.ReduceOp.BAND), dist.DistBackendError, "BAND"),
    (lambda: dist.all_reduce(t(value(rank)), op="mean"), ValueError, "ReduceOp"),
    (lambda: dist.broadcast(t(value(rank)), src=n), ValueError, f"src={n}"),
    (lambda: dist.gather(t(value(rank)), [t(value(0))] * n, dst=n + 5), ValueError, "dst"),
    (lambda: dist.recv(t(value(rank))), dist.DistError, "src"),
    (lambda: dist.all_reduce(value(rank)), flow.comm.CommError, "flow.Tensor"),
    (lambda: dist.new_group([0, n]), ValueError, f"rank {n}"),
    (lambda: dist.all_gather([t(value(0))], t(value(rank))), flow.comm.CommError, "tensor_list"),
]:
    try:
        call()
        raise AssertionError(f"expected {kind.__name__} ({words})")
    except kind as e:
        assert words in str(e), e


# -- the classic torch DDP script trains like one process -----------------------------------------
def make_model():
    flow.manual_seed(0)
    return flow.nn.Sequential(flow.nn.Linear(5, 8), flow.nn.Tanh(), flow.nn.Linear(8, 1))


rng = np.random.default_rng(0)
N, B, EPOCHS = 12 * n, 3, 2
X, Y = rng.standard_normal((N, 5)), rng.standard_normal((N, 1))
dataset = TensorDataset(flow.tensor(X), flow.tensor(Y))

flow.manual_seed(rank)  # replicas start different: DDP broadcasts rank 0's weights
DDP = flow.nn.parallel.DistributedDataParallel
for kwargs, kind in [({"process_group": alone}, flow.comm.CommError), ({"bucket_cap": 1}, TypeError)]:
    try:
        DDP(make_model(), **kwargs)
        raise AssertionError(f"DDP({kwargs}) must raise")
    except kind:
        pass
# torch's keywords, as a torch script passes them
model = DDP(make_model(), process_group=dist.group.WORLD, bucket_cap_mb=1e-4, gradient_as_bucket_view=True)
opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sampler = DistributedSampler(dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=True, seed=5)
loader = DataLoader(dataset, batch_size=B, sampler=sampler)
losses = []
for epoch in range(EPOCHS):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        loss = flow.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        whole = loss.detach().clone()
        dist.all_reduce(whole, op=dist.ReduceOp.AVG)  # equal local batches: the whole batch's mean
        losses.append(float(whole.numpy()))

ref = make_model()
ref_opt = flow.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
ref_losses = []
for epoch in range(EPOCHS):
    shares = []
    for r in range(n):
        s = DistributedSampler(dataset, num_replicas=n, rank=r, shuffle=True, seed=5)
        s.set_epoch(epoch)
        shares.append(list(s))
    for step in range(len(shares[0]) // B):
        idx = [i for share in shares for i in share[step * B : (step + 1) * B]]
        ref_opt.zero_grad()
        loss = flow.nn.functional.mse_loss(ref(flow.tensor(X[idx])), flow.tensor(Y[idx]))
        loss.backward()
        ref_opt.step()
        ref_losses.append(float(loss.detach().numpy()))
assert len(losses) == len(ref_losses) == EPOCHS * (N // n) // B
np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
for p, q in zip(model.module.parameters(), ref.parameters()):
    np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-12)

dist.destroy_process_group()
assert not dist.is_initialized() and dist.group.WORLD is None
if rank == 0:
    print("torch api ok")
