"""flow.multiprocessing and shared memory: Tensor.share_memory_, Module.share_memory and Hogwild
training by forked worker processes, checked step for step against the same training in one process
(and against torch where installed); spawn() and its errors."""

from __future__ import annotations

import multiprocessing as std_mp

import numpy as np
import pytest

import flow
import flow.multiprocessing as mp
import flow.nn as nn
import flow.nn.functional as F

pytestmark = pytest.mark.skipif("fork" not in std_mp.get_all_start_methods(), reason="needs the fork start method")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 4)).astype(np.float32)
Y = RNG.standard_normal((8, 1)).astype(np.float32)
W0 = RNG.standard_normal((1, 4)).astype(np.float32)
B0 = np.zeros(1, np.float32)
LR, STEPS = 0.1, 5


def _model() -> nn.Linear:
    m = nn.Linear(4, 1)
    with flow.no_grad():
        m.weight.copy_(flow.from_numpy(W0))
        m.bias.copy_(flow.from_numpy(B0))
    return m


def _train(model: nn.Module, steps: int = STEPS) -> None:
    opt = flow.optim.SGD(model.parameters(), lr=LR)
    x, y = flow.from_numpy(X), flow.from_numpy(Y)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


def _worker(rank: int, model: nn.Module) -> None:
    _train(model)


def test_share_memory_keeps_values_identity_layout_and_optimizer():
    m = _model()
    w, b = m.weight, m.bias
    opt = flow.optim.SGD(m.parameters(), lr=LR)  # made before sharing: must keep working
    before = w.detach().numpy().copy()
    assert not w.is_shared()
    assert m.share_memory() is m
    assert m.weight is w and m.bias is b and isinstance(w, nn.Parameter) and w.requires_grad
    assert w.is_shared() and b.is_shared()
    np.testing.assert_array_equal(w.detach().numpy(), before)
    F.mse_loss(m(flow.from_numpy(X)), flow.from_numpy(Y)).backward()
    opt.step()
    assert w.is_shared() and not np.array_equal(w.detach().numpy(), before)  # updated in shared memory

    base = flow.arange(24, dtype=flow.float64).reshape(4, 6)
    v = base.t()[::2]  # non-contiguous: strides must survive
    strides = v.stride()
    assert v.share_memory_() is v
    assert v.is_shared() and v.stride() == strides and v.dtype is flow.float64
    np.testing.assert_array_equal(v.numpy(), base.numpy().T[::2])
    later = v[1:]  # a view taken after sharing shares too
    assert later.is_shared()
    for dt in (flow.bfloat16, flow.int8, flow.bool):
        t = flow.ones(3, dtype=dt)
        assert t.share_memory_().is_shared() and t.dtype is dt and t.tolist() == flow.ones(3, dtype=dt).tolist()
    e = flow.zeros(0, 3).share_memory_()
    assert e.is_shared() and tuple(e.shape) == (0, 3)
    assert v.share_memory_() is v  # already shared: a no-op


def test_writes_of_a_forked_child_are_seen_by_the_parent():
    t = flow.zeros(4).share_memory_()
    p = mp.get_context("fork").Process(target=lambda: t.add_(flow.arange(4.0)))
    p.start()
    p.join(30)
    assert p.exitcode == 0
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    u = flow.zeros(4)  # not shared: the child changes its own copy only
    p = mp.get_context("fork").Process(target=lambda: u.add_(1.0))
    p.start()
    p.join(30)
    assert p.exitcode == 0 and u.tolist() == [0.0] * 4


def test_hogwild_workers_train_the_parents_model_step_for_step():
    shared = _model()
    shared.share_memory()
    ctx = mp.get_context("fork")
    for rank in range(2):  # one after another: the result is the same as 2 * STEPS steps in one process
        p = ctx.Process(target=_worker, args=(rank, shared))
        p.start()
        p.join(60)
        assert p.exitcode == 0
    local = _model()
    _train(local, 2 * STEPS)
    np.testing.assert_allclose(shared.weight.detach().numpy(), local.weight.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(shared.bias.detach().numpy(), local.bias.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert not np.allclose(shared.weight.detach().numpy(), W0)

    torch = pytest.importorskip("torch")
    tm = torch.nn.Linear(4, 1)
    with torch.no_grad():
        tm.weight.copy_(torch.from_numpy(W0))
        tm.bias.copy_(torch.from_numpy(B0))
    topt = torch.optim.SGD(tm.parameters(), lr=LR)
    for _ in range(2 * STEPS):
        topt.zero_grad()
        torch.nn.functional.mse_loss(tm(torch.from_numpy(X)), torch.from_numpy(Y)).backward()
        topt.step()
    np.testing.assert_allclose(shared.weight.detach().numpy(), tm.weight.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_hogwild_concurrent_workers_update_the_shared_model():
    shared = _model()
    shared.share_memory()
    mp.spawn(_worker, args=(shared,), nprocs=2, start_method="fork")
    w = shared.weight.detach().numpy()
    assert np.isfinite(w).all() and not np.allclose(w, W0)
    loss0 = F.mse_loss(_model()(flow.from_numpy(X)), flow.from_numpy(Y)).item()
    assert F.mse_loss(shared(flow.from_numpy(X)), flow.from_numpy(Y)).item() < loss0


def _fail(rank: int) -> None:
    if rank == 1:
        raise ValueError("worker one failed")


def _exit(rank: int) -> None:
    raise SystemExit(3)


def test_spawn_reports_a_failing_process():
    with pytest.raises(mp.ProcessRaisedException, match="(?s)Process 1 terminated.*ValueError: worker one failed"):
        mp.spawn(_fail, nprocs=2, start_method="fork")
    with pytest.raises(mp.ProcessExitedException, match="exit code 3") as info:
        mp.spawn(_exit, nprocs=1, start_method="fork")
    assert info.value.exit_code == 3 and info.value.error_index == 0
    ctx = mp.spawn(_fail, args=(), nprocs=1, join=False, start_method="fork")
    assert isinstance(ctx, mp.ProcessContext) and len(ctx.pids()) == 1
    while not ctx.join(30):
        pass
    with pytest.raises(ValueError, match="nprocs must be a positive int"):
        mp.spawn(_fail, nprocs=0)
    with pytest.raises(TypeError, match="args must be a tuple"):
        mp.spawn(_fail, args=[1], start_method="fork")


def test_the_multiprocessing_surface():
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as tmp

    for name in (
        "Process",
        "Queue",
        "Pool",
        "get_context",
        "set_start_method",
        "get_start_method",
        "cpu_count",
        "Event",
        "Lock",
        "Manager",
        "spawn",
        "start_processes",
        "ProcessContext",
    ):
        assert hasattr(mp, name) and hasattr(tmp, name), name
    assert mp.cpu_count() == tmp.cpu_count()
    assert mp.get_all_sharing_strategies() == tmp.get_all_sharing_strategies()
    assert mp.get_sharing_strategy() == tmp.get_sharing_strategy()
    mp.set_sharing_strategy("file_system")
    assert mp.get_sharing_strategy() == "file_system"
    mp.set_sharing_strategy("file_descriptor")
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        mp.set_sharing_strategy("nope")
    assert flow.multiprocessing is mp
    del torch
