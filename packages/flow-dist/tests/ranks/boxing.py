"""Run under mpiexec: every conversion between two layouts keeps the logical value, on a 1-d
placement of all ranks and (at 4 ranks) a 2x2 one; uneven shapes; the cost model is zero exactly
when no collective runs. Prints "boxing ok <count>" on rank 0."""

import itertools

import numpy as np

import flow
from flow_dist.boxing import cost

rank, n = flow.env.get_rank(), flow.env.get_world_size()
S, B, P = flow.sbp.split, flow.sbp.broadcast, flow.sbp.partial_sum
rng = np.random.default_rng(0)
count = 0


def layouts(ndim, axes):
    one = [B, P] + [S(d) for d in range(ndim)]
    return list(itertools.product(one, repeat=axes))


placements = [flow.placement("cpu", list(range(n)))]
if n == 4:
    placements.append(flow.placement("cpu", [[0, 1], [2, 3]]))
for p in placements:
    for shape in [(5, 3), (2 * n, 4), (1, 7)]:
        whole = rng.standard_normal(shape)
        for src in layouts(len(shape), p.ndim):
            x = flow.tensor(whole).to_global(p, [B] * p.ndim).to_global(sbp=list(src))
            for dst in layouts(len(shape), p.ndim):
                y = x.to_global(sbp=list(dst))
                assert y.sbp == tuple(dst) and y.shape == shape
                got = y.numpy()
                assert np.allclose(got, whole, atol=1e-12), (p, src, dst, shape)
                expect = tuple(y.to_local().shape)
                from flow_dist.layout import local_shape

                assert expect == local_shape(shape, p, tuple(dst), p.rank_index(rank)), (src, dst)
                c = cost(shape, 8, p, tuple(src), tuple(dst))
                assert c >= 0
                count += 1
        # conversions that move nothing cost nothing
        assert cost(shape, 8, p, (B,) * p.ndim, (S(0),) * p.ndim) == 0
if rank == 0:
    print("boxing ok", count, flush=True)
