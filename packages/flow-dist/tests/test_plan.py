"""flow_dist.plan: op cost formulas, alpha-beta collectives, simulate() invariants and the CLI (one process)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import flow
from flow_dist.plan import (
    Cluster,
    DeviceProfile,
    Link,
    Strategy,
    calibrate,
    gpt_workload,
    search,
    simulate,
    step_cost,
    trace_step,
)
from flow_dist.plan import devices as D
from flow_dist.plan.collectives import collective_time, fit_alpha_beta, hierarchical_time
from flow_dist.plan.cost import op_cost

nn, F = flow.nn, flow.nn.functional
TINY = dict(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32)


@pytest.fixture(scope="module")
def tiny_gpt():
    GPTConfig = pytest.importorskip("flow_models.nlp.gpt", reason="the zoo (flow-models) is not installed").GPTConfig

    return gpt_workload(GPTConfig(**TINY), trace_layers=2)


def _linear_step(batch=6, fin=8, fout=4):
    flow.manual_seed(0)
    m = nn.Linear(fin, fout)
    opt = flow.optim.Adam(m.parameters(), lr=1e-3)
    x, y = flow.randn(batch, fin), flow.randint(0, fout, (batch,))
    return trace_step(m, (x,), y, F.cross_entropy, opt)


# -- cost formulas -------------------------------------------------------------------------------
def test_linear_backward_and_adam_against_hand_counts():
    b, fin, fout = 6, 8, 4
    ir = _linear_step(b, fin, fout)
    costs = [op_cost(nd) for nd in ir.nodes]
    lin = [c for c in costs if c.name == "linear"]
    assert len(lin) == 1 and lin[0].flops == 2 * b * fin * fout + b * fout  # multiply-adds, then the bias
    assert lin[0].bytes == 4 * (b * fin + fout * fin + fout + b * fout)  # float32 x, W, bias, out
    bwd = [c for c in costs if c.name == "matmul" and c.phase == "backward"]
    # the weight gradient g^T x (b contracted); the input's gradient is not needed (x is an input)
    assert sum(c.flops for c in bwd) == 2 * b * fin * fout * len(bwd)
    adam = [c for c in costs if c.rule == "optimizer"]
    n = fin * fout + fout
    assert sum(c.flops for c in adam) == 12 * n and sum(c.bytes for c in adam) == 7 * 4 * n


def test_conv_and_pool_formulas():
    flow.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(5 * 4 * 4, 2))
    opt = flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    ir = trace_step(m, (flow.randn(2, 3, 8, 8),), flow.randint(0, 2, (2,)), F.cross_entropy, opt)
    by = {}
    for nd in ir.nodes:
        by.setdefault(nd.name, []).append(op_cost(nd))
    conv = 2 * (2 * 5 * 8 * 8) * (3 * 3 * 3)  # 2 * output elements * (C_in * kh * kw)
    assert [c.flops for c in by["conv2d"]] == [conv]
    assert [c.flops for c in by["conv2d_backward_weight"]] == [conv]  # as large as forward
    assert "conv2d_backward_input" not in by  # the image needs no gradient
    assert [c.flops for c in by["max_pool2d"]] == [2 * 5 * 8 * 8 * 4]  # each input element compared once
    assert sum(c.flops for c in by["sgd_update"]) == 4 * sum(p.numel() for p in m.parameters())


def test_views_cost_nothing_and_unknown_ops_fall_back_to_io_bytes():
    ir = _linear_step()
    for nd in ir.nodes:
        c = op_cost(nd)
        if nd.name in ("reshape", "permute"):
            assert c.flops == 0 and c.bytes == 0 and c.rule == "view"

    class Fake:  # a node of an op no formula knows
        name = "mystery_op"
        tags = {"phase": "forward"}
        scope = ""
        attrs: dict = {}
        op = None

        def __init__(self, ins, outs):
            self.inputs, self.outputs = ins, outs

        def input_values(self):
            return iter(self.inputs)

    v = next(iter(ir.nodes)).outputs[0]
    c = op_cost(Fake([v, v], [v]))
    item = v.numel() * 4
    assert c.rule == "generic" and c.bytes == 3 * item and c.flops == v.numel()
    with pytest.raises(TypeError, match="GraphIR"):
        step_cost([1, 2])


def _no_generic(ir):
    sc = step_cost(ir)
    assert len(sc.ops) == len(ir.nodes) and all(c.flops >= 0 and c.bytes >= 0 for c in sc.ops)
    assert sc.generic() == [], sc.generic()  # every op of the step has a formula
    return sc


def test_every_op_of_gpt_mlp_and_resnet_steps_has_a_formula(tiny_gpt):
    import os
    import sys

    resnet = pytest.importorskip("flow_models.vision.resnet", reason="the zoo (flow-models) is not installed")
    ResNet, ResNetConfig = resnet.ResNet, resnet.ResNetConfig

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks"))
    from models import make_mlp

    mlp = make_mlp(nn, F)
    ir = trace_step(
        mlp, (flow.randn(4, 784),), flow.randint(0, 10, (4,)), F.cross_entropy, flow.optim.SGD(mlp.parameters(), lr=0.1)
    )
    sc = _no_generic(ir)
    # forward 2*b*(784*1024 + 1024*1024 + 1024*10) plus the bias adds, the weight gradients as much
    # again, the input gradients of the two upper layers
    w = 784 * 1024 + 1024 * 1024 + 1024 * 10
    fwd = sum(c.flops for c in sc.ops if c.rule == "contraction" and c.phase == "forward")
    assert fwd == 2 * 4 * w + 4 * (1024 + 1024 + 10)
    res = ResNet(ResNetConfig(num_classes=10, layers=(1, 1, 1, 1), width=8))
    opt = flow.optim.SGD(res.parameters(), lr=0.1, momentum=0.9)
    _no_generic(trace_step(res, (flow.randn(2, 3, 32, 32),), flow.randint(0, 10, (2,)), F.cross_entropy, opt))
    assert tiny_gpt.layer and tiny_gpt.rest and tiny_gpt.optimizer
    assert all(c.rule != "generic" for c in tiny_gpt.layer + tiny_gpt.rest + tiny_gpt.optimizer)


def test_gpt_step_flops_match_the_6nd_rule_plus_attention(tiny_gpt):
    w, cfg = tiny_gpt, TINY
    assert w.params == sum(
        [cfg["vocab_size"] * 32, 16 * 32, 2 * (12 * 32 * 32 + 13 * 32), 2 * 32]
    )  # tied head: counted once
    tokens = w.batch * w.seq
    matmul = sum(c.flops for c in w.layer if c.rule == "contraction") * w.n_layer + sum(
        c.flops for c in w.rest if c.rule == "contraction"
    )
    # 6 * (non-embedding weights + the head) * tokens, and q k^T, p v: 12 * layers * seq * d * tokens;
    # the first layer's input needs no gradient of the embeddings' matmul, and biases add a little
    weights = 2 * 12 * 32 * 32 + cfg["vocab_size"] * 32
    want = 6 * weights * tokens + 12 * w.n_layer * w.seq * 32 * tokens
    assert 0.95 < matmul / want < 1.1, matmul / want


# -- devices ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def calibrated_cpu():
    return calibrate.calibrate_cpu(0.1)  # short: the test checks the structure, not the figures


def test_device_profiles_and_the_cpu_override(monkeypatch, tmp_path, calibrated_cpu):
    assert D.H200.effective_flops == pytest.approx(790e12 * 0.45) and D.H200.memory == 141e9
    with pytest.raises(ValueError, match="flops"):
        DeviceProfile("x", flops=0, mem_bandwidth=1)
    with pytest.raises(ValueError, match="flops_efficiency"):
        DeviceProfile("x", flops=1, mem_bandwidth=1, flops_efficiency=1.5)
    monkeypatch.setenv(D.CPU_PROFILE_ENV, "20,8")
    p = D.cpu_profile()
    assert p.flops == 20e9 and p.mem_bandwidth == 8e9
    monkeypatch.setenv(D.CPU_PROFILE_ENV, "fast")
    with pytest.raises(ValueError, match="GFLOPS,GBPS"):
        D.cpu_profile()
    # measured once, then read back from the cache
    monkeypatch.delenv(D.CPU_PROFILE_ENV)
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(calibrate, "calibrate_cpu", lambda: calls.append(1) or calibrated_cpu)
    a, b = D.cpu_profile(), D.cpu_profile()
    assert a == b and calls == [1] and a.flops > 1e8 and a.mem_bandwidth > 1e8
    cached = json.loads((tmp_path / "plan" / "cpu-calibrated-v2.json").read_text())
    assert cached["flops"] == a.flops and len(cached["gemm_curve"]) == len(a.gemm_curve) > 3
    # an op on global tensors pays the SBP handler on top of a local op's dispatch (about 20x here)
    assert cached["global_overhead"] == a.global_overhead > a.eager_overhead > 0
    assert a.op_overhead("global") == pytest.approx(a.eager_overhead + a.global_overhead)
    with pytest.raises(ValueError, match="'eager', 'graph' or 'global'"):
        a.op_overhead("lazy")


# -- collectives -----------------------------------------------------------------------------------
def test_alpha_beta_collectives_against_closed_forms():
    link = Link(alpha=1e-5, bandwidth=1e9)
    n, p = 8e6, 8
    assert collective_time("all_reduce", n, p, link, "ring") == pytest.approx(2 * 7 * 1e-5 + 2 * 7 / 8 * n / 1e9)
    assert collective_time("all_reduce", n, p, link, "tree") == pytest.approx(2 * 3 * 1e-5 + 2 * n / 1e9)
    assert collective_time("reduce_scatter", n, p, link, "ring") == pytest.approx(7e-5 + 7 / 8 * n / 1e9)
    assert collective_time("all_gather", n, p, link, "tree") == pytest.approx(3e-5 + 7 / 8 * n / 1e9)
    assert collective_time("all_to_all", n, p, link) == pytest.approx(7e-5 + 7 / 8 * n / 1e9)
    assert collective_time("send_recv", n, 2, link) == pytest.approx(1e-5 + n / 1e9)
    # small messages: the tree's log p latency wins; large: the ring's bandwidth term
    assert collective_time("all_reduce", 8, 64, link, "best") == collective_time("all_reduce", 8, 64, link, "tree")
    big = 1e9  # past the crossover p ((p-1) - log2 p) alpha / beta = 36 MB
    assert collective_time("all_reduce", big, 64, link, "best") == collective_time("all_reduce", big, 64, link, "ring")
    assert collective_time("all_reduce", n, 1, link) == 0.0
    with pytest.raises(ValueError, match="unknown collective"):
        collective_time("all_sum", n, p, link)
    with pytest.raises(ValueError, match="alpha >= 0"):
        Link(-1, 1)


def test_hierarchical_all_reduce_and_cluster_groups():
    intra, inter = Link(1e-6, 400e9), Link(1e-5, 50e9)
    n = 1e9
    got = hierarchical_time("all_reduce", n, 8, 4, intra, inter, "ring")
    want = (
        collective_time("reduce_scatter", n, 8, intra, "ring")
        + collective_time("all_reduce", n / 8, 4, inter, "ring")
        + collective_time("all_gather", n, 8, intra, "ring")
    )
    assert got == pytest.approx(want)
    c = Cluster.h200(64)
    assert (
        c.nodes == 8
        and c.group_shape(8, 1) == (8, 1)
        and c.group_shape(8, 8) == (1, 8)
        and c.group_shape(16, 4) == (2, 8)
    )
    # a node-local group runs on NVLink only; the same size across nodes is slower
    assert c.collective("all_reduce", n, 8, 1) < c.collective("all_reduce", n, 8, 8)
    with pytest.raises(ValueError, match="does not fit"):
        c.group_shape(16, 8)
    with pytest.raises(ValueError, match="fill nodes"):
        Cluster(12, 8, intra, inter)


def test_fit_alpha_beta_recovers_a_line_and_cluster_reads_the_json(tmp_path):
    sizes = [8 << (2 * i) for i in range(8)]
    link = fit_alpha_beta(sizes, [3e-5 + s * 2e-10 for s in sizes])
    assert link.alpha == pytest.approx(3e-5) and link.beta == pytest.approx(2e-10)
    with pytest.raises(ValueError, match="pairs"):
        fit_alpha_beta([1], [1])
    path = tmp_path / "mpi.json"
    path.write_text(
        json.dumps({"ping_pong": {"alpha": 5e-5, "beta": 1e-9}, "all_reduce": {"4": {"alpha": 6e-4, "beta": 3e-9}}})
    )
    dev = DeviceProfile("cpu", 1e10, 1e10)
    c2 = Cluster.local(2, str(path), dev)
    assert c2.intra_link.alpha == 5e-5 and c2.intra_link.beta == pytest.approx(1e-9)
    c4 = Cluster.local(4, str(path), dev)
    # the fitted all-reduce line is what the ring formula gives back on that link
    assert c4.collective("all_reduce", 1e6, 4) == pytest.approx(6e-4 + 1e6 * 3e-9)
    path.write_text("{}")
    with pytest.raises(ValueError, match="ping_pong"):
        Cluster.local(2, str(path), dev)
    # a rank given half a core takes twice as long for everything
    half = Cluster.local(2, None, dev, cpu_share=0.5, cores=2).device
    assert half.slowdown == 2 and half.flops == dev.flops
    with pytest.raises(ValueError, match="cpu_share"):
        Cluster.local(2, None, dev, cpu_share=0)


# -- simulate ----------------------------------------------------------------------------------
def test_more_dp_ranks_less_compute_per_rank_and_zero_saves_memory(tiny_gpt):
    # without the launch cost per op, which a tiny model's step is dominated by and DP does not divide
    bare = dataclasses.replace(D.H200, eager_overhead=0.0, graph_overhead=0.0)
    r1 = simulate(tiny_gpt, dataclasses.replace(Cluster.h200(1), device=bare), Strategy(dp=1), 64)
    r8 = simulate(tiny_gpt, dataclasses.replace(Cluster.h200(8), device=bare), Strategy(dp=8), 64)
    assert r8.compute_time < r1.compute_time / 4 and r8.comm_volume["dp"] > 0 == r1.comm_volume["dp"]
    mem = [simulate(tiny_gpt, Cluster.h200(8), Strategy(dp=8, zero_stage=z), 64).memory for z in range(4)]
    assert mem[1]["optimizer"] == pytest.approx(mem[0]["optimizer"] / 8)
    assert mem[2]["gradients"] == pytest.approx(mem[0]["gradients"] / 8)
    assert mem[3]["parameters"] == pytest.approx(mem[0]["parameters"] / 8)
    assert all(a["total"] > b["total"] for a, b in zip(mem, mem[1:]))
    # mixed precision: 2 + 2 + 12 bytes per parameter, as in the ZeRO paper
    m0 = mem[0]
    assert (m0["parameters"] + m0["gradients"] + m0["optimizer"]) == pytest.approx(16 * tiny_gpt.params)
    z3 = simulate(tiny_gpt, Cluster.h200(8), Strategy(dp=8, zero_stage=3, overlap=False), 64)
    assert z3.comm_volume["zero"] > 0 and z3.comm_time["zero"] > 0


def test_pipeline_bubble_tp_collectives_and_bad_strategies(tiny_gpt):
    c = Cluster.h200(2)
    for m in (1, 2, 4, 8):
        r = simulate(tiny_gpt, c, Strategy(pp=2, micro_batches=m), 8)
        assert r.bubble == pytest.approx((2 - 1) / (m + 2 - 1))
        assert r.comm_volume["pp"] > 0 and any(k == "pipeline bubble" for k, _ in r.critical_path)
    tp = simulate(tiny_gpt, c, Strategy(tp=2), 8)
    act = 8 * 16 * 32 * 2  # micro-batch x seq x hidden, bf16
    # 2 all-reduces in forward and 2 in backward per block, each sending 2 (p-1)/p of the message,
    # plus the vocabulary-parallel embedding and head (2 of the activation, 3 of one value per token)
    row = 8 * 16 * 2
    assert tp.comm_volume["tp"] == pytest.approx(2 * 0.5 * (4 * 2 * act + 2 * act + 3 * row))
    # Megatron splits the projections and the vocabulary; layer norms, row-parallel biases and the
    # position table stay whole on each rank (bf16: 2 bytes a parameter)
    from flow_dist.plan.tp_trace import tp_shard_model
    from flow_models.nlp.gpt import GPTConfig

    local = tp_shard_model(GPTConfig(**TINY), 2)
    per_rank = sum(math.prod(p.shape) for p in {id(p): p for p in local.parameters()}.values())
    assert tp.memory["parameters"] == pytest.approx(2 * per_rank)
    whole = simulate(tiny_gpt, Cluster.h200(1), Strategy(), 8).memory["parameters"]
    assert whole / 2 < tp.memory["parameters"] < whole
    with pytest.raises(ValueError, match="ranks"):
        simulate(tiny_gpt, c, Strategy(dp=4), 8)
    with pytest.raises(ValueError, match="micro-batches"):
        simulate(tiny_gpt, c, Strategy(dp=2, micro_batches=3), 8)
    with pytest.raises(ValueError, match="pipeline stages"):
        simulate(tiny_gpt, Cluster(4, 8, c.intra_link, c.inter_link), Strategy(pp=4), 8)  # 2 layers
    with pytest.raises(ValueError, match="zero_stage"):
        Strategy(zero_stage=4)


def test_search_respects_the_memory_cap(tiny_gpt):
    c = Cluster.h200(8)
    free = search(tiny_gpt, c, 64)
    assert free is not None and free.strategy.ranks == 8
    cap = free.memory["total"] * 0.6
    tight = search(tiny_gpt, c, 64, memory_cap=cap)
    assert tight is not None and tight.memory["total"] <= cap and tight.step_time >= free.step_time
    assert search(tiny_gpt, c, 64, memory_cap=1.0) is None


def test_cli_prints_a_table(capsys):
    pytest.importorskip("flow_models.nlp.gpt", reason="the zoo (flow-models) is not installed")
    from flow_dist.plan.__main__ import main

    assert main(["--model", "tiny", "--gpus", "1,2,8", "--batch", "16"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in out if line.strip() and line.split()[0].isdigit()]
    assert [r[0] for r in rows] == ["1", "2", "8"]
    # GPUs, strategy (5 words), step ms, GiB, tokens/s, MFU, scaling
    steps = [float(r[6]) for r in rows]
    assert all(math.isfinite(t) and t > 0 for t in steps) and rows[0][10] == "100.0%"
    assert rows[0][1:6] == ["dp1", "tp1", "pp1", "m1", "z0"]
    with pytest.raises(SystemExit):
        main(["--gpus", "eight"])


# -- calibration and oversubscription --------------------------------------------------------------
def _calibrated(**kw):
    base = dict(
        name="cal",
        flops=1e10,
        mem_bandwidth=1e10,
        dtype_bytes=8,
        fuses_elementwise=False,
        gemm_curve=((1e6, 0.1), (1e8, 0.5), (1e10, 0.9)),
        linear_curve=((1e6, 0.05), (1e10, 0.5)),
        op_seconds=(("gelu", 2e-8), ("add", 1e-9)),
        eager_overhead=10e-6,
        graph_overhead=1e-6,
    )
    return DeviceProfile(**{**base, **kw})


def test_gemm_efficiency_curve_interpolates_in_log_flops_and_clamps():
    dev = _calibrated()
    assert dev.gemm_efficiency(1e7) == pytest.approx(0.3)  # halfway between 1e6 and 1e8 in log
    assert dev.gemm_efficiency(1e2) == 0.1 and dev.gemm_efficiency(1e12) == 0.9
    assert dev.gemm_efficiency(1e8, "linear") == pytest.approx(0.275)  # linear has its own curve
    assert _calibrated(linear_curve=()).gemm_efficiency(1e8, "linear") == 0.5  # else the GEMM's
    assert D.H200.gemm_efficiency(1e12) == 0.45 and D.H200.gemm_efficiency(1e6) < 0.05
    assert DeviceProfile("x", 1, 1, flops_efficiency=0.7).gemm_efficiency(123.0) == 0.7  # no curve
    with pytest.raises(ValueError, match="gemm_curve"):
        _calibrated(gemm_curve=((1e6, 1.5),))
    with pytest.raises(ValueError, match="op_seconds"):
        _calibrated(op_seconds=(("gelu", 0.0),))
    with pytest.raises(ValueError, match="eager_overhead"):
        _calibrated(eager_overhead=-1.0)
    with pytest.raises(ValueError, match="mode"):
        dev.op_overhead("lazy")
    # the JSON round trip (lists back to tuples) and unknown keys
    again = DeviceProfile.from_dict(json.loads(json.dumps(dataclasses.asdict(dev))))
    assert again == dev and hash(again) == hash(dev)
    with pytest.raises(ValueError, match="unknown keys"):
        DeviceProfile.from_dict({**dataclasses.asdict(dev), "turbo": 1})


def test_calibrated_op_times_overheads_and_slowdown():
    from flow_dist.plan.cost import OpCost
    from flow_dist.plan.simulate import _scaled

    dev = _calibrated()
    # a batched product: 8 products of 1e7 FLOPs each run at the 1e7 point of the curve
    mm = OpCost("matmul", 8e7, 1e6, "contraction", calls=8.0)
    assert mm.time(dev) == pytest.approx(1e-6 + 8e7 / (1e10 * 0.3))
    assert mm.time(dev, "eager") == pytest.approx(10e-6 + 8e7 / (1e10 * 0.3))
    # twice the micro-batch: twice the products of the same size; a linear gets one larger product
    assert _scaled(mm, 2).calls == 16 and _scaled(mm, 2).time(dev) == pytest.approx(1e-6 + 16e7 / 3e9)
    lin = OpCost("linear", 1e8, 1e6, "contraction")
    assert _scaled(lin, 100).calls == 1 and lin.time(dev) == pytest.approx(1e-6 + 1e8 / (1e10 * 0.275))
    # a calibrated elementwise op takes its measured time per element, an uncalibrated one the roofline
    gelu = OpCost("gelu", 8e4, 1.6e5, "per_element", passes=8, elements=1e4)
    assert gelu.time(dev) == pytest.approx(1e-6 + 1e4 * 2e-8)
    where = OpCost("where", 1e4, 3.2e5, "elementwise", elements=1e4)
    assert where.time(dev) == pytest.approx(1e-6 + 3.2e5 / 1e10)
    # views: free in a graph, a dispatch in eager; collectives are costed elsewhere
    view = OpCost("reshape", 0, 0, "view")
    assert view.time(dev) == 0 and view.time(dev, "eager") == 10e-6
    assert OpCost("sbp_boxing", 0, 0, "comm").time(dev, "eager") == 0
    slow = dataclasses.replace(dev, slowdown=2.0)
    assert gelu.time(slow) == pytest.approx(2 * gelu.time(dev)) and view.time(slow, "eager") == 20e-6


def test_oversubscription_and_background_load_formulas(tmp_path):
    from flow_dist.plan.calibrate import background_load
    from flow_dist.plan.cluster import oversubscription

    assert oversubscription(1, 2) == 1 and oversubscription(2, 2) == 1 and oversubscription(4, 2) == 2
    assert oversubscription(2, 2, background=1.0) == 1.5 and oversubscription(1, 2, background=0.5) == 1
    with pytest.raises(ValueError, match="ranks >= 1"):
        oversubscription(0, 2)
    # runnable threads sampled during a run of 2 ranks: the ranks and the sampler are not background
    assert background_load([3, 3, 3], 2) == 0 and background_load([5, 6], 2) == pytest.approx(2.5)
    assert background_load([1], 2) == 0
    with pytest.raises(ValueError, match="sample"):
        background_load([], 2)
    dev = _calibrated()
    c4 = Cluster.local(4, None, dev, cores=2)
    assert c4.cores == 2 and c4.device.slowdown == 2 and Cluster.local(2, None, dev, cores=2).device.slowdown == 1
    assert Cluster.local(2, None, dev, cores=2, background=2.0).device.slowdown == 2
    # send/recv takes the ping-pong fit at the same rank count, collectives the all-reduce fit
    path = tmp_path / "mpi.json"
    fits = {
        "ping_pong": {"alpha": 1e-4, "beta": 1e-9},
        "ping_pong_by_ranks": {"4": {"alpha": 5e-3, "beta": 1e-9}},
        "all_reduce": {"4": {"alpha": 3e-2, "beta": 3e-9}},
    }
    path.write_text(json.dumps(fits))
    c = Cluster.local(4, str(path), dev, cores=2)
    assert c.collective("send_recv", 0.0, 2, 2) == 0 and c.collective("send_recv", 1e3, 2, 2) == pytest.approx(
        5e-3 + 1e-6
    )
    assert c.collective("all_reduce", 1e6, 4) == pytest.approx(3e-2 + 1e6 * 3e-9)
    assert Cluster.local(2, str(path), dev).collective("send_recv", 1e3, 2) == pytest.approx(1e-4 + 1e-6)


def test_compute_scales_with_ranks_per_core_and_eager_pays_dispatch(tiny_gpt):
    dev = _calibrated()
    st = Strategy(dp=4, overlap=False)
    on4 = simulate(tiny_gpt, Cluster.local(4, None, dev, cores=4), st, 8)
    on2 = simulate(tiny_gpt, Cluster.local(4, None, dev, cores=2), st, 8)
    assert on2.compute_time == pytest.approx(2 * on4.compute_time)
    eager = dataclasses.replace(tiny_gpt, mode="eager")
    g, e = (simulate(w, Cluster.local(1, None, dev), Strategy(), 2) for w in (tiny_gpt, eager))
    ops = len(tiny_gpt.rest) + 2 * len(tiny_gpt.layer) + len(tiny_gpt.optimizer)
    views = sum(c.rule == "view" for c in tiny_gpt.rest) + 2 * sum(c.rule == "view" for c in tiny_gpt.layer)
    comm = sum(c.rule == "comm" for c in tiny_gpt.rest + tiny_gpt.layer)
    # eager: 10 us for every op, views included; graph: 1 us for every op but the views
    extra = (ops - comm) * 10e-6 - (ops - comm - views) * 1e-6
    assert e.compute_time - g.compute_time == pytest.approx(extra)


def test_tp_on_the_gpt_counts_13_all_reduces_a_step(tiny_gpt):
    # latency only: each all-reduce of 2 ranks costs 2 alpha, whatever its size
    c = Cluster(2, 2, Link(1e-3, 1e18), Link(1e-3, 1e18), _calibrated())
    r = simulate(tiny_gpt, c, Strategy(tp=2), 8)
    assert r.comm_time["tp"] == pytest.approx(13 * 2e-3)  # 4 per block x 2 blocks + embedding, head, loss
    mlp_only = simulate(tiny_gpt, c, Strategy(tp=2, tp_scopes=("mlp",)), 8)
    assert mlp_only.comm_time["tp"] == pytest.approx(4 * 2e-3)


def test_calibrate_cpu_measures_every_kind(calibrated_cpu):
    from flow_dist.plan.calibrate import runnable

    p = calibrated_cpu
    assert len(p.gemm_curve) >= 5 and len(p.linear_curve) >= 5 and p.flops > 1e8
    names = {n for n, _ in p.op_seconds}
    assert {"gelu", "gelu_backward", "layer_norm_backward", "softmax", "add", "adam_update"} <= names
    # a tanh per element costs more than an add per element (the roofline had them alike)
    assert p.seconds_per_element("gelu") > 2 * p.seconds_per_element("add")
    assert 0 < p.graph_overhead and 0 < p.eager_overhead < 1e-3
    r = runnable()
    assert r is None or r >= 1  # this test's own thread is running while it reads


def test_dp_loss_collectives_and_per_parameter_buckets(tiny_gpt):
    # latency only: an all-reduce of 2 ranks costs 2 alpha whatever its size
    c = Cluster(2, 2, Link(1e-3, 1e18), Link(1e-3, 1e18), _calibrated())
    one = simulate(tiny_gpt, c, Strategy(dp=2, overlap=False), 8)
    assert one.comm_time["dp"] == pytest.approx(2e-3)  # the gradients in one bucket
    loss = simulate(tiny_gpt, c, Strategy(dp=2, overlap=False, loss_collectives=3), 8)
    assert loss.comm_time["dp"] == pytest.approx(4 * 2e-3)  # + the loss's 3 small all-reduces
    assert loss.step_time - one.step_time == pytest.approx(3 * 2e-3)
    eager = simulate(tiny_gpt, c, Strategy(dp=2, overlap=False, dp_buckets=26), 8)
    assert eager.comm_time["dp"] == pytest.approx(26 * 2e-3)  # one all-reduce per gradient
    # the volume does not change, only the latencies: with alpha 0 the bucket count is free
    bw = Cluster(2, 2, Link(0.0, 1e9), Link(0.0, 1e9), _calibrated())
    a, b = (simulate(tiny_gpt, bw, Strategy(dp=2, overlap=False, dp_buckets=k), 8) for k in (1, 26))
    assert a.comm_time["dp"] == pytest.approx(b.comm_time["dp"])
    z = simulate(tiny_gpt, c, Strategy(dp=2, overlap=False, zero_stage=1, dp_buckets=5), 8)
    assert z.comm_time["dp"] == pytest.approx(5 * 2 * 1e-3)  # 5 reduce-scatters + 5 all-gathers of 1 alpha
    # no DP group: the loss is local
    assert simulate(tiny_gpt, Cluster(1, 1, c.intra_link, c.inter_link, c.device), Strategy(loss_collectives=3), 8)
    with pytest.raises(ValueError, match="loss_collectives"):
        Strategy(dp=2, loss_collectives=-1)
    with pytest.raises(ValueError, match="dp_buckets"):
        Strategy(dp=2, dp_buckets=0)


def test_graph_collectives_counts_the_communicating_boxing_nodes():
    from types import SimpleNamespace

    from flow_dist.plan.graph_count import graph_collectives

    P2 = flow.placement("cpu", list(range(1)))
    two = SimpleNamespace(hierarchy=(2,))
    S, B, Pp = flow.sbp.split(0), flow.sbp.broadcast, flow.sbp.partial_sum

    def box(frm, to, shape, placement=two):
        x = SimpleNamespace(shape=shape, dtype=flow.float64)
        attrs = dict(sbp=(frm,), axis=0, to=to, placement=placement)
        return SimpleNamespace(name="sbp_boxing", attrs=attrs, input_values=lambda: iter([x]))

    nodes = [
        box(Pp, B, ()),  # the loss: 8 bytes
        box(Pp, B, (1,)),
        box(Pp, S, (64, 32)),  # a reduce-scatter of 16 KiB
        box(S, B, (32, 32)),  # an all-gather
        box(B, S, (64, 32)),  # a slice: local
        box(Pp, B, (4,), placement=P2),  # one rank: nothing to send
        SimpleNamespace(name="sbp_all_reduce_start", attrs={}, input_values=lambda: iter([])),
        SimpleNamespace(name="add", attrs={}, input_values=lambda: iter([])),
    ]
    got = graph_collectives(SimpleNamespace(nodes=nodes))
    assert dict(got.counts) == {"P->B": 2, "P->S": 1, "S->B": 1}
    assert got.nbytes["P->B"] == 16 and got.nbytes["P->S"] == 64 * 32 * 8
    assert got.small == 2 and got.buckets == 1 and got.total() == 5
    assert graph_collectives(SimpleNamespace(nodes=nodes), small_limit=1 << 20).small == 4
    with pytest.raises(TypeError, match="graph IR"):
        graph_collectives([1, 2])


def test_graph_collectives_of_a_compiled_step_on_one_rank():
    from flow_dist.plan.graph_count import graph_collectives

    flow.manual_seed(0)
    m = nn.Linear(4, 2)
    P = flow.placement("cpu", [0])
    m.to_global(P, flow.sbp.broadcast)
    opt = flow.optim.SGD(m.parameters(), lr=0.1)

    class Step(nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x):
            loss = self.m(x).sum()
            loss.backward()
            return loss

    step = Step()
    step(flow.ones(3, 4).to_global(P, flow.sbp.broadcast))
    got = graph_collectives(step.ir)
    assert got.counts == {} and got.small == 0  # one rank: every conversion is local
