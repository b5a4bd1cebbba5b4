"""ZeRO in graph mode (``graph.config.enable_zero``, the ``zero`` pass): the multi-rank parity run at 2
and 4 ranks, and the single-process checks of the pass's registration and its refusals."""

from __future__ import annotations

import numpy as np
import pytest
from _ranks import needs_mpi, run_ranks

import flow
from flow.errors import FlowError
from flow.registry import REGISTRY
from flow_dist.zero.graph_pass import ZeroStateLayout


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])
def test_zero_graph_trains_like_the_graph_without_zero(n):
    out = run_ranks("zero_graph.py", n, timeout=240).stdout
    assert "zero_graph ok" in out, out


def test_the_zero_pass_is_registered_off_by_default_before_the_gradient_buckets():
    entry = REGISTRY.passes["zero"]
    assert not entry.enabled_by_default
    names = [e.name for e in REGISTRY.passes.ordered()]
    assert names.index("zero") < names.index("gradient_buckets")
    assert flow.nn.Graph().config.pass_enabled(entry) is False


def _step(stage):
    model = flow.nn.Linear(4, 2)
    opt = flow.optim.SGD(model.parameters(), lr=0.1)

    class Step(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, x):
            loss = self.model(x).sum()
            loss.backward()
            return loss

    step = Step()
    step.config.enable_zero(stage=stage, shard_min_size=1)
    return step, model


def test_stage_3_is_refused_at_compile():
    step, _ = _step(3)
    with pytest.raises(FlowError, match="stage=3"):
        step(flow.randn(3, 4))


def test_local_tensors_are_left_whole():
    # nothing global: no data-parallel axis, so the pass keeps the step as it is
    step, model = _step(1)
    flow.manual_seed(0)
    x = flow.randn(3, 4)
    w0 = model.weight.detach().numpy().copy()
    step(x)
    np.testing.assert_allclose(model.weight.detach().numpy(), w0 - 0.1 * np.tile(x.numpy().sum(0), (2, 1)))
    assert flow.optim._flat.state_layout(model.weight) is None


def test_zero_state_layout_on_one_rank_is_the_whole_tensor():
    pl = flow.placement("cpu", [0])
    lay = ZeroStateLayout(pl, (5, 3), (0,))
    assert lay.local_shape == (5, 3)
    a = np.arange(15.0).reshape(5, 3)
    np.testing.assert_array_equal(lay.from_param(a), a)
    g = lay.wrap(a)
    assert g.sbp == (flow.sbp.split(0),) and tuple(g.shape) == (5, 3)
    assert lay.same_as(ZeroStateLayout(pl, (5, 3), (0,))) and not lay.same_as(ZeroStateLayout(pl, (5, 4), (0,)))
