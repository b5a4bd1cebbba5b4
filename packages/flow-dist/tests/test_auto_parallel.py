"""Auto-parallel (flow_dist.auto_parallel): the search in one process (candidates, the memory cap,
errors, applying a plan on a 1-rank placement) and the zoo GPT trained on the chosen layout against
one process under mpiexec at 2 and 4 ranks, eagerly and in an nn.Graph with
``config.enable_auto_parallel`` (tests/ranks/auto_parallel.py)."""

from __future__ import annotations

import numpy as np
import pytest
from _ranks import needs_mpi, run_ranks

import flow
from flow_dist import auto_parallel as AP
from flow_dist.plan import Cluster, DeviceProfile

_zoo = pytest.importorskip("flow_models.nlp.gpt", reason="the zoo (flow-models) is not installed")
GPT, GPTConfig = _zoo.GPT, _zoo.GPTConfig

CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
DEV = DeviceProfile("cpu", 20e9, 8e9, dtype_bytes=8, fuses_elementwise=False)


def gpt():
    flow.manual_seed(0)
    return GPT(CFG)


def ids(batch=8):
    return flow.tensor(np.random.default_rng(0).integers(0, 64, (batch, 16)))


def cluster(n):
    return Cluster.local(n, device=DEV, cpu_share=1.0)


@pytest.fixture(scope="module")
def free():
    return AP.plan(gpt(), ids(), 4, cluster=cluster(4), mode="graph")


def test_candidates_cover_meshes_groups_and_the_best_is_fastest(free):
    names = {c.name for c in free.candidates}
    # 1 dp4 + 7 subsets of {attn, mlp, vocab} for each of tp2 and tp4, and 2 pipelines of 2 stages
    # (dp2 and tp2 beside them, each at its fastest micro-batch count)
    assert len(free.candidates) == 17
    assert {"dp4", "dp2 tp2[attn+mlp]", "dp1 tp4[vocab]", "dp2 tp2[attn+mlp+vocab]"} <= names
    assert sorted((c.dp, c.tp, c.pp) for c in free.candidates if c.pp > 1) == [(1, 2, 2), (2, 1, 2)]
    assert all(c.fits for c in free.candidates)
    assert free.best.step_time == min(c.step_time for c in free.candidates)
    assert free.best.name == "dp4"  # the tiny GPT in a graph: one gradient bucket, data parallel wins
    text = free.table()
    assert "* dp4" in text and text.count("\n") == 18


def test_partial_tp_keeps_the_unsplit_groups_whole(free):
    by = {c.name: c for c in free.candidates}
    # more groups split: less memory per rank; all of them: the least
    assert by["dp2 tp2[attn+mlp+vocab]"].memory < by["dp2 tp2[attn+mlp]"].memory < by["dp2 tp2[mlp]"].memory
    assert by["dp2 tp2[mlp]"].memory < by["dp4"].memory
    # splitting the MLP as well divides its compute for the price of its two all-reduces: the
    # Megatron pair is faster than the attention alone at this size
    assert by["dp2 tp2[attn+mlp]"].step_time < by["dp2 tp2[attn]"].step_time


def test_a_memory_cap_below_data_parallel_picks_tensor_parallel(free):
    dp = next(c for c in free.candidates if c.tp == 1 and c.pp == 1)
    p = AP.plan(gpt(), ids(), 4, cluster=cluster(4), memory_cap=0.75 * dp.memory, mode="graph")
    assert p.best.tp > 1 and p.best.fits and p.best.memory <= 0.75 * dp.memory
    assert not next(c for c in p.candidates if c.tp == 1 and c.pp == 1).fits
    fitting = [c for c in p.candidates if c.fits and c.applicable]
    assert p.best.step_time == min(c.step_time for c in fitting)
    # the search over pipelines too: the fastest that fits is a pipeline or TP (scored, not applied)
    sb = p.search_best
    assert (sb.pp > 1 or sb.tp > 1) and sb.fits and sb.step_time <= p.best.step_time
    assert p.tp_plan()["transformer.h.*.mlp.c_fc"] == "colwise"
    assert p.input_sbp == (flow.sbp.split(0), flow.sbp.broadcast)


