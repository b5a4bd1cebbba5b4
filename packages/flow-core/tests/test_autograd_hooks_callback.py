"""flow.autograd.queue_callback: work a gradient hook starts is finished when the backward pass ends."""

from __future__ import annotations

import pytest

import flow
from flow.errors import AutogradError


def test_callbacks_run_once_after_every_gradient_is_accumulated():
    a = flow.ones(3, requires_grad=True)
    b = flow.ones(2, requires_grad=True)
    seen = []

    def hook(t):
        seen.append(("hook", tuple(t.shape)))
        flow.autograd.queue_callback(lambda: seen.append(("end", a.grad is not None and b.grad is not None)))

    a.register_post_accumulate_grad_hook(hook)
    ((a * 2).sum() + (b * 3).sum()).backward()
    assert seen[-1] == ("end", True) and [s for s in seen if s[0] == "end"] == [("end", True)]
    seen.clear()
    (a * 2).sum().backward()  # a new pass: the old callbacks are gone
    assert [s for s in seen if s[0] == "end"] == [("end", True)]


def test_queue_callback_outside_backward_is_an_error():
    with pytest.raises(AutogradError, match="no backward pass is running"):
        flow.autograd.queue_callback(lambda: None)


def test_a_failed_pass_drops_its_callbacks():
    x = flow.ones(2, requires_grad=True)
    ran = []

    def bad(g):
        flow.autograd.queue_callback(lambda: ran.append(1))
        raise RuntimeError("hook failed")

    x.register_hook(bad)
    with pytest.raises(RuntimeError, match="hook failed"):
        (x * 2).sum().backward()
    assert ran == []
    with pytest.raises(AutogradError):
        flow.autograd.queue_callback(lambda: None)  # no pass left open
