"""Run under mpiexec: every collective of the backend and of flow.comm against a NumPy reference,
async handles, dtypes, uneven shapes, and mismatched calls raising on every rank.
Prints "comm ok" on rank 0."""

import ml_dtypes
import numpy as np

import flow
from flow_dist import env
from flow_dist.comm import CommError, ReduceOp, barrier, broadcast, recv, reduce, reduce_scatter, send
from flow_dist.comm import all_gather as t_all_gather
from flow_dist.comm import all_reduce as t_all_reduce
from flow_dist.comm import all_to_all as t_all_to_all
from flow_dist.comm.backend import get_backend

rank, n = env.get_rank(), env.get_world_size()
b = get_backend("cpu")
assert (b.rank, b.size, b.ranks) == (rank, n, tuple(range(n)))


def value(r, shape=(3, 2), dtype=np.float64):
    return (np.arange(int(np.prod(shape))).reshape(shape) + 10 * r).astype(dtype)


everyone = [value(r) for r in range(n)]
for dtype in (np.float32, np.float64, np.int64, np.float16, ml_dtypes.bfloat16):
    mine = value(rank, dtype=dtype)
    ref = [value(r, dtype=dtype).astype(np.float64) for r in range(n)]
    got = b.all_reduce(mine, "sum")
    assert got.dtype == mine.dtype and got.shape == mine.shape and got is not mine
    np.testing.assert_allclose(got.astype(np.float64), sum(ref), rtol=1e-2 if dtype != np.int64 else 0)
    np.testing.assert_array_equal(b.all_reduce(mine, "max").astype(np.float64), ref[-1])
    np.testing.assert_array_equal(b.all_reduce(mine, "min").astype(np.float64), ref[0])
np.testing.assert_allclose(b.all_reduce(value(rank), "avg"), sum(everyone) / n)
np.testing.assert_allclose(b.all_reduce(value(rank) + 1, "prod"), np.prod([e + 1 for e in everyone], axis=0))
assert b.all_reduce(np.array(rank == 0), "sum").item() is True  # bool: any
assert b.all_reduce(np.float32(rank).reshape(()), "sum").shape == ()
w = b.all_reduce(value(rank), async_op=True)
np.testing.assert_allclose(w.wait(), sum(everyone))
assert w.is_completed()

