"""flow.amp.debug.compare: op-by-op errors of a step under autocast against float32."""

from __future__ import annotations

import inspect
import random
import types
from contextlib import contextmanager

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import FlowError
from flow.plugins import hookimpl
from flow.registry import REGISTRY
from flow_amp import debug
from flow_amp.colors import TABLE
from flow_amp.debug import align, compare, rel_error


class _Centred(nn.Module):
    """Raw features far from zero (readings around 300), centred, then a two-layer MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        x = x - x.mean(dim=0)  # CENTRE
        h = F.relu(self.fc1(x))
        return self.fc2(h)


def _line(marker: str, obj=_Centred) -> int:
    lines, start = inspect.getsourcelines(obj)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def _setup(seed: int = 0):
    flow.manual_seed(seed)
    model = _Centred()
    x = flow.randn(64, 16) + 300.0
    y = flow.randint(0, 4, (64,))
    return model, x, y


@contextmanager
def _coloured(op: str, colour):
    """Colour ``op`` as an op package would in its ``flow_register_rules`` hook, for the ``with`` block;
    unregistering the plugin gives back the colour it overrode."""
    mod = types.ModuleType("miscoloured_ops")

    def flow_register_rules(registry):
        registry.register_rule(TABLE, op, colour, override=True)

    mod.flow_register_rules = hookimpl(flow_register_rules)
    before = REGISTRY.tables[TABLE].get(op)
    name = flow.plugins.register(mod, "test_debug_miscoloured")
    try:
        yield
    finally:
        flow.plugins.unregister(name)
        assert REGISTRY.tables[TABLE].get(op) == before


def _ce_step(model):
    return lambda x, y: F.cross_entropy(model(x), y)


# -- the requirement: a mis-coloured op is found, the default colours pass -------------------------


def test_default_colours_stay_under_the_threshold():
    model, x, y = _setup()
    report = compare(_ce_step(model), x, y, module=model)
    assert report.first_divergence() is None
    assert report.grads and not report.grad_divergences()
    assert [r.op for r in report if r.phase == "forward"] == [
        "mean",
        "sub",
        "linear",
        "relu",
        "linear",
        "cross_entropy",
    ]
    sub = report[1]
    assert sub.dtype == "float32" and sub.err == 0.0  # clear: runs in the float32 it gets
    assert report[2].dtype == "bfloat16" and 1e-4 < report[2].err < 1e-2  # linear: one bf16 rounding or so


def test_a_miscoloured_op_is_the_first_divergence_with_its_source_line():
    model, x, y = _setup()
    with _coloured("sub", "allow"):
        report = compare(_ce_step(model), x, y, module=model)
    first = report.first_divergence()
    assert first is not None and first.op == "sub" and first.phase == "forward"
    assert first.site.filename == __file__ and first.site.lineno == _line("# CENTRE")
    assert first.site.function == "forward" and "x.mean(dim=0)" in first.site.code
    # the op itself lost the precision: its inputs (x and its mean, rounded to bf16) were fine
    assert first.err > 0.3 and first.in_err < 1e-2
    assert first.dtype == "bfloat16"
    text = str(report)
    assert f"first divergence: #{first.index} sub" in text and "x = x - x.mean(dim=0)" in text
    marked = [line for line in text.splitlines() if line.startswith(">")]
    assert marked[0].split()[1] == str(first.index) and "sub" in marked[0]
    # every gradient inherits the damage
    assert len(report.grad_divergences()) == 4


def test_an_fp16_overflow_is_an_infinite_error():
    flow.manual_seed(0)
    lin = nn.Linear(8, 1)
    x = flow.rand(4, 8) * 3 + 11.0  # exp(11..14) > 65504, float16's largest

    def step(x):
        return lin(flow.exp(x)).sum()  # EXP

    with _coloured("exp", "allow"):
        report = compare(step, x, dtype=flow.float16, module=lin)
    first = report.first_divergence()
    assert first.op == "exp" and first.err == float("inf") and first.site.lineno == _line("# EXP", step)
    assert "inf" in str(report)
    assert report.threshold == debug.DEFAULT_THRESHOLD["float16"]


# -- alignment --------------------------------------------------------------------------------------


def test_the_casts_autocast_inserts_are_left_out_of_the_alignment():
    model, x, y = _setup()
    report = compare(_ce_step(model), x, y, module=model)
    assert report.inserted >= 5  # x and both layers' weights and biases, the logits up for the loss, ...
    assert not report.unmatched and all(r.op != "cast" or r.phase == "backward" for r in report)
    # the backward ops are attributed to the forward op they differentiate, with its line
    back = [r for r in report if r.phase == "backward"]
    assert back and all(r.of is not None and report[r.of].phase == "forward" for r in back)
    assert {report[r.of].op for r in back} >= {"cross_entropy", "linear", "relu"}
    assert all(r.site == report[r.of].site for r in back)
    assert back[0].op == "cross_entropy_backward"


def test_an_op_only_one_run_makes_does_not_shift_the_rest():
    flow.manual_seed(1)
    fc1, fc2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def step(x):
        h = fc1(x)
        if h.dtype is flow.bfloat16:
            h = h * 1.0  # AMP ONLY
        return fc2(flow.tanh(h)).sum()  # LAST

    report = compare(step, flow.randn(5, 6))
    assert [(u.run, u.op, u.phase) for u in report.unmatched] == [("amp", "mul", "forward"), ("amp", "mul", "backward")]
    assert report.unmatched[0].site.lineno == _line("# AMP ONLY", step)
    fwd = [r for r in report if r.phase == "forward"]
    assert [r.op for r in fwd] == ["linear", "tanh", "linear", "sum"]
    assert fwd[-1].site.lineno == _line("# LAST", step) and report.first_divergence() is None


def test_align_pairs_the_longest_common_order():
    assert align(list("abc"), list("abc")) == [(0, 0), (1, 1), (2, 2)]
    assert align(list("abcde"), list("abXcde")) == [(0, 0), (1, 1), (2, 3), (3, 4), (4, 5)]
    assert align(list("abcde"), list("acde")) == [(0, 0), (2, 1), (3, 2), (4, 3)]
    assert align([], list("ab")) == []


# -- gradients and state ------------------------------------------------------------------------------


def _grads(model, x, y, amp: bool):
    flow.manual_seed(5)
    model.zero_grad(set_to_none=True)
    if amp:
        with flow.autocast("cpu", dtype=flow.bfloat16):
            loss = F.cross_entropy(model(x), y)
    else:
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    out = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out


def test_gradients_are_compared_leaf_by_leaf():
    model, x, y = _setup()
    report = compare(_ce_step(model), x, y, module=model)
    ref, low = _grads(model, x, y, False), _grads(model, x, y, True)
    assert [g.name for g in report.grads] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    for g in report.grads:
        assert g.err == pytest.approx(rel_error(ref[g.name], low[g.name]), rel=1e-12)
        assert g.err > 0 and g.shape == tuple(dict(model.named_parameters())[g.name].shape)
    assert report.grads[0].site == report[report.grads[0].first_use].site
    # an input that requires grad is a leaf too, named by its position
    xg = x.clone().detach().requires_grad_()
    report = compare(_ce_step(model), xg, y, module=model)
    assert "inputs[0]" in [g.name for g in report.grads]


def test_parameters_grads_buffers_and_rng_are_given_back():
    flow.manual_seed(2)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.3), nn.GELU(), nn.Linear(16, 4))
    x, y = flow.randn(16, 8), flow.randint(0, 4, (16,))
    opt = flow.optim.Adam(model.parameters(), lr=1e-2)
    F.cross_entropy(model(x), y).backward()  # an earlier step: grads and Adam's moments exist
    opt.step()
    values = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    grads = {n: (p.grad, p.grad.numpy().copy()) for n, p in model.named_parameters()}
    moments = [v.numpy().copy() for s in opt.state.values() for k, v in s.items() if k.startswith("exp_avg")]
    np.random.seed(3)
    random.seed(3)
    rng = (flow.get_rng_state().numpy().copy(), np.random.get_state()[1].copy(), random.getstate())

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()  # STEP
        return loss

    report = compare(step, x, y, module=model)
    assert np.array_equal(flow.get_rng_state().numpy(), rng[0])
    assert np.array_equal(np.random.get_state()[1], rng[1]) and random.getstate() == rng[2]
    for k, v in model.state_dict().items():
        assert np.array_equal(v.detach().numpy(), values[k]), k
    for n, p in model.named_parameters():
        assert p.grad is grads[n][0] and np.array_equal(p.grad.numpy(), grads[n][1]), n
    now = [v.numpy() for s in opt.state.values() for k, v in s.items() if k.startswith("exp_avg")]
    assert all(np.array_equal(a, b) for a, b in zip(now, moments))
    # both runs drew the same dropout mask (a different one would be an error of order one)
    (mask,) = [r for r in report if r.op == "bernoulli_mask"]
    assert mask.err < 1e-2
    # the step ran backward itself (compare did not run it again) and the update came after it
    assert any(r.phase == "backward" for r in report)
    update = report[-1]
    assert update.op == "adam_update" and update.phase == "forward" and update.site.lineno == _line("# STEP", step)


def test_a_step_without_a_loss_is_compared_forward_only():
    model, x, y = _setup()
    report = compare(lambda x: {"logits": model(x)}, x)
    assert len(report) == 5 and all(r.phase == "forward" for r in report)
    assert report.grads == [] and report.loss_ref is None
    report = compare(_ce_step(model), x, y, grads=False)
    assert all(r.phase == "forward" for r in report) and report.grads == []
    assert report.loss_ref == pytest.approx(report.loss_amp, rel=1e-2)
    assert all(p.grad is None for p in model.parameters())
    assert len(compare(lambda: 3.0)) == 0  # no op at all


# -- bad input ----------------------------------------------------------------------------------------


def test_bad_input_is_refused_clearly():
    model, x, y = _setup()
    step = _ce_step(model)
    with pytest.raises(TypeError, match="step_fn must be callable"):
        compare(42, x)
    with pytest.raises(ValueError, match="low-precision float"):
        compare(step, x, y, dtype=flow.float32)
    with pytest.raises(ValueError, match="dtype must be"):
        compare(step, x, y, dtype="no_such_dtype")
    with pytest.raises(ValueError, match="threshold"):
        compare(step, x, y, threshold=-1.0)
    with pytest.raises(FlowError, match="unknown device type"):
        compare(step, x, y, device_type="nowhere")
    with pytest.raises(FlowError, match="inside an autocast region"):
        with flow.autocast("cpu"):
            compare(step, x, y)
    with pytest.raises(ValueError, match=r"inputs\[0\] has autograd history.*pass inputs\[0\]\.detach\(\)"):
        compare(step, x * flow.ones(1, requires_grad=True), y)
    with pytest.raises(FlowError, match="compiled graph"):
        compare(flow.compile(step), x, y)
    # a string dtype is fine, and an error inside the step says which run raised it
    assert compare(step, x, y, dtype="bfloat16", grads=False).dtype == "bfloat16"

    def fails_low(x):
        if model(x).dtype is flow.bfloat16:
            raise ZeroDivisionError("only under autocast")
        return None

    with pytest.raises(ZeroDivisionError) as info:
        compare(fails_low, x)
    assert "bfloat16 run" in "".join(getattr(info.value, "__notes__", []))
    assert all(p.grad is None for p in model.parameters())


# -- the report ---------------------------------------------------------------------------------------


def test_rel_error_is_the_norm_ratio():
    assert rel_error([3.0, 4.0], [3.0, 4.0]) == 0.0
    assert rel_error([3.0, 4.0], [3.0, 3.0]) == pytest.approx(1 / 5)
    assert rel_error([0.0, 0.0], [0.0, 0.0]) == 0.0
    assert rel_error([0.0], [1e-3]) > 1e30  # against an all-zero reference any difference is huge
    assert rel_error([1.0, np.inf], [1.0, np.inf]) == 0.0 and rel_error([1.0, np.nan], [1.0, np.nan]) == 0.0
    assert rel_error([1.0, 2.0], [1.0, np.inf]) == float("inf")
    assert rel_error(np.ones((2, 2)), np.ones(4)) == float("inf")


def test_a_long_table_is_cut_around_the_first_offender():
    flow.manual_seed(4)
    w = nn.Linear(8, 8)

    def step(x):
        for _ in range(30):
            x = flow.tanh(w(x))
        far = x.float() + 300.0
        return (far - 300.0).sum()  # OFFENDER

    with _coloured("sub", "allow"):
        report = compare(step, flow.randn(4, 8) * 0.1)
    first = report.first_divergence()
    assert first.op == "sub" and first.site.lineno == _line("# OFFENDER", step)
    full = report.table(max_rows=None).splitlines()
    cut = report.table(max_rows=20).splitlines()
    assert len(full) > 60 + len(report.grads) and len(cut) < 45
    assert any("rows ..." in line for line in cut)
    assert sum(line.startswith(">") for line in cut) == 1 and repr(report).startswith("<Report bfloat16/cpu")


def test_the_documented_example_finds_the_miscoloured_sub():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "examples" / "amp_divergence.py"
    if not script.exists():
        pytest.skip("examples/ is not next to this checkout of flow-amp")
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=script.parents[1]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no op's error passes the threshold" in proc.stdout
    assert "first divergence: #1 sub at examples/amp_divergence.py" in proc.stdout.replace("\\", "/")
    assert "found: sub" in proc.stdout
