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
from flow_models.nlp.gpt import GPT, GPTConfig

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
    return AP.plan(gpt(), ids(), 4, cluster=cluster(4))


def test_candidates_cover_meshes_groups_and_the_best_is_fastest(free):
    names = {c.name for c in free.candidates}
    # 1 dp4 + 7 subsets of {attn, mlp, vocab} for each of tp2 and tp4
    assert len(free.candidates) == 15
    assert {"dp4", "dp2 tp2[attn+mlp]", "dp1 tp4[vocab]", "dp2 tp2[attn+mlp+vocab]"} <= names
    assert all(c.fits for c in free.candidates)
    assert free.best.step_time == min(c.step_time for c in free.candidates)
    assert free.best.name == "dp4"  # the tiny GPT: activations are small, data parallel wins
    text = free.table()
    assert "* dp4" in text and text.count("\n") == 16


def test_partial_tp_keeps_the_unsplit_groups_whole(free):
    by = {c.name: c for c in free.candidates}
    # more groups split: less memory per rank; all of them: the least
    assert by["dp2 tp2[attn+mlp+vocab]"].memory < by["dp2 tp2[attn+mlp]"].memory < by["dp2 tp2[mlp]"].memory
    assert by["dp2 tp2[mlp]"].memory < by["dp4"].memory
    # splitting the MLP as well divides its compute for the price of its two all-reduces: the
    # Megatron pair is faster than the attention alone at this size
    assert by["dp2 tp2[attn+mlp]"].step_time < by["dp2 tp2[attn]"].step_time


def test_a_memory_cap_below_data_parallel_picks_tensor_parallel(free):
    dp = next(c for c in free.candidates if c.tp == 1)
    p = AP.plan(gpt(), ids(), 4, cluster=cluster(4), memory_cap=0.75 * dp.memory)
    assert p.best.tp > 1 and p.best.fits and p.best.memory <= 0.75 * dp.memory
    assert not next(c for c in p.candidates if c.tp == 1).fits
    fitting = [c for c in p.candidates if c.fits]
    assert p.best.step_time == min(c.step_time for c in fitting)
    assert p.tp_plan()["transformer.h.*.mlp.c_fc"] == "colwise"
    assert p.input_sbp == (flow.sbp.split(0), flow.sbp.broadcast)


def test_zero_stages_when_asked_for_and_a_zero_plan_does_not_apply(free):
    dp = next(c for c in free.candidates if c.tp == 1)
    p = AP.plan(gpt(), ids(), 4, cluster=cluster(4), memory_cap=0.75 * dp.memory, zero_stages=(0, 1, 2, 3))
    assert p.best.zero_stage > 0 and p.best.tp == 1  # sharding the optimizer beats splitting the model here
    assert {c.zero_stage for c in p.candidates} == {0, 1, 2, 3}
    with pytest.raises(AP.AutoParallelError, match="ZeRO"):
        p.apply(gpt())


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
