"""``graph.config.enable_auto_parallel``: the setting, its error without the plugin that provides
the ``"graph.auto_parallel"`` hook, and ``nn.Graph`` calling that hook before each run."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow import provided
from flow.errors import FeatureNotInstalledError, FlowError


def _without_hook(monkeypatch):
    real = provided.get

    def get(name, default=None):
        return default if name == "graph.auto_parallel" else real(name, default)

    monkeypatch.setattr(provided, "get", get)


def _with_hook(monkeypatch, hook):
    real = provided.get

    def get(name, default=None):
        return hook if name == "graph.auto_parallel" else real(name, default)

    monkeypatch.setattr(provided, "get", get)


class Double(flow.nn.Graph):
    def __init__(self):
        super().__init__()
        self.lin = flow.nn.Linear(3, 2)

    def build(self, x):
        return self.lin(x)


def test_without_the_plugin_enabling_raises_naming_flow_dist(monkeypatch):
    _without_hook(monkeypatch)
    g = Double()
    with pytest.raises(FlowError, match="flow-dist"):
        g.config.enable_auto_parallel(True)
    assert g.config.auto_parallel is None
    g.config.enable_auto_parallel(False)  # turning it off needs nothing


def test_bad_memory_cap_raises():
    g = Double()
    for bad in (0, -5.0, True):
        with pytest.raises(ValueError, match="memory_cap"):
            g.config.enable_auto_parallel(True, memory_cap=bad)


def test_the_graph_runs_the_hook_before_each_call(monkeypatch):
    calls = []

    def hook(graph, args, kwargs):
        calls.append((graph, tuple(a.shape for a in args)))
        return tuple(a * 2 for a in args), kwargs  # what the hook returns is what the step runs on

    _with_hook(monkeypatch, hook)
    g = Double()
    g.config.enable_auto_parallel(True, memory_cap=1 << 20)
    assert g.config.auto_parallel == {"memory_cap": 1 << 20, "cluster": None}
    x = flow.randn(4, 3)
    for _ in range(2):
        out = g(x)
    want = g.lin(x * 2).detach().numpy()
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-6)
    assert [c[0] for c in calls] == [g, g] and calls[0][1] == ((4, 3),)
    assert g.compiles == 1
    g.config.enable_auto_parallel(False)
    np.testing.assert_allclose(g(x).detach().numpy(), g.lin(x).detach().numpy(), rtol=1e-6)
    assert len(calls) == 2  # off: not called


def test_a_hook_missing_at_call_time_raises(monkeypatch):
    _with_hook(monkeypatch, lambda g, a, k: (a, k))
    g = Double()
    g.config.enable_auto_parallel(True)
    _without_hook(monkeypatch)
    with pytest.raises(FeatureNotInstalledError, match="graph.config.enable_auto_parallel"):
        g(flow.randn(2, 3))
