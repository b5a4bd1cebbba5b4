"""flow.profiler: ranges, nesting, shapes, memory, stacks, schedules, Chrome traces, graph plan rows."""

import json
import os

import pytest

import flow
import flow.nn.functional as F
from flow import interceptors
from flow.graph import executor
from flow.profiler import (
    ProfilerAction,
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    tensorboard_trace_handler,
)


def _by_name(prof):
    out = {}
    for e in prof.events():
        out.setdefault(e.name, []).append(e)
    return out


def test_record_function_contains_ops_and_self_time():
    x = flow.randn(4, 8)
    w = flow.randn(8, 3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("block"):
            y = x @ w
            z = y.relu()
    ev = _by_name(prof)
    (block,) = ev["block"]
    assert block.kind == "user"
    assert [c.name for c in block.cpu_children] == ["matmul", "relu"]
    assert all(c.cpu_parent is block for c in block.cpu_children)
    kids = sum(c.cpu_time_total for c in block.cpu_children)
    assert block.self_cpu_time_total == pytest.approx(block.cpu_time_total - kids)
    assert 0 < kids <= block.cpu_time_total
    for c in block.cpu_children:
        assert block.time_range.start <= c.time_range.start <= c.time_range.end <= block.time_range.end
    assert z.shape == (4, 3)


def test_composite_is_a_range_holding_its_primitives():
    a, b = flow.randn(5), flow.randn(5)
    with profile() as prof:
        loss = F.mse_loss(a, b)
    (mse,) = _by_name(prof)["mse_loss"]
    assert mse.kind == "composite"
    names = [c.name for c in mse.cpu_children]
    assert "sub" in names and "mean" in names
    assert mse.cpu_parent is None
    assert loss.item() == pytest.approx(((a - b) ** 2).mean().item())


def test_backward_ops_appear_under_autograd_node_names():
    x = flow.randn(3, 4, requires_grad=True)
    with profile() as prof:
        y = (x * 2.0).sum()
        y.backward()
    ev = _by_name(prof)
    assert "sumBackward" in ev and "mulBackward" in ev
    (mb,) = ev["mulBackward"]
    assert mb.kind == "backward" and mb.cpu_children  # the gradient's own ops are inside it
    assert flow.allclose(x.grad, flow.full((3, 4), 2.0))


def test_backward_after_profile_ends_runs_unprofiled():
    x = flow.randn(3, requires_grad=True)
    with profile():
        y = (x * x).sum()
    y.backward()  # the gradient nodes were named by the profile; with none running they just run
    assert flow.allclose(x.grad, 2 * x.detach())


def test_counts_and_key_averages_by_input_shape():
    a, b = flow.randn(2, 3), flow.randn(4)
    with profile(record_shapes=True) as prof:
        for _ in range(3):
            a + 1.0
        b + 1.0
    avg = {r.key: r for r in prof.key_averages()}
    assert avg["add"].count == 4
    by_shape = {(r.key, r.input_shapes): r.count for r in prof.key_averages(group_by_input_shape=True)}
    assert by_shape[("add", "[[2, 3], []]")] == 3
    assert by_shape[("add", "[[4], []]")] == 1
    assert avg["add"].cpu_time == pytest.approx(avg["add"].cpu_time_total / 4)
    table = prof.key_averages(group_by_input_shape=True).table(sort_by="count", row_limit=5)
    assert "Input Shapes" in table and "[[2, 3], []]" in table and "Self CPU time total" in table


def test_profile_memory_counts_new_output_bytes():
    x = flow.ones(4, 8)
    with profile(profile_memory=True) as prof:
        y = x + 1.0  # new float32 array: 128 bytes
        v = y.reshape(32)  # a view of y: nothing allocated
        y.add_(1.0)  # in place: nothing allocated
        with record_function("outer"):
            x * 2.0
    ev = _by_name(prof)
    assert ev["add"][0].cpu_memory_usage == 4 * 8 * 4
    assert ev["reshape"][0].cpu_memory_usage == 0
    assert ev["outer"][0].cpu_memory_usage == 128 and ev["outer"][0].self_cpu_memory_usage == 0
    assert "CPU Mem" in prof.key_averages().table()
    assert v.shape == (32,)


def test_with_stack_names_the_callers_line():
    with profile(with_stack=True) as prof:
        flow.ones(2) * 3.0
    (mul,) = _by_name(prof)["mul"]
    assert mul.stack and os.path.basename(__file__) in mul.stack[0]
    assert all("/flow/" not in s.split("(")[0] for s in mul.stack)


def _check_trace_event_format(doc):
    """Required fields of the Trace Event Format (complete and metadata events)."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in ("X", "M")
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            assert isinstance(e["cat"], str) and isinstance(e.get("args", {}), dict)
        else:
            assert "name" in e["args"]


def _check_nesting(events):
    """On each thread, ranges nest: each one either contains the next one that starts inside it or ends first."""
    by_tid = {}
    for e in events:
        by_tid.setdefault(e["tid"], []).append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in evs:
            end = e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= e["ts"] + 1e-6:
                open_ends.pop()
            if open_ends:
                assert end <= open_ends[-1] + 1e-3, f"{e['name']} overlaps its enclosing range"
            open_ends.append(end)


def test_chrome_trace_is_valid_and_nested(tmp_path):
    x = flow.randn(3, 3, requires_grad=True)
    with profile(record_shapes=True) as prof:
        with record_function("step"):
            loss = F.mse_loss(x @ x, flow.zeros(3, 3))
            loss.backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    _check_trace_event_format(doc)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(prof.events())
    _check_nesting(xs)
    mm = next(e for e in xs if e["name"] == "matmul")
    assert mm["args"]["Input Dims"] == [[3, 3], [3, 3]] and mm["cat"] == "cpu_op"
    step = next(e for e in xs if e["name"] == "step")
    assert step["cat"] == "user_annotation"
    assert step["ts"] <= mm["ts"] and mm["ts"] + mm["dur"] <= step["ts"] + step["dur"] + 1e-3


def test_nesting_check_catches_overlap():
    bad = [{"tid": 1, "ts": 0.0, "dur": 10.0, "name": "a"}, {"tid": 1, "ts": 5.0, "dur": 10.0, "name": "b"}]
    with pytest.raises(AssertionError):
        _check_nesting(bad)


def test_record_function_decorator_and_off_cost():
    @record_function("helper")
    def helper(t):
        return t * 2.0

    assert helper(flow.ones(2)).tolist() == [2.0, 2.0]  # no profile: just runs
    with profile() as prof:
        helper(flow.ones(2))
        helper(flow.ones(2))
    ev = _by_name(prof)
    assert len(ev["helper"]) == 2 and all(e.cpu_children[0].name == "mul" for e in ev["helper"])


def test_schedule_matches_torch_actions():
    torch = pytest.importorskip("torch")
    kw = dict(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    ours, theirs = schedule(**kw), torch.profiler.schedule(**kw)
    assert [ours(i).name for i in range(14)] == [theirs(i).name for i in range(14)]
    ours, theirs = schedule(wait=2, warmup=1, active=1), torch.profiler.schedule(wait=2, warmup=1, active=1)
    assert [ours(i).name for i in range(9)] == [theirs(i).name for i in range(9)]


def test_ranges_and_counts_match_torch():
    torch = pytest.importorskip("torch")

    def program(lib, prof_mod, a):
        with prof_mod.record_function("block"):
            for _ in range(3):
                a = a * 2.0
        return a + 1.0

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tprof:
        program(torch, torch.profiler, torch.ones(4))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        program(flow, flow.profiler, flow.ones(4))
    t_counts = {e.key: e.count for e in tprof.key_averages()}
    f_counts = {e.key: e.count for e in prof.key_averages()}
    assert (f_counts["block"], f_counts["mul"], f_counts["add"]) == (
        t_counts["block"],
        t_counts["aten::mul"],
        t_counts["aten::add"],
    )
    t_block = next(e for e in tprof.events() if e.name == "block")
    f_block = next(e for e in prof.events() if e.name == "block")
    assert [c.name for c in t_block.cpu_children] == ["aten::" + c.name for c in f_block.cpu_children]
    assert f_block.cpu_time_total >= f_block.self_cpu_time_total >= 0


def test_schedule_steps_and_on_trace_ready(tmp_path):
    seen = []

    def ready(p):
        seen.append(sorted(e.name for e in p.events() if e.name.startswith("ProfilerStep")))

    handler = tensorboard_trace_handler(str(tmp_path), worker_name="w0")
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=1), on_trace_ready=ready) as prof:
        for i in range(6):
            with record_function(f"work{i}"):
                flow.ones(2) + 1.0
            prof.step()
    assert seen == [["ProfilerStep#2", "ProfilerStep#3"]]
    names = {e.name for e in prof.events()}
    assert "work2" in names and "work3" in names and "work1" not in names and "work4" not in names
    step2 = next(e for e in prof.events() if e.name == "ProfilerStep#2")
    assert [c.name for c in step2.cpu_children] == ["work2"]
    handler(prof)
    (f,) = os.listdir(tmp_path)
    assert f.startswith("w0.") and f.endswith(".pt.trace.json")
    _check_trace_event_format(json.loads((tmp_path / f).read_text()))


def test_graph_mode_one_row_per_plan_node():
    @flow.compile
    def f(x, w):
        return (x * w + 1.0).relu().sum()

    x, w = flow.randn(4, 8), flow.randn(4, 8)
    expected = f(x, w)
    with profile(record_shapes=True) as prof:
        got = f(x, w)
    assert got.item() == pytest.approx(expected.item())
    graph = [e for e in prof.events() if e.kind == "graph"]
    top = [e for e in graph if e.name.startswith("graph ")]
    assert len(top) == 1
    rows = [e for e in graph if e.cpu_parent is top[0]]
    names = [e.name.split(":", 1)[1] for e in rows]
    assert names[-1] == "sum" and "relu" in names
    assert len({e.name for e in rows}) == len(rows)  # one row per node
    assert rows[0].input_shapes[0] == [4, 8] and rows[0].args["phase"] == "forward"
    assert executor.PROFILE_HOOK is None
    assert f(x, w).item() == pytest.approx(expected.item())  # the kernels were put back


def test_nothing_left_active_after_profile_even_on_error():
    with pytest.raises(ValueError, match="boom"):
        with profile():
            flow.ones(2) + 1.0
            raise ValueError("boom")
    assert interceptors.active() == ()
    assert executor.PROFILE_HOOK is None
    with profile() as prof:
        pass
    assert list(prof.events()) == []


def test_bad_input_raises_clear_errors():
    with pytest.raises(TypeError, match="ProfilerActivity"):
        profile(activities=["cpu"])
    with pytest.raises(ValueError, match="activities is empty"):
        profile(activities=[])
    with pytest.raises(ValueError, match="active must be an integer >= 1"):
        schedule(wait=0, warmup=0, active=0)
    with pytest.raises(TypeError, match="non-empty name"):
        record_function("")
    with profile():
        with pytest.raises(RuntimeError, match="already recording"):
            with profile():
                pass
    with profile() as prof:
        flow.ones(1) + 1.0
    with pytest.raises(ValueError, match="sort_by must be one of"):
        prof.key_averages().table(sort_by="cuda_time")
    with pytest.raises(RuntimeError, match="not running"):
        prof.step()
    assert ProfilerAction.RECORD_AND_SAVE.value == 3


def test_graph_mode_fused_group_is_named_by_its_members():
    def fn(x, y):
        return flow.matmul(flow.tanh(x * y + 1.0) * x, y)

    g = flow.compile(fn)
    x, y = flow.randn(64, 64), flow.randn(64, 64)
    expected = g(x, y)
    fused = [n for n in g.ir.nodes if n.name == "fused_elementwise"]
    if not fused:
        pytest.skip("no CPU fusion rule registered in this build")
    with profile() as prof:
        got = g(x, y)
    assert flow.allclose(got, expected)
    rows = [e.name for e in prof.events() if e.kind == "graph" and "fused_elementwise[" in e.name]
    members = "+".join(fused[0].tags["fused"])
    assert len(rows) == len(fused) and rows[0].endswith(f":fused_elementwise[{members}]")
    assert "mul" in members and "tanh" in members