def test_zero_stages_in_graph_mode_apply_and_the_others_are_scored_only(free):
    dp = next(c for c in free.candidates if c.tp == 1 and c.pp == 1)
    cap = 0.75 * dp.memory
    p = AP.plan(gpt(), ids(), 4, cluster=cluster(4), memory_cap=cap, zero_stages=(0, 1, 2, 3), mode="graph")
    ok = [c for c in p.candidates if c.fits and c.applicable]
    assert p.best.step_time == min(c.step_time for c in ok)
    by = {c.name: c for c in p.candidates}
    assert by["dp4 zero1"].applicable and by["dp4 zero1"].fits and not by["dp4"].fits
    # ZeRO's rewrite is one reduce-scatter and one all-gather per parameter (not bucketed): it pays
    # more latencies than DP's one bucket, so it is chosen only when it is the fastest that fits
    assert by["dp4 zero1"].step_time > by["dp4"].step_time
    assert {c.zero_stage for c in p.candidates} == {0, 1, 2, 3}
    for c in p.candidates:  # the graph's zero pass: 1-d placements, stages 1 and 2
        zero_ok = c.zero_stage in (0, 1, 2) and (c.zero_stage == 0 or c.tp == 1)
        assert c.applicable == (zero_ok and c.pp == 1), c.name  # pipelines are scored only
        assert c.applicable or c.note.startswith("scored only")
    z = AP.AutoPlan(by["dp4 zero1"], p.candidates, 4, 8, cap)
    with pytest.raises(AP.AutoParallelError, match="ZeRO on eager"):
        z.apply(gpt())  # no graph to run the zero pass
    with pytest.raises(TypeError, match="nn.Graph"):
        z.apply(gpt(), graph=object())
    # eagerly no ZeRO candidate is chosen, however it scores
    e = AP.plan(gpt(), ids(), 4, cluster=cluster(4), memory_cap=cap, zero_stages=(0, 1, 2), mode="eager")
    assert e.best.zero_stage == 0 and all(not c.applicable for c in e.candidates if c.zero_stage)


def test_apply_turns_on_the_graph_zero_pass():
    g = flow.nn.Graph()
    p = AP.AutoPlan(AP.Candidate(1, 1, (), 1), [], 1, 8, float("inf"))
    p.apply(gpt(), graph=g)
    assert g.config.zero["stage"] == 1 and p.placement is not None
    with pytest.raises(AP.AutoParallelError, match="stage 3"):
        AP.AutoPlan(AP.Candidate(1, 1, (), 3), [], 1, 8, float("inf")).apply(gpt(), graph=flow.nn.Graph())
    with pytest.raises(AP.AutoParallelError, match="1-d placements"):
        AP.AutoPlan(AP.Candidate(2, 2, ("mlp",), 1), [], 4, 8, float("inf")).apply(gpt(), graph=flow.nn.Graph())


def test_eager_pays_one_all_reduce_per_gradient():
    # latency-bound link (this machine's MPI under load is milliseconds a collective): eagerly every
    # gradient is all-reduced on its own, so DP pays ~26 latencies where a graph pays one bucket
    slow = Cluster.local(4, {"ping_pong": {"alpha": 1e-3, "beta": 1e-10}}, DEV, cpu_share=1.0)
    g = AP.plan(gpt(), ids(), 4, cluster=slow, mode="graph")
    e = AP.plan(gpt(), ids(), 4, cluster=slow, mode="eager")
    by_g, by_e = ({c.name: c.step_time for c in p.candidates} for p in (g, e))
    n_grads = len({id(q) for q in gpt().parameters()})
    # one step's DP collectives: a ring all-reduce of 4 ranks is 6 alpha; eager n_grads, graph 1
    assert by_e["dp4"] - by_g["dp4"] == pytest.approx(
        (n_grads - 1) * 6e-3 + (by_e["dp1 tp4[mlp]"] - by_g["dp1 tp4[mlp]"]), rel=0.05
    )
    assert e.best.tp > 1 and e.best.step_time < by_e["dp4"]  # eagerly TP beats DP on this link


