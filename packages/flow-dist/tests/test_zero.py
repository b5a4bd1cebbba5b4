"""ZeRO (flow_dist.zero): the multi-rank parity run at 2 and 4 ranks, and the single-process checks
(a job of one: every shard is the whole parameter) of its API and its errors."""

from __future__ import annotations

import numpy as np
import pytest
from _ranks import needs_mpi, run_ranks

import flow
from flow.optim.errors import OptimizerError
from flow_dist.comm.errors import CommError
from flow_dist.zero import ZeroRedundancyOptimizer, memory_report


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])
def test_zero_stages_train_like_one_process(n):
    out = run_ranks("zero.py", n, timeout=240).stdout
    assert "zero ok" in out, out


def _model():
    flow.manual_seed(0)
    return flow.nn.Sequential(flow.nn.Linear(4, 5), flow.nn.Tanh(), flow.nn.Linear(5, 2))


def _train(model, opt, steps=2):
    x = flow.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_one_process_equals_the_wrapped_optimizer(stage):
    ref_m = _model()
    ref_opt = flow.optim.Adam(ref_m.parameters(), lr=0.1)
    ref = _train(ref_m, ref_opt)
    m = _model()
    opt = ZeroRedundancyOptimizer(m.parameters(), flow.optim.Adam, stage=stage, module=m, lr=0.1)
    got = _train(m, opt)
    opt.gather_parameters()
    for a, b in zip(got if stage < 3 else [p.detach().numpy() for p in m.parameters()], ref):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    opt.consolidate_state_dict(to=0)
    sd, ref_sd = opt.state_dict(), ref_opt.state_dict()
    assert sd["param_groups"] == ref_sd["param_groups"]
    for i, st in ref_sd["state"].items():
        for key, v in st.items():
            np.testing.assert_allclose(sd["state"][i][key].numpy(), v.numpy(), rtol=1e-6)
    rep = memory_report(m, opt)
    assert rep["optimizer_state"] == 2 * 4 * sum(p.numel() for p in ref_m.parameters())
    assert rep["total"] == rep["parameters"] + rep["gradients"] + rep["optimizer_state"]


def test_stage_3_releases_parameters_until_forward():
    m = _model()
    opt = ZeroRedundancyOptimizer(m.parameters(), flow.optim.SGD, stage=3, module=m, lr=0.1)
    assert all(p.numel() == 0 for p in m.parameters())
    m(flow.ones(1, 4))  # the forward pre-hooks gather each layer's parameters
    assert [tuple(p.shape) for p in m.parameters()] == [(5, 4), (5,), (2, 5), (2,)]
    assert memory_report(m, opt)["parameters"] == 2 * 4 * 37  # the whole ones and the shards


def test_load_state_dict_continues_like_the_unsharded_optimizer():
    ref_m = _model()
    ref_opt = flow.optim.SGD(ref_m.parameters(), lr=0.1, momentum=0.9)
    _train(ref_m, ref_opt)
    m = _model()
    m.load_state_dict(ref_m.state_dict())
    opt = ZeroRedundancyOptimizer(m.parameters(), flow.optim.SGD, stage=2, lr=0.1, momentum=0.9)
    opt.load_state_dict(ref_opt.state_dict())
    for a, b in zip(_train(m, opt, 1), _train(ref_m, ref_opt, 1)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_lr_schedulers_drive_the_wrapped_optimizer():
    m = _model()
    opt = ZeroRedundancyOptimizer(m.parameters(), flow.optim.SGD, lr=0.1)
    assert isinstance(opt, flow.optim.Optimizer) and opt.param_groups[0]["params"][0] is m[0].weight
    sched = flow.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    _train(m, opt, 1)
    sched.step()
    _train(m, opt, 1)
    assert opt.param_groups[0]["lr"] == opt.optim.param_groups[0]["lr"] == 0.05
    with pytest.raises(NotImplementedError, match="not sharded"):
        opt.add_param_group({"params": [flow.nn.Parameter(flow.ones(2))]})


def test_closure_and_a_foreign_gradient_at_stage_2():
    m = _model()
    opt = ZeroRedundancyOptimizer(m.parameters(), flow.optim.SGD, stage=2, lr=0.1)
    x = flow.ones(2, 4)

    def closure():
        opt.zero_grad()
        loss = m(x).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.shape == () and all(p.grad is None for p in m.parameters())
    assert all(e.shard.grad is not None for e in opt._entries)
    m(x).sum().backward()
    m[0].weight.grad = flow.ones(5, 4)  # as DDP would set it after backward
    with pytest.raises(OptimizerError, match="DistributedDataParallel"):
        opt.step()


def test_bad_arguments_raise_clear_errors():
    m = _model()
    with pytest.raises(ValueError, match="stage must be 1, 2 or 3"):
        ZeroRedundancyOptimizer(m.parameters(), stage=4)
    with pytest.raises(ValueError, match="stage 3 needs module="):
        ZeroRedundancyOptimizer(m.parameters(), stage=3)
    with pytest.raises(TypeError, match="optimizer_class"):
        ZeroRedundancyOptimizer(m.parameters(), optimizer_class=object)
    with pytest.raises(ValueError, match="empty parameter list"):
        ZeroRedundancyOptimizer([])
    with pytest.raises(ValueError, match="not parameters of module="):
        ZeroRedundancyOptimizer(list(m.parameters()) + [flow.nn.Parameter(flow.ones(2))], stage=3, module=m)
    g = _model()
    g.to_global(flow.placement.all("cpu"), flow.sbp.broadcast)
    with pytest.raises(CommError, match="global tensors is not supported"):
        ZeroRedundancyOptimizer(g.parameters())
    opt = ZeroRedundancyOptimizer(m.parameters(), flow.optim.SGD, lr=0.1)
    with pytest.raises(RuntimeError, match="consolidate_state_dict"):
        opt.state_dict()
    with pytest.raises(ValueError, match="not a rank of the job"):
        opt.consolidate_state_dict(to=3)
    with pytest.raises(OptimizerError, match="has 1 parameters, the optimizer 4"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0], "lr": 0.1}]})
    with pytest.raises(OptimizerError, match="has shape"):
        opt.load_state_dict(
            {"state": {0: {"momentum_buffer": flow.ones(3)}}, "param_groups": opt.optim.state_dict()["param_groups"]}
        )
