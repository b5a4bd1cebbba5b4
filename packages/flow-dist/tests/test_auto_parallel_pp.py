"""Pipeline degrees in the auto-parallel search and in ``python -m flow_dist.plan`` (single process).

Where memory forbids data parallelism alone the search prefers a pipeline or tensor parallelism;
on this CPU's tiny models it keeps data parallelism; every candidate is listed with its cost.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow_dist import auto_parallel as AP
from flow_dist.plan import H200, Cluster, DeviceProfile, Strategy, explore, gpt_workload, search, simulate

_zoo = pytest.importorskip("flow_models.nlp.gpt", reason="the zoo (flow-models) is not installed")
GPT, GPTConfig = _zoo.GPT, _zoo.GPTConfig

CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=4, n_head=4, n_embd=32, dropout=0.0)
DEV = DeviceProfile("cpu", 20e9, 8e9, dtype_bytes=8, fuses_elementwise=False)


def ids(batch=8):
    return flow.tensor(np.random.default_rng(0).integers(0, 64, (batch, 16)))


def gpt():
    flow.manual_seed(0)
    return GPT(CFG)


def test_a_small_h200_memory_forbids_dp_and_the_search_picks_pp_or_tp():
    # GPT-2 124M (traced with one block) on 8 H200s whose memory is cut to 2 GiB: data parallelism
    # alone (every rank holds the whole model and its optimizer: 124M x 16 B) does not fit
    work = gpt_workload(GPTConfig(n_layer=12, n_embd=768, n_head=12), seq=1024)
    c = Cluster.h200(8)
    cap = 2 * 2**30
    dp_only = simulate(work, c, Strategy(dp=8), 64)
    assert not dp_only.fits(cap)
    best = search(work, c, 64, cap, zero_stages=(0,))
    assert best is not None and best.fits(cap) and (best.strategy.pp > 1 or best.strategy.tp > 1)
    rows = explore(work, c, 64, cap, zero_stages=(0,))
    assert rows[0] is best or rows[0].strategy == best.strategy
    shapes = {(r.strategy.tp, r.strategy.pp) for r in rows}
    assert {(1, 1), (1, 2), (2, 1), (4, 1), (1, 4)} <= shapes and (8, 1) not in shapes  # 12 heads
    fitting = [r for r in rows if r.fits(cap)]
    assert best.step_time == min(r.step_time for r in fitting)
    # a pipeline is costed with its bubble (m + p - 1 slots) and micro-batches chosen from the divisors
    pp = next(r for r in rows if r.strategy.pp == 2 and r.strategy.tp == 1)
    m = pp.strategy.micro_batches
    assert pp.bubble == pytest.approx(1 / (m + 1)) and 64 // 4 % m == 0
    # with the full memory, data parallelism (ZeRO-free) is the fastest
    assert search(work, c, 64, H200.memory, zero_stages=(0,)).strategy == Strategy(dp=8)


def test_auto_parallel_scores_pipelines_and_keeps_dp_on_this_cpu():
    p = AP.plan(gpt(), ids(), 4, cluster=Cluster.local(4, device=DEV, cpu_share=1.0), mode="graph")
    assert p.best.name == "dp4" and p.search_best is p.best
    pipes = [c for c in p.candidates if c.pp > 1]
    # (dp, tp, pp): dp2 pp2, dp1 pp4, dp1 tp2 pp2 (4 layers, 4 heads, 4 ranks)
    assert sorted((c.dp, c.tp, c.pp) for c in pipes) == [(1, 1, 4), (1, 2, 2), (2, 1, 2)]
    for c in pipes:
        assert not c.applicable and c.note.startswith("scored only") and 0 < c.bubble < 1
        assert c.step_time > p.best.step_time
        assert c.name.endswith(f"pp{c.pp} m{c.micro_batches}")
    text = p.explain()
    assert "chosen: dp4" in text and all(c.name in text for c in p.candidates)
    assert "fastest that fits" not in text  # the search and the applied plan agree


def test_a_memory_cap_makes_the_search_prefer_a_pipeline_and_explain_says_so():
    free = AP.plan(gpt(), ids(), 4, cluster=Cluster.local(4, device=DEV, cpu_share=1.0), mode="graph")
    dp = next(c for c in free.candidates if c.name == "dp4")
    p = AP.plan(gpt(), ids(), 4, cluster=Cluster.local(4, device=DEV, cpu_share=1.0), memory_cap=0.6 * dp.memory)
    sb = p.search_best
    assert sb.fits and (sb.pp > 1 or sb.tp > 1) and sb.memory <= 0.6 * dp.memory
    assert p.best.fits and p.best.applicable and p.best.pp == 1
    text = p.explain()
    if sb is not p.best:
        assert f"fastest that fits: {sb.name}" in text and "does not build pipelines" in text
    assert "over the memory cap: " in text and "dp4" in text.split("over the memory cap: ")[1]
    assert "+" in "".join(line[:1] for line in p.table().splitlines()) or sb is p.best


def test_only_a_pipeline_fits_raises_and_names_it():
    cl = Cluster.local(4, device=DEV, cpu_share=1.0)
    with pytest.raises(AP.AutoParallelError, match=r"no applicable layout fits .* pp2 m\d+ fits .* scored only"):
        AP.plan(gpt(), ids(), 4, cluster=cl, memory_cap=0.3 * 2**20)


def test_pipeline_can_be_turned_off_and_the_cli_lists_pp_rows(capsys):
    p = AP.plan(gpt(), ids(), 4, cluster=Cluster.local(4, device=DEV, cpu_share=1.0), pipeline=False)
    assert all(c.pp == 1 for c in p.candidates)
    from flow_dist.plan.__main__ import main

    assert main(["--model", "tiny", "--gpus", "4", "--batch", "8", "--explain"]) == 0
    out = capsys.readouterr().out
    assert " pp2 " in out and "bubble" in out and out.count("dp") >= 4
