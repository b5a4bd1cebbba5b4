"""Tensor parallelism (flow_dist.parallel): plans and their errors in one process (a 1-rank
placement), and the zoo GPT trained with TP=2 and DP=2 x TP=2 against one process under mpiexec
(tests/ranks/tensor_parallel.py)."""

from __future__ import annotations

import numpy as np
import pytest
from _ranks import needs_mpi, run_ranks

import flow
from flow_dist.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    TensorParallelError,
    gpt_plan,
    tensor_parallel,
)
from flow_dist.parallel.layers import QKVParallelLinear

nn, F = flow.nn, flow.nn.functional
S0, S1, B = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast


def one():
    return flow.placement("cpu", [0])


def mlp():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def test_plan_sets_the_sbp_of_each_parameter():
    m = tensor_parallel(mlp(), one(), {"0": "colwise", "2": RowwiseParallel()})
    assert m[0].weight.sbp == (S0,) and m[0].bias.sbp == (S0,)
    assert m[2].weight.sbp == (S1,) and m[2].bias.sbp == (B,)
    x = flow.randn(5, 4)
    np.testing.assert_allclose(m(x.to_global(one(), B)).detach().numpy(), mlp()(x).detach().numpy(), rtol=1e-6)


def test_style_classes_and_strings_agree_and_unmatched_modules_are_broadcast():
    a = tensor_parallel(mlp(), one(), {"0": ColwiseParallel})
    b = tensor_parallel(mlp(), one(), {"0": "colwise"})
    assert [p.sbp for p in a.parameters()] == [p.sbp for p in b.parameters()] == [(S0,), (S0,), (B,), (B,)]


def test_2d_placement_puts_the_plan_on_tp_axis():
    mesh = flow.placement("cpu", [[0]])
    m = tensor_parallel(mlp(), mesh, {"0": "colwise", "2": "rowwise"})
    assert m[0].weight.sbp == (B, S0) and m[2].weight.sbp == (B, S1)
    m = tensor_parallel(mlp(), mesh, {"0": "colwise"}, tp_axis=0)
    assert m[0].weight.sbp == (S0, B)


@pytest.mark.parametrize(
    "plan, kwargs, error, match",
    [
        ({"9": "colwise"}, {}, TensorParallelError, r"pattern\(s\) \['9'\] match no module"),
        ({"0": "diagonal"}, {}, TensorParallelError, "unknown style 'diagonal' for '0'"),
        ({"1": "colwise"}, {}, TensorParallelError, "'colwise' fits Linear or Embedding modules, but '1' is a ReLU"),
        ({"0": "colwise"}, {"tp_axis": 1}, TensorParallelError, "tp_axis 1 is not an axis"),
        ("megatron", {}, TensorParallelError, "unknown plan preset 'megatron'"),
        ([("0", "colwise")], {}, TypeError, "plan must be a mapping"),
    ],
)
def test_bad_plans_are_refused(plan, kwargs, error, match):
    with pytest.raises(error, match=match):
        tensor_parallel(mlp(), one(), plan, **kwargs)


def test_bad_model_or_placement():
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        tensor_parallel(object(), one(), {})
    with pytest.raises(TypeError, match="placement must be a flow.placement"):
        tensor_parallel(mlp(), [0], {})
    with pytest.raises(TensorParallelError, match="not laid out like the zoo GPT"):
        gpt_plan(mlp())


def gpt():
    zoo = pytest.importorskip("flow_models.nlp.gpt", reason="the zoo (flow-models) is not installed")
    GPT, GPTConfig = zoo.GPT, zoo.GPTConfig

    flow.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0))


def test_tied_modules_must_agree():
    with pytest.raises(TensorParallelError, match="lm_head.weight is the tensor transformer.wte.weight also holds"):
        tensor_parallel(gpt(), one(), {"transformer.wte": "colwise", "lm_head": "vocab"})


def test_gpt_plan_keeps_names_shapes_and_values():
    ref = gpt()
    m = tensor_parallel(gpt(), one(), "gpt")
    assert isinstance(m.transformer.h[0].attn.c_attn, QKVParallelLinear)
    assert m.transformer.h[0].attn.c_attn.weight.sbp == (S1,)
    want = ref.state_dict()
    got = m.state_dict()
    assert list(got) == list(want)
    for k in want:
        assert tuple(got[k].shape) == tuple(want[k].shape), k
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy(), err_msg=k)
    idx = flow.tensor(np.random.default_rng(0).integers(0, 64, (2, 16)))
    from flow_dist.handler import implicit_broadcast

    with implicit_broadcast():
        out = m(idx.to_global(one(), B))
    np.testing.assert_allclose(out.detach().numpy(), ref(idx).detach().numpy(), rtol=1e-5, atol=1e-6)
    m.load_state_dict(ref.state_dict())  # a single-process checkpoint loads into the split model


def test_qkv_parallel_linear_is_the_fused_linear():
    flow.manual_seed(0)
    lin = nn.Linear(6, 12)
    qkv = QKVParallelLinear.from_linear(lin, 3)
    x = flow.randn(2, 6)
    got = flow.cat(list(qkv(x)), dim=1)
    np.testing.assert_allclose(got.detach().numpy(), lin(x).detach().numpy(), rtol=1e-6)
    sd = qkv.state_dict()
    assert tuple(sd["weight"].shape) == (12, 6) and tuple(sd["bias"].shape) == (12,)
    other = QKVParallelLinear(6, 12, 3)
    other.load_state_dict(lin.state_dict())
    np.testing.assert_array_equal(other.weight.detach().numpy(), qkv.weight.detach().numpy())
    with pytest.raises(TensorParallelError, match="out_features 10 is not a multiple of 3"):
        QKVParallelLinear(6, 10, 3)


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])
def test_gpt_trains_like_one_process_eager(n):
    assert "tensor_parallel ok" in run_ranks("tensor_parallel.py", n, "eager", timeout=200).stdout


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])
def test_gpt_trains_like_one_process_compiled(n):
    assert "tensor_parallel ok" in run_ranks("tensor_parallel.py", n, "graph", timeout=200).stdout
