"""ZeRO in graph mode (``graph.config.enable_zero``, the ``zero`` pass): the multi-rank parity run at 2
and 4 ranks (stages 1 and 2, bucketed and unbucketed reduce-scatters, peak memory), and the
single-process checks of the pass's registration, its refusals and the reduce-scatter bucket op."""

from __future__ import annotations

import numpy as np
import pytest
from _ranks import needs_mpi, run_ranks

import flow
from flow.errors import FlowError
from flow.registry import REGISTRY
from flow_dist.zero import buckets
from flow_dist.zero.graph_pass import ZeroStateLayout


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])
def test_zero_graph_trains_like_the_graph_without_zero(n):
    out = run_ranks("zero_graph.py", n, timeout=300).stdout
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


def test_the_bucket_op_on_a_group_of_one_gives_each_gradient_whole():
    pl = flow.placement("cpu", [0])
    a, b = np.arange(6.0).reshape(2, 3), np.arange(4.0)
    rows = buckets._kernel([a, b], pl, 0, (0,))
    np.testing.assert_array_equal(rows[0], a)
    np.testing.assert_array_equal(rows[1], b)


def test_the_bucket_op_splits_the_rows_as_split_0_does():
    # the meta of rank 1 of 3: its rows of each gradient (numpy.array_split's pieces)
    from flow.ops.meta import TensorMeta

    pl = flow.placement("cpu", [0])
    xs = [TensorMeta((7, 3), flow.float64, flow.device("cpu")), TensorMeta((5,), flow.float64, flow.device("cpu"))]
    assert buckets._rows((7, 3), 3, 1) == (2, 3) and buckets._rows((7, 3), 3, 0) == (3, 3)
    out = buckets._meta(xs, pl, 0, (0,))
    assert [tuple(m.shape) for m in out] == [(7, 3), (5,)]


@pytest.mark.parametrize(
    "xs, coord, match",
    [
        ([], (0,), "at least one tensor"),
        ([((2,), "float64"), ((2,), "float32")], (0,), "one dtype"),
        ([((), "float64")], (0,), "at least one dim"),
        ([((2,), "float64")], (1,), "coord"),
    ],
)
def test_the_bucket_op_refuses_bad_input(xs, coord, match):
    from flow.errors import OpError
    from flow.ops.meta import TensorMeta

    metas = [TensorMeta(s, getattr(flow, d), flow.device("cpu")) for s, d in xs]
    with pytest.raises(OpError, match=match):
        buckets._meta(metas, flow.placement("cpu", [0]), 0, coord)


def test_bucket_size_option():
    cfg = flow.nn.Graph().config
    assert buckets.bucket_size_bytes(cfg) == 25 * 2**20  # the gradient buckets' default
    cfg.set_option("gradient_buckets.bucket_size_mb", 4)
    assert buckets.bucket_size_bytes(cfg) == 4 * 2**20
    cfg.set_option("zero.bucket_size_mb", 0)  # one reduce-scatter per parameter
    assert buckets.bucket_size_bytes(cfg) == 0
    from flow.errors import OpError

    for bad in (-1, "big"):
        cfg.set_option("zero.bucket_size_mb", bad)
        with pytest.raises(OpError, match="zero.bucket_size_mb"):
            buckets.bucket_size_bytes(cfg)


def test_stage_2_caps_the_buckets_at_a_share_of_the_gradients():
    class Node:  # what stage_limit reads of a reduce-scatter node: its input's bytes
        def __init__(self, numel):
            self.inputs = [flow.zeros(numel, dtype=flow.float64)]

    nodes = [Node(1000), Node(3000)]  # 32,000 bytes of gradients
    assert buckets.stage_limit(nodes, 1, 2**20, 4) == 2**20
    assert buckets.stage_limit(nodes, 2, 2**20, 4) == 8000
    assert buckets.stage_limit(nodes, 2, 100.0, 4) == 100.0
    assert buckets.stage_limit(nodes, 2, 2**20, 1) == 2**20
