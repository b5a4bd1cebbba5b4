"""Modes are per thread, as in PyTorch: grad mode, the interceptor chain and graph tracing.

A ``no_grad()`` block, an interceptor or a graph being traced in one thread must not change
what another thread's ops do.
"""

from __future__ import annotations

import threading

import numpy as np

import flow
import flow.nn as nn
import flow.nn.functional as F


def _run_threads(*targets):
    errors = []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # surfaced in the main thread below
                errors.append(e)

        return run

    threads = [threading.Thread(target=wrap(fn)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a thread did not finish"
    if errors:
        raise errors[0]


def test_no_grad_in_one_thread_leaves_another_recording():
    inside = threading.Event()
    checked = threading.Event()
    seen = {}

    def a():
        with flow.no_grad():
            inside.set()
            checked.wait(10)
            seen["a"] = flow.is_grad_enabled()

    def b():
        inside.wait(10)
        x = flow.ones(3, requires_grad=True)
        seen["b_enabled"] = flow.is_grad_enabled()
        seen["b_grad_fn"] = (x * 2).grad_fn is not None
        checked.set()

    _run_threads(a, b)
    assert seen == {"a": False, "b_enabled": True, "b_grad_fn": True}
    assert flow.is_grad_enabled()


def test_overlapping_no_grad_blocks_in_two_threads_do_not_leave_grad_off():
    # A enters, B enters, A leaves, B leaves: with one process-wide flag B restores A's "off".
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    after = {}

    def a():
        with flow.no_grad():
            a_in.set()
            b_in.wait(10)
        a_out.set()
        after["a"] = flow.is_grad_enabled()

    def b():
        a_in.wait(10)
        with flow.no_grad():
            b_in.set()
            a_out.wait(10)
        after["b"] = flow.is_grad_enabled()

    _run_threads(a, b)
    assert after == {"a": True, "b": True}
    assert flow.is_grad_enabled()
    assert (flow.ones(2, requires_grad=True) * 3).requires_grad


def test_a_new_thread_starts_with_grad_enabled():
    seen = {}
    with flow.no_grad():
        _run_threads(lambda: seen.setdefault("enabled", flow.is_grad_enabled()))
        assert not flow.is_grad_enabled()
    assert seen["enabled"] is True


def test_set_grad_enabled_in_a_thread_is_local_to_it():
    seen = {}

    def a():
        flow.set_grad_enabled(False)
        seen["a"] = flow.is_grad_enabled()

    _run_threads(a)
    assert seen["a"] is False
    assert flow.is_grad_enabled()


def test_an_interceptor_sees_only_its_own_threads_ops():
    seen_ops = []
    entered, done = threading.Event(), threading.Event()

    def spy(op, inputs, attrs):
        seen_ops.append((threading.get_ident(), op.name))
        return NotImplemented

    def a():
        with flow.interceptors.intercept(spy):
            entered.set()
            done.wait(10)
            flow.ones(2) * 3
            assert flow.interceptors.active() == (spy,)

    def b():
        entered.wait(10)
        assert flow.interceptors.active() == ()
        flow.ones(2) + 1
        flow.exp(flow.ones(2))
        done.set()

    ta = threading.Thread(target=a)
    tb = threading.Thread(target=b)
    ta.start()
    tb.start()
    ta.join(10)
    tb.join(10)
    assert seen_ops and {name for _, name in seen_ops} == {"mul"}
    assert len({ident for ident, _ in seen_ops}) == 1
    assert flow.interceptors.active() == ()


def test_popping_another_threads_interceptor_is_an_error():
    import pytest

    def spy(op, inputs, attrs):
        return NotImplemented

    flow._dispatch.push_interceptor(spy)
    try:
        errors = []

        def other():
            try:
                flow._dispatch.pop_interceptor(spy)
            except ValueError as e:
                errors.append(e)

        _run_threads(other)
        assert errors and "not active in this thread" in str(errors[0])
    finally:
        flow._dispatch.pop_interceptor(spy)
    with pytest.raises(ValueError):
        flow._dispatch.pop_interceptor(spy)


def _mlp(seed):
    flow.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _eager_losses(model, steps=6):
    opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((16, 4)), dtype=flow.float32)
    y = flow.tensor(rng.integers(0, 2, 16))
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def test_eager_training_in_one_thread_while_another_traces_a_graph():
    # The tracer is an interceptor with module hooks, an optimizer-step hook and a dropout mask:
    # none of them may reach an eager training loop that runs in another thread meanwhile.
    expected = _eager_losses(_mlp(1))
    tracing, trained = threading.Event(), threading.Event()
    out = {}

    class Step(flow.nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x, y):
            tracing.set()
            trained.wait(30)  # the other thread trains while this one is inside build
            loss = F.cross_entropy(F.dropout(self.model(x), 0.1), y)
            loss.backward()
            return loss

    def tracer_thread():
        step = Step(_mlp(2))
        x = flow.randn(16, 4)
        y = flow.randint(0, 2, (16,))
        out["graph_loss"] = float(step(x, y))

    def eager_thread():
        tracing.wait(30)
        try:
            out["eager"] = _eager_losses(_mlp(1))
        finally:
            trained.set()

    _run_threads(tracer_thread, eager_thread)
    np.testing.assert_allclose(out["eager"], expected, rtol=1e-6)
    assert np.isfinite(out["graph_loss"])
    assert flow.interceptors.active() == ()
