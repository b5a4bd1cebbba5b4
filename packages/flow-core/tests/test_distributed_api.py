"""flow.distributed (torch.distributed's API) in one process: availability, the default group's
state and arguments, every collective on a world of one, ReduceOp / Backend against torch's,
errors, the message without flow-dist, and DistributedSampler's index lists against torch's.
The same API on several processes is tested by flow-dist (tests/test_torch_api.py)."""

from __future__ import annotations

import datetime

import numpy as np
import pytest

import flow
import flow.distributed as dist
from flow.errors import FeatureNotInstalledError
from flow.utils.data import DistributedSampler

needs_dist = pytest.mark.skipif(not dist.is_available(), reason="flow-dist is not installed")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    # init_process_group exports torchrun's variables; monkeypatch puts the environment back
    for name in (*TORCHRUN_VARS, "FLOW_COMM_TIMEOUT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def t(a):
    return flow.tensor(np.array(a, dtype=np.float64))


# -- names that need no communication --------------------------------------------------------------
def test_reduce_op_matches_torch():
    torch = pytest.importorskip("torch")
    tdist = torch.distributed
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
        assert int(getattr(dist.ReduceOp, name)) == int(getattr(tdist.ReduceOp, name)), name
    assert dist.ReduceOp.SUM == dist.ReduceOp.RedOpType.SUM
    assert repr(dist.ReduceOp.MAX) == repr(tdist.ReduceOp.MAX) == "<RedOpType.MAX: 4>"
    assert str(dist.ReduceOp.AVG) == str(tdist.ReduceOp.AVG)


def test_backend_names_match_torch():
    torch = pytest.importorskip("torch")
    for name in ("gloo", "GLOO", "nccl", "mpi"):
        assert dist.Backend(name) == torch.distributed.Backend(name)
    assert dist.Backend.GLOO == "gloo" and dist.Backend.MPI == "mpi"
    with pytest.raises(ValueError, match="Invalid backend"):
        dist.Backend("carrier-pigeon")


def test_before_init_every_query_raises_torchs_error():
    torch = pytest.importorskip("torch")
    assert not dist.is_initialized() and dist.group.WORLD is None and dist.GroupMember.WORLD is None
    with pytest.raises(ValueError) as theirs:
        torch.distributed.get_rank()
    for call in (dist.get_rank, dist.get_world_size, dist.get_backend, dist.new_group, dist.destroy_process_group):
        with pytest.raises(ValueError, match="has not been initialized") as mine:
            call()
        assert str(theirs.value) in str(mine.value)
    with pytest.raises(ValueError, match="all_reduce: Default process group has not been initialized"):
        dist.all_reduce(t([1.0]))


def test_get_node_local_rank_reads_local_rank(monkeypatch):
    with pytest.raises(RuntimeError, match="LOCAL_RANK"):
        dist.get_node_local_rank()
    assert dist.get_node_local_rank(fallback_rank=3) == 3
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert dist.get_node_local_rank(fallback_rank=3) == 2


def test_without_flow_dist_every_call_names_the_package(monkeypatch):
    real_get = flow.provided.get
    hidden = {"distributed.impl", "comm"}
    monkeypatch.setattr(
        flow.provided, "get", lambda name, default=None: default if name in hidden else real_get(name, default)
    )
    assert not dist.is_available() and not dist.is_mpi_available() and not dist.is_nccl_available()
    with pytest.raises(FeatureNotInstalledError, match="flow.distributed.init_process_group needs the 'flow-dist'"):
        dist.init_process_group("gloo")
    assert not dist.is_initialized()
    assert dist.ReduceOp.SUM == 0  # the API's names still import and work


# -- the default group of one process ----------------------------------------------------------------
@needs_dist
def test_init_process_group_in_one_process():
    assert dist.is_available() and dist.is_gloo_available() == dist.is_mpi_available()
    dist.init_process_group(backend="gloo", init_method="env://", timeout=datetime.timedelta(seconds=42))
    assert dist.is_initialized() and (dist.get_rank(), dist.get_world_size()) == (0, 1)
    assert dist.get_backend() == "gloo" and dist.group.WORLD is dist.GroupMember.WORLD
    assert dist.get_process_group_ranks(dist.group.WORLD) == [0]
    import os

    assert os.environ["FLOW_COMM_TIMEOUT"] == "42.0"  # how long flow-dist's collectives wait
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("0", "1", "0")
    assert dist.get_node_local_rank() == 0
    with pytest.raises(ValueError, match="twice"):
        dist.init_process_group()
    dist.destroy_process_group()
    assert not dist.is_initialized() and dist.group.WORLD is None and "FLOW_COMM_TIMEOUT" not in os.environ
    dist.init_process_group()  # after destroy, again; the default backend is MPI's
    assert dist.get_backend() == "mpi"


@needs_dist
@pytest.mark.parametrize(
    "kwargs, kind, words",
    [
        ({"backend": "smoke-signals"}, ValueError, "Invalid backend"),
        ({"backend": 3}, TypeError, "backend must be a string"),
        ({"init_method": "ftp://x"}, ValueError, "init_method"),
        ({"world_size": 2}, ValueError, "world_size=2, but the job has 1"),
        ({"rank": 1}, ValueError, "rank=1, but this process is rank 0"),
        ({"timeout": "soon"}, TypeError, "timedelta"),
        ({"timeout": datetime.timedelta(0)}, ValueError, "positive"),
        ({"store": object()}, dist.DistError, "store="),
    ],
)
def test_init_process_group_refuses_bad_arguments(kwargs, kind, words):
    with pytest.raises(kind, match=words):
        dist.init_process_group(**kwargs)
    assert not dist.is_initialized()


@needs_dist
def test_nccl_needs_a_cuda_backend():
    if dist.is_nccl_available():
        pytest.skip("flow-dist has a cuda backend here")
    with pytest.raises(dist.DistBackendError, match="'nccl' needs .*flow-cuda.*backend='gloo'"):
        dist.init_process_group("nccl")
    with pytest.raises(dist.DistBackendError, match="nccl"):
        dist.init_process_group("cpu:gloo,cuda:nccl")
    assert not dist.is_initialized()


@needs_dist
def test_a_torchrun_environment_without_the_mpi_launcher_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(dist.DistError, match="flow-launch -n N script.py"):
        dist.init_process_group("gloo")


@needs_dist
def test_every_collective_on_a_world_of_one():
    dist.init_process_group("gloo")
    x = t([1.0, 2.0])
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX):
        assert dist.all_reduce(x, op=op) is None
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
    work = dist.all_reduce(x, async_op=True)
    assert isinstance(work, dist.Work) and work.wait() is True and work.is_completed()
    dist.broadcast(x, src=0)
    dist.reduce(x, dst=0)
    outs = [flow.zeros(2, dtype=flow.float64)]
    dist.all_gather(outs, x)
    np.testing.assert_array_equal(outs[0].numpy(), [1.0, 2.0])
    cat = flow.zeros(1, 2, dtype=flow.float64)
    dist.all_gather_into_tensor(cat, x)
    np.testing.assert_array_equal(cat.numpy(), [[1.0, 2.0]])
    out = flow.zeros(2, dtype=flow.float64)
    dist.reduce_scatter_tensor(out, t([5.0, 6.0]))
    np.testing.assert_array_equal(out.numpy(), [5.0, 6.0])
    got = [flow.zeros(2, dtype=flow.float64)]
    dist.gather(t([3.0, 4.0]), got)
    np.testing.assert_array_equal(got[0].numpy(), [3.0, 4.0])
    dist.scatter(out, [t([7.0, 8.0])], src=0)
    np.testing.assert_array_equal(out.numpy(), [7.0, 8.0])
    single = flow.zeros(3, dtype=flow.float64)
    dist.all_to_all_single(single, t([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(single.numpy(), [1.0, 2.0, 3.0])
    objs = [None]
    dist.all_gather_object(objs, {"a": (1, 2)})
    assert objs == [{"a": (1, 2)}]
    dist.barrier()
    g = dist.new_group([0])
    assert dist.get_rank(g) == 0 and dist.get_world_size(g) == 1 and dist.get_global_rank(g, 0) == 0


@needs_dist
def test_collectives_refuse_bad_arguments():
    dist.init_process_group()
    x = t([1.0, 2.0])
    with pytest.raises(dist.DistBackendError, match="ReduceOp.BXOR is not supported"):
        dist.all_reduce(x, op=dist.ReduceOp.BXOR)
    with pytest.raises(ValueError, match="op must be a flow.distributed.ReduceOp"):
        dist.all_reduce(x, op="mean")
    with pytest.raises(ValueError, match="src=1 is not a global rank"):
        dist.broadcast(x, src=1)
    with pytest.raises(ValueError, match="give src"):
        dist.broadcast(x)
    with pytest.raises(ValueError, match="not both"):
        dist.broadcast(x, src=0, group_src=0)
    with pytest.raises(ValueError, match="gather_list must be specified"):
        dist.gather(x, None, dst=0)
    with pytest.raises(TypeError, match="group must be a ProcessGroup"):
        dist.all_reduce(x, group="world")
    with pytest.raises(dist.DistError, match="any source"):
        dist.recv(x)
    with pytest.raises(flow.comm.CommError, match="no other rank"):
        dist.send(x, dst=0)
    with pytest.raises(flow.comm.CommError, match="expected a flow.Tensor"):
        dist.all_reduce(np.ones(2))
    with pytest.raises(flow.comm.CommError, match="output has 3 elements"):
        dist.all_gather_into_tensor(flow.zeros(3, dtype=flow.float64), x)
    with pytest.raises(flow.comm.CommError, match="output tensor is float32"):
        dist.all_gather_into_tensor(flow.zeros(2), x)
    with pytest.raises(flow.comm.CommError, match="input_split_sizes"):
        dist.all_to_all_single(flow.zeros(2, dtype=flow.float64), x, input_split_sizes=[3])
    with pytest.raises(ValueError, match="rank 1 is not in the job"):
        dist.new_group([0, 1])
    with pytest.raises(ValueError, match="repeat"):
        dist.new_group([0, 0])
    with pytest.raises(ValueError, match="object_list must be a list of 1"):
        dist.all_gather_object([], 1)


# -- DistributedSampler against torch's ----------------------------------------------------------
@pytest.mark.parametrize(
    "n, replicas, drop_last", [(10, 3, False), (10, 3, True), (12, 4, False), (2, 3, False), (7, 2, True)]
)
def test_distributed_sampler_gives_torchs_index_lists(n, replicas, drop_last):
    pytest.importorskip("torch")
    from torch.utils.data import DistributedSampler as TorchSampler

    data = list(range(n))
    for r in range(replicas):
        mine = DistributedSampler(data, num_replicas=replicas, rank=r, shuffle=False, drop_last=drop_last)
        theirs = TorchSampler(data, num_replicas=replicas, rank=r, shuffle=False, drop_last=drop_last)
        assert list(mine) == list(theirs) and len(mine) == len(theirs), (r, list(mine), list(theirs))


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_shuffles_alike_on_every_rank(drop_last):
    pytest.importorskip("torch")
    from torch.utils.data import DistributedSampler as TorchSampler

    data, replicas = list(range(11)), 3
    for epoch in (0, 1):
        shares, torch_lens = [], []
        for r in range(replicas):
            s = DistributedSampler(data, replicas, r, shuffle=True, seed=4, drop_last=drop_last)
            s.set_epoch(epoch)
            shares.append(list(s))
            torch_lens.append(len(TorchSampler(data, replicas, r, shuffle=True, seed=4, drop_last=drop_last)))
        assert [len(s) for s in shares] == torch_lens
        # torch's layout: share r is every replicas-th index of one permutation (padded / cut)
        flat = [shares[i % replicas][i // replicas] for i in range(sum(map(len, shares)))]
        if drop_last:
            assert len(set(flat)) == len(flat)
        else:
            assert sorted(set(flat)) == data and flat[len(data) :] == flat[: len(flat) - len(data)]
        if epoch == 0:
            first = flat
    assert flat != first  # set_epoch reshuffles
