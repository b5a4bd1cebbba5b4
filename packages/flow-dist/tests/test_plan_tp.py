"""Tensor parallelism in the simulator: each rank's work costed from what that rank runs.

The per-rank accounting of the unsplit trace (``simulate.rank_ops``: split ops divided, layer
norms, residuals, row-parallel biases and positions whole) must match a trace of the split model
(``plan.tp_trace``: the local model one rank runs) op for op in FLOPs, and within the stated
tolerances in bytes (the vocabulary-parallel loss's per-row ops are in the trace only).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from flow_dist.plan import Cluster, DeviceProfile, Strategy, simulate
from flow_dist.plan.simulate import rank_ops

GPTConfig = pytest.importorskip("flow_models.nlp.gpt", reason="the zoo (flow-models) is not installed").GPTConfig

TINY = dict(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32)


@pytest.fixture(scope="module")
def works():
    from flow_dist.plan import gpt_workload
    from flow_dist.plan.tp_trace import tp_workload

    cfg = GPTConfig(**TINY)
    return gpt_workload(cfg, trace_layers=2), tp_workload(cfg, 2, trace_layers=2)


def _totals(ops) -> tuple:
    return sum(c.flops for c in ops), sum(c.bytes for c in ops)


def test_per_rank_flops_and_bytes_match_the_split_models_trace(works):
    unsplit, traced = works
    (lf, lb), (rf, rb) = (_totals(o) for o in rank_ops(unsplit, 2))
    (tlf, tlb), (trf, trb) = (_totals(o) for o in rank_ops(traced, 2))
    # a block: the same products and elementwise work within 0.1% of FLOPs (the row-parallel bias
    # add of c_proj is the one op the accounting keeps whole and the trace fuses in the linear)
    assert lf == pytest.approx(tlf, rel=1e-3)
    assert lb == pytest.approx(tlb, rel=0.06)
    # outside the blocks: the vocabulary-parallel loss's per-row ops are in the trace only
    assert rf == pytest.approx(trf, rel=0.03)
    assert rb == pytest.approx(trb, rel=0.25)
    whole_f = _totals(unsplit.layer)[0]
    # the replicated work is counted per rank: more than half of the block's FLOPs on each of 2 ranks
    assert whole_f / 2 < lf < whole_f
    ln = [c for c in traced.layer if c.name.startswith("layer_norm")]
    assert sum(c.flops for c in ln) == sum(c.flops for c in unsplit.layer if c.name.startswith("layer_norm"))


def test_the_traced_rank_holds_the_accounted_parameters(works):
    from flow_dist.plan.tp_trace import tp_shard_model

    unsplit, traced = works
    local = tp_shard_model(GPTConfig(**TINY), 2)
    n = sum(math.prod(p.shape) for p in {id(p): p for p in local.parameters()}.values())
    assert traced.params == n
    c = Cluster.h200(2)
    a, b = simulate(unsplit, c, Strategy(tp=2), 8), simulate(traced, c, Strategy(tp=2), 8)
    for k in ("parameters", "gradients", "optimizer"):
        assert a.memory[k] == pytest.approx(b.memory[k])
    # the update runs on this rank's parameters: replicated ones whole
    opt = traced.optimizer[0].elements
    assert opt == n and unsplit.optimizer[0].elements / 2 < opt < unsplit.optimizer[0].elements


def test_global_dispatch_is_charged_per_op_the_rank_runs(works):
    _, traced = works
    base = DeviceProfile("cpu", 1e10, 1e10, dtype_bytes=8, fuses_elementwise=False, eager_overhead=2e-6)
    slow = dataclasses.replace(base, global_overhead=40e-6)
    cl = Cluster.local(2, None, base, cores=2)
    t0 = simulate(traced, cl, Strategy(tp=2), 8)
    t1 = simulate(traced, Cluster.local(2, None, slow, cores=2), Strategy(tp=2), 8)
    # every op outside the local functions (views and the update included: eager dispatches them) pays
    # 40 us more; the vocabulary-parallel embedding's and loss's inner ops pay a local op's dispatch only
    handled = traced.n_layer * len(traced.layer) + sum(not c.local for c in traced.rest) + len(traced.optimizer)
    assert sum(c.local for c in traced.rest) > 10
    assert t1.step_time - t0.step_time == pytest.approx(handled * 40e-6, rel=1e-6)


def test_bad_tensor_parallel_workloads(works):
    from flow_dist.plan.tp_trace import tp_shard_model, tp_workload

    _, traced = works
    c = Cluster.h200(4)
    with pytest.raises(ValueError, match="one rank of a 2-way tensor-parallel split"):
        simulate(traced, c, Strategy(tp=4), 8)
    with pytest.raises(ValueError, match="without tp_scopes"):
        simulate(traced, Cluster.h200(2), Strategy(tp=2, tp_scopes=(".mlp",)), 8)
    with pytest.raises(ValueError, match="does not divide the GPT's n_head 4"):
        tp_shard_model(GPTConfig(**TINY), 3)
    with pytest.raises(ValueError, match="tp must be an int >= 1"):
        tp_shard_model(GPTConfig(**TINY), 0)
    with pytest.raises(ValueError, match="longer than block_size"):
        tp_workload(GPTConfig(**TINY), 2, seq=32)
