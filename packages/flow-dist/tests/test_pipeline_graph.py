"""Pipeline parallelism in graph mode (flow_dist.pipeline.graph): in one process a graph with a
staged block runs its usual compiled step; under mpiexec, ranks/pipeline_graph.py trains the zoo
GPT in an nn.Graph as 2 stages x 4 micro-batches (1F1B) at 2 ranks and as 2 replicas x 2 stages
at 4 ranks, like one process on the whole batch."""

from __future__ import annotations

import numpy as np
import pytest
from _ranks import needs_mpi, run_ranks

import flow
import flow_dist  # noqa: F401  (the plugin provides the graph.pipeline hook)
from flow import nn
from flow_dist.pipeline.graph import run_pipeline_graph


class Train(nn.Graph):
    def __init__(self, model, opt, stage=None):
        super().__init__()
        self.model = model
        if stage is not None:
            self.model.to(nn.graph.GraphModule).set_stage(stage, flow.placement("cpu", ranks=[0]))
        self.add_optimizer(opt)
        self.config.set_gradient_accumulation_steps(2)

    def build(self, x, y):
        loss = nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        return loss


def test_one_rank_runs_the_usual_compiled_step():
    rng = np.random.default_rng(0)
    x, y = flow.tensor(rng.standard_normal((4, 3))), flow.tensor(rng.standard_normal((4, 2)))
    models = []
    for stage in (0, None):
        flow.manual_seed(0)
        m = nn.Linear(3, 2).double()
        g = Train(m, flow.optim.SGD(m.parameters(), lr=0.1), stage)
        assert run_pipeline_graph(g, (x, y), {}) is NotImplemented
        for _ in range(2):
            g(x, y)
        models.append(m)
    assert models[0].weight is not models[1].weight
    np.testing.assert_array_equal(models[0].weight.detach().numpy(), models[1].weight.detach().numpy())


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])
def test_gpt_in_a_pipelined_graph_trains_like_one_process(n):
    out = run_ranks("pipeline_graph.py", n, timeout=300).stdout
    assert "pipeline graph ok" in out, out
