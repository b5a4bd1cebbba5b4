"""benchmarks/amp.py: the saved-activation count on small graphs, and its --quick run end to end.

The byte counts below are worked out by hand from what each op's backward reads, so a change in
what the graph keeps for backward (or in how the benchmark counts it) shows up here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flow
import flow.nn.functional as F

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"
if not (BENCH / "amp.py").is_file():
    pytest.skip("benchmarks/ is not next to this checkout", allow_module_level=True)
sys.path.insert(0, str(BENCH))
import saved_activations as S  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _graph(model, amp: bool, *inputs):
    opt = flow.optim.SGD(model.parameters(), lr=0.1)

    class Step(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, x, y=None):
            out = self.model(x)
            loss = F.cross_entropy(out, y) if y is not None else out
            loss.backward()
            return loss

    g = Step()
    if amp:
        g.config.enable_amp(True, dtype=flow.bfloat16)
    g(*inputs)
    return g._latest.ir


def _mlp():
    flow.manual_seed(0)
    return flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.ReLU(), flow.nn.Linear(8, 3))


def test_saved_bytes_fp32_mlp():
    x, y = flow.randn(16, 4), flow.randint(0, 3, (16,))
    s = S.graph_saved_bytes(_graph(_mlp(), False, x, y))
    # relu's output (in place of the first linear's, one buffer) for relu's and the second
    # weight's gradients, and the logits for the loss's; x is an input, weights are parameters
    assert s["total"] == 16 * 8 * 4 + 16 * 3 * 4
    assert s["buffers"] == 2
    assert s["by_dtype"] == {"float32": s["total"]}
    assert s["param_copies"] == 0


def test_saved_bytes_bf16_amp_mlp():
    x, y = flow.randn(16, 4), flow.randint(0, 3, (16,))
    s = S.graph_saved_bytes(_graph(_mlp(), True, x, y))
    bf16 = 16 * 4 * 2 + 3 * 8 * 2 + 16 * 8 * 2  # x's bf16 copy, the second weight's, relu's output
    f32 = 16 * 3 * 4  # the logits cast to float32 for the (deny) loss
    assert s["by_dtype"] == {"bfloat16": bf16, "float32": f32}
    assert s["param_copies"] == 3 * 8 * 2  # only the second weight is read again by backward
    assert s["buffers"] == 4


def test_views_count_their_buffer_once():
    class Halves(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = flow.nn.Linear(4, 8)

        def forward(self, x):
            q, k = self.lin(x).split(4, dim=1)  # two views of one (16, 8) buffer, both saved by mul
            return (q * k).sum()

    s = S.graph_saved_bytes(_graph(Halves(), False, flow.randn(16, 4)))
    assert s == {**s, "total": 16 * 8 * 4, "buffers": 1}


def test_gradient_sums_are_backward():
    class Branches(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = flow.nn.Linear(4, 8), flow.nn.Linear(8, 2), flow.nn.Linear(8, 2)

        def forward(self, x):
            h = self.a(x).relu()  # read by two linears: its gradient is a sum the tracer tags "forward"
            return (self.b(h) * self.c(h)).sum()

    flow.manual_seed(0)
    ir = _graph(Branches(), False, flow.randn(16, 4))
    phases = S.node_phases(ir)
    assert any(n.tags.get("phase", "forward") == "forward" and phases[n.id] == "backward" for n in ir.nodes)
    s = S.graph_saved_bytes(ir)
    # h (relu in place of the first linear) and both branch outputs (each the other's mul gradient);
    # the (16, 8) gradient sum is not an activation
    assert s["total"] == 16 * 8 * 4 + 2 * 16 * 2 * 4
    assert s["buffers"] == 3


def test_quick_run_end_to_end(tmp_path):
    """--quick on the MLP: every mode runs, the JSON has the figures, the counts agree with PyTorch's."""
    modes = ["flow-f32", "flow-amp", "flow-eager-f32", "flow-eager-amp"]
    if HAVE_TORCH:
        modes += ["torch-f32", "torch-amp"]
    out = tmp_path / "amp.json"
    cmd = [sys.executable, str(BENCH / "amp.py"), "--quick", "--models", "mlp", "--modes", ",".join(modes)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(cmd + ["--json", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "targets:" in proc.stdout and "flow time amp/f32" in proc.stdout
    (row,) = json.loads(out.read_text())["results"]
    for md in modes:
        assert "error" not in row[md], row[md]
        assert row[md]["timed_steps"] == 3 and row[md]["step_ms"] > 0
    # models.py's MLP, batch 128: two hidden ReLU outputs and the logits
    assert row["flow-f32"]["saved"]["total"] == 2 * 128 * 1024 * 4 + 128 * 10 * 4
    assert (
        row["flow-amp"]["saved"]["by_dtype"]["bfloat16"] == 128 * 784 * 2 + 2 * 128 * 1024 * 2 + (1024 + 10) * 1024 * 2
    )
    assert row["flow-amp"]["planned_peak_mib"] > 0 and "flow planned peak amp/f32" in row["ratios"]
    assert abs(row["flow-amp"]["loss"] - row["flow-f32"]["loss"]) < 0.02
    if HAVE_TORCH:
        # the same definition measured two ways: torch's hooks add only its 0-d saved scalars
        for f, t in (("flow-f32", "torch-f32"), ("flow-amp", "torch-amp")):
            assert abs(row[f]["saved"]["total"] - row[t]["saved"]["total"]) <= 64, (f, t)
