"""Pipeline parallelism (flow_dist.pipeline): in one process, a one-stage pipeline is gradient
accumulation over micro-batches (against torch on the whole batch where torch is installed), the
splitting helpers and the errors; under mpiexec, ranks/pipeline.py trains the zoo GPT in 2 stages
(GPipe, 1F1B) and in 2 replicas x 2 stages like one process on the whole batch."""

from __future__ import annotations

import numpy as np
import pytest
from _ranks import needs_mpi, run_ranks

import flow
from flow import nn
from flow_dist import pipeline as pp


def mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


@pytest.mark.parametrize("schedule", [pp.ScheduleGPipe, pp.Schedule1F1B])
@pytest.mark.parametrize("n_micro", [1, 4])
def test_one_stage_accumulates_the_whole_batch_gradient_as_torch(schedule, n_micro):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 6)), rng.standard_normal((8, 3))
    flow.manual_seed(0)
    model = mlp().to(flow.float64)
    ref = torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    ).double()
    with torch.no_grad():
        for (k, p), (k2, q) in zip(model.named_parameters(), ref.named_parameters()):
            assert k == k2
            q.copy_(torch.from_numpy(p.detach().numpy().copy()))
    loss = torch.nn.functional.mse_loss(ref(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()

    sched = schedule(pp.PipelineStage(pp.split_sequential(model, 1), 0, 1), n_micro, flow.nn.functional.mse_loss)
    losses = []
    out = sched.step(flow.tensor(x), target=flow.tensor(y), losses=losses)
    assert len(losses) == n_micro
    np.testing.assert_allclose(np.mean([float(v.numpy()) for v in losses]), loss.item(), rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)
    for (k, p), q in zip(model.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, atol=1e-14, err_msg=k)
    assert sched.timing["recv_wait_s"] == 0.0 and sched.timing["schedule_s"] > 0
    # GPipe keeps every micro-batch's activations until the backwards; 1F1B (one stage) only one
    assert sched.stage.max_in_flight == (n_micro if schedule is pp.ScheduleGPipe else 1)


def test_split_sequential_keeps_the_layer_names():
    model = mlp()
    stages = [pp.split_sequential(model, 2, s) for s in range(2)]
    assert [list(dict(s.named_children())) for s in stages] == [["0", "1", "2"], ["3", "4"]]
    names = [k for s in stages for k, _ in s.named_parameters()]
    assert names == [k for k, _ in model.named_parameters()]
    assert pp.stage_bounds(5, 3) == [(0, 2), (2, 4), (4, 5)]
    layers = list(model.children())
    assert list(pp.split_sequential(layers, 5, 4).children()) == [layers[4]]


def test_gpt_stages_cut_the_zoo_gpt():
    gpt_module = pytest.importorskip("flow_models.nlp.gpt")
    GPT, GPTConfig = gpt_module.GPT, gpt_module.GPTConfig

    flow.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=3, n_head=4, n_embd=32))
    first, middle, last = (pp.gpt_stages(gpt, 3, s) for s in range(3))
    assert first.tied_parameters == [gpt.transformer.wte.weight] and last.tied_parameters == [gpt.lm_head.weight]
    assert middle.tied_parameters == []
    assert [k for k, _ in middle.named_parameters()][0] == "transformer.h.1.ln_1.weight"
    assert "lm_head.weight" in dict(last.named_parameters()) and "transformer.ln_f.weight" in dict(last.state_dict())
    idx = flow.tensor(np.random.default_rng(0).integers(0, 64, (2, 16)))
    np.testing.assert_array_equal(last(middle(first(idx))).detach().numpy(), gpt(idx).detach().numpy())
    whole = pp.gpt_stages(gpt, 1)
    assert whole.tied_parameters == [] and len(list(whole.parameters())) == len(list(gpt.parameters()))


def test_bad_input_is_refused_with_what_was_wrong():
    model = mlp()
    with pytest.raises(pp.PipelineError, match="stage_index 1 is not in 0..0"):
        pp.PipelineStage(model, 1, 1)
    with pytest.raises(pp.PipelineError, match="num_stages must be a positive int"):
        pp.PipelineStage(model, 0, 0)
    with pytest.raises(pp.PipelineError, match="group_ranks \\[3\\] must be distinct ranks of the job of 1"):
        pp.PipelineStage(model, 0, 1, group_ranks=[3])
    with pytest.raises(pp.PipelineError, match="tied_stages \\[0, 2\\] are not all in 0..0"):
        pp.PipelineStage(model, 0, 1, tied_parameters=[model[0].weight], tied_stages=[0, 2])
    with pytest.raises(pp.PipelineError, match="dp_ranks \\[5\\] do not include this rank"):
        pp.PipelineStage(model, 0, 1, dp_ranks=[5])
    with pytest.raises(pp.PipelineError, match="module must be an nn.Module"):
        pp.PipelineStage(lambda x: x, 0, 1)
    with pytest.raises(pp.PipelineError, match="3 layer\\(s\\) do not fill 4 pipeline stages"):
        pp.split_sequential(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)), 4, 0)
    with pytest.raises(pp.PipelineError, match="not the zoo GPT"):
        pp.gpt_stages(model, 1)
    with pytest.raises(pp.PipelineError, match="the job has 1"):
        pp.pipeline_mesh(2)
    stage = pp.PipelineStage(model, 0, 1)
    with pytest.raises(pp.PipelineError, match="needs a loss_fn"):
        pp.ScheduleGPipe(stage, 2)
    with pytest.raises(pp.PipelineError, match="n_microbatches must be a positive int"):
        pp.Schedule1F1B(stage, 0, flow.nn.functional.mse_loss)
    sched = pp.ScheduleGPipe(stage, 3, flow.nn.functional.mse_loss)
    x, y = flow.randn(8, 6), flow.randn(8, 3)
    with pytest.raises(pp.PipelineError, match="input 0: a batch of 8 does not split along dim 0 into 3"):
        sched.step(x, target=y)
    with pytest.raises(pp.PipelineError, match="needs target="):
        sched.step(x)
    with pytest.raises(pp.PipelineError, match="needs the batch's inputs"):
        sched.step(target=y)
    with pytest.raises(pp.PipelineError, match="losses must be a list"):
        pp.ScheduleGPipe(stage, 2, flow.nn.functional.mse_loss).step(x, target=y, losses=())
    assert issubclass(pp.PipelineError, ValueError)


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])
def test_pipeline_trains_the_gpt_like_one_process(n):
    out = run_ranks("pipeline.py", n, timeout=300).stdout
    assert "pipeline ok" in out, out