def test_nothing_fits_names_the_smallest_layout():
    with pytest.raises(AP.AutoParallelError, match=r"no layout fits .* dp1 tp4\[attn\+mlp\+vocab\]"):
        AP.plan(gpt(), ids(), 4, cluster=cluster(4), memory_cap=1000)


def test_bad_arguments_raise():
    m, x = gpt(), ids()
    with pytest.raises(AP.AutoParallelError, match="zoo GPT"):
        AP.plan(flow.nn.Linear(2, 2), x, 2, cluster=cluster(2))
    with pytest.raises(AP.AutoParallelError, match=r"\(batch, seq\)"):
        AP.plan(m, flow.zeros(8), 2, cluster=cluster(2))
    with pytest.raises(AP.AutoParallelError, match="groups"):
        AP.plan(m, x, 2, cluster=cluster(2), groups=("embedding",))
    with pytest.raises(AP.AutoParallelError, match="zero_stages"):
        AP.plan(m, x, 2, cluster=cluster(2), zero_stages=(4,))
    with pytest.raises(AP.AutoParallelError, match="4 devices but the world 2"):
        AP.plan(m, x, 2, cluster=cluster(4))
    with pytest.raises(ValueError, match="memory_cap"):
        AP.plan(m, x, 2, cluster=cluster(2), memory_cap=-1)
    with pytest.raises(AP.AutoParallelError, match="mode"):
        AP.plan(m, x, 2, cluster=cluster(2), mode="lazy")
    with pytest.raises(TypeError, match="world size or a placement"):
        AP.plan(m, x, "4", cluster=cluster(4))
    # 3 ranks: dp 3 does not divide the batch of 8, tp 3 not the 4 heads
    with pytest.raises(AP.AutoParallelError, match="no layout of 3 ranks divides the batch 8 and the 4 heads"):
        AP.plan(m, x, 3, cluster=cluster(3))


def test_apply_and_shard_batch_on_one_rank():
    flow.set_default_dtype(flow.float64)
    try:
        m, ref = gpt(), gpt()
        x = ids()
        p = AP.plan(m, x, flow.placement("cpu", [0]), cluster=cluster(1))
        assert p.best.name == "dp1" and len(p.candidates) == 1
        with pytest.raises(AP.AutoParallelError, match="apply"):
            p.shard_batch(x)
        p.apply(m)
        gx = p.shard_batch(x)
        assert gx.sbp == (flow.sbp.broadcast,) and m.lm_head.weight.sbp == (flow.sbp.broadcast,)
        got = m(gx).to_local().detach().numpy()
        np.testing.assert_allclose(got, ref(x).detach().numpy(), rtol=0, atol=1e-12)
        with pytest.raises(AP.AutoParallelError, match="does not split"):
            AP.AutoPlan(AP.Candidate(2, 1, (), 0), [], 2, 8, 1.0, placement=p.placement).shard_batch(ids(3))
    finally:
        flow.set_default_dtype(flow.float32)


def test_graph_config_stores_the_setting():
    g = flow.nn.Graph()
    g.config.enable_auto_parallel(True, memory_cap=2**20)
    assert g.config.auto_parallel["memory_cap"] == 2**20
    v = g.config.key()
    g.config.enable_auto_parallel(False)
    assert g.config.auto_parallel is None and g.config.key() != v
    with pytest.raises(ValueError, match="memory_cap"):
        g.config.enable_auto_parallel(True, memory_cap=0)


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])
def test_gpt_on_the_chosen_plan_trains_like_one_process(n):
    assert "auto_parallel ok" in run_ranks("auto_parallel.py", n, timeout=200).stdout