# several collectives in flight whose send buffers are made inside the call (a concatenation, a
# dtype conversion): the handles must keep them alive until wait(), or freed memory that is
# reused before MPI reads it gives silently wrong sums
big = 1 << 20
works, refs = [], []
for k in range(3):
    pieces = [np.full(big, float(rank + k + 1)) for _ in range(n)]
    works.append(("rs", b.reduce_scatter(pieces, async_op=True)))
    refs.append(np.full(big, float(sum(r + k + 1 for r in range(n)))))
    works.append(("ar", b.all_reduce(np.full(big, rank + k + 1, dtype=np.int32), async_op=True)))
    refs.append(np.full(big, sum(r + k + 1 for r in range(n)), dtype=np.int32))
    works.append(("ag", b.all_gather(np.full(big, float(rank + k)).reshape(-1, 2)[:, 0], async_op=True)))
    refs.append([np.full(big // 2, float(r + k)) for r in range(n)])
junk = [np.full(big * n, -1e9) for _ in range(8)]  # reuse whatever was freed
for (kind, w), ref in zip(works, refs):
    got = w.wait()
    if kind == "ag":
        for g, e in zip(got, ref):
            np.testing.assert_array_equal(g, e, err_msg=kind)
    else:
        np.testing.assert_array_equal(got, ref, err_msg=kind)
del junk

# uneven all-gather (pieces of numpy.array_split) and all-to-all
whole = np.arange(7 * 3, dtype=np.float32).reshape(7, 3)
pieces = np.array_split(whole, n)
gathered = b.all_gather(pieces[rank])
np.testing.assert_array_equal(np.concatenate(gathered), whole)
send_pieces = [np.full((r + 1, rank + 1), rank * 10 + r, dtype=np.int32) for r in range(n)]
got = b.all_to_all(send_pieces)
for src, g in enumerate(got):
    assert g.shape == (rank + 1, src + 1) and (g == src * 10 + rank).all()
# reduce-scatter of uneven pieces
parts = [np.full((r + 2,), float(rank + 1)) for r in range(n)]
mine = b.reduce_scatter(parts)
assert mine.shape == (rank + 2,) and np.allclose(mine, n * (n + 1) / 2)
np.testing.assert_array_equal(b.broadcast(value(rank), src=n - 1), value(n - 1))
red = b.reduce(value(rank), dst=0)
assert (red is None) == (rank != 0)
if rank == 0:
    np.testing.assert_array_equal(red, sum(everyone))
b.barrier()
b.barrier(async_op=True).wait()

# flow.comm on local tensors, in place
t = flow.tensor(value(rank))
t_all_reduce(t)
np.testing.assert_array_equal(t.numpy(), sum(everyone))
t = flow.tensor(value(rank))
work = t_all_reduce(t, op=ReduceOp.MAX, async_op=True)
work.wait()
np.testing.assert_array_equal(t.numpy(), everyone[-1])
outs = [flow.zeros(3, 2, dtype=flow.float64) for _ in range(n)]
t_all_gather(outs, flow.tensor(value(rank)))
for r in range(n):
    np.testing.assert_array_equal(outs[r].numpy(), everyone[r])
out = flow.zeros(3, 2, dtype=flow.float64)
reduce_scatter(out, [flow.tensor(value(rank) * (r + 1)) for r in range(n)])
np.testing.assert_array_equal(out.numpy(), sum(everyone) * (rank + 1))
t = flow.tensor(value(rank))
broadcast(t, src=0)
np.testing.assert_array_equal(t.numpy(), everyone[0])
t = flow.tensor(value(rank))
reduce(t, dst=n - 1)
if rank == n - 1:
    np.testing.assert_array_equal(t.numpy(), sum(everyone))
outs = [flow.zeros(2, dtype=flow.int64) for _ in range(n)]
t_all_to_all(outs, [flow.tensor([rank, r]) for r in range(n)])
assert [o.tolist() for o in outs] == [[r, rank] for r in range(n)]
if n >= 2:
    if rank == 0:
        send(flow.tensor([1.5, 2.5]), dst=1)
    elif rank == 1:
        t = flow.zeros(2, dtype=flow.float32)
        recv(t, src=0)
        assert t.tolist() == [1.5, 2.5]
barrier()

# a mismatched call raises on every rank, naming the shapes
try:
    b.all_reduce(np.zeros(3 if rank == 0 else 4))
    raise SystemExit("a shape mismatch did not raise")
except CommError as e:
    assert "rank 0 runs all_reduce(sum) on float64 of shape (3,)" in str(e), str(e)
    assert "rank 1 runs all_reduce(sum) on float64 of shape (4,)" in str(e), str(e)
try:
    b.all_reduce(np.zeros(3, dtype=np.float32 if rank == 0 else np.float64))
    raise SystemExit("a dtype mismatch did not raise")
except CommError as e:
    assert "float32" in str(e) and "float64" in str(e)
try:
    b.all_gather(np.zeros((2, 2), dtype=np.int64 if rank == 0 else np.int32))
    raise SystemExit("an all_gather dtype mismatch did not raise")
except CommError as e:
    assert "disagree" in str(e)
try:
    t_all_reduce(flow.ones(2, placement=flow.placement.all("cpu"), sbp=flow.sbp.broadcast))
    raise SystemExit("a global tensor was accepted")
except CommError as e:
    assert "local tensor" in str(e)
b.barrier()  # still in step after the errors
if rank == 0:
    print("comm ok", flush=True)
