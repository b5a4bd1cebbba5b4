"""benchmarks/harness.py: the order of the processes, the statistics, the ratios and the table.

The harness is plain Python (the frameworks are imported only inside its workers), so this runs
with pytest alone, like the other tests of the repository's tooling here.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import harness as H  # noqa: E402


def _case(variant: str, group: str = "g", framework: str = "numpy", **kw) -> H.Case:
    return H.Case(framework, variant, "probe:setup", group=group, **kw)


def _out(wall, cpu=None, variant="a", framework="numpy", extra=None, flow_peak=None, ops=1, first=0.5, peak=10.0):
    cpu = wall if cpu is None else cpu
    steps = {"wall": wall, "cpu": cpu, "user": cpu, "sys": [0.0] * len(wall), "minflt": [1.0] * len(wall)}
    return {
        "framework": framework,
        "variant": variant,
        "ops_per_step": ops,
        "steps": steps,
        "first_s": first,
        "peak_mib": peak,
        "flow_peak_mib": flow_peak,
        "extra": extra or {},
    }


# -- the order of the processes ---------------------------------------------------------------------
def test_every_round_runs_each_case_at_each_thread_count_once_and_odd_rounds_reverse():
    a, b, c = _case("a"), _case("b"), _case("c")
    plan = H.schedule([a, b, c], (1, 2), rounds=4)
    combos = [(a, 1), (b, 1), (c, 1), (a, 2), (b, 2), (c, 2)]
    assert plan[0] == combos and plan[2] == combos
    assert plan[1] == combos[::-1] and plan[3] == combos[::-1]
    # over two rounds every process has run first and last equally often: position 0 alternates
    assert [p[0] for p in plan] == [(a, 1), (c, 2), (a, 1), (c, 2)]


@pytest.mark.parametrize(
    "cases, threads, rounds, match",
    [([], (1,), 1, "no cases"), (["x"], (1,), 0, "rounds must be >= 1"), (["x"], (0, 2), 1, "thread counts")],
)
def test_schedule_rejects_bad_plans(cases, threads, rounds, match):
    with pytest.raises(ValueError, match=match):
        H.schedule([_case(v) for v in cases], threads, rounds)


# -- statistics ----------------------------------------------------------------------------------
def test_summary_is_the_median_of_all_values_with_the_range_of_the_per_process_medians():
    s = H.summarise([[1.0, 2.0, 9.0], [4.0, 5.0, 6.0], [3.0]])
    # all seven values: 1 2 3 4 5 6 9 -> 4; per-process medians 2, 5, 3
    assert s == {"median": 4.0, "min": 2.0, "max": 5.0, "best": 1.0, "n": 7}
    with pytest.raises(ValueError, match="no values"):
        H.summarise([[], []])


def test_aggregate_takes_ratios_against_the_baseline_of_the_same_group_and_thread_count():
    runs = {
        ("m", "numpy a", 1): [_out([2.0, 2.0], variant="a"), _out([4.0], variant="a")],
        ("m", "numpy base", 1): [_out([1.0, 1.0, 1.0], cpu=[2.0, 2.0, 2.0], variant="base")],
        ("m", "numpy a", 2): [_out([3.0], variant="a")],
        ("m", "numpy base", 2): [_out([6.0], variant="base")],
        ("other", "numpy a", 1): [_out([5.0], variant="a")],
    }
    rows = {(r["group"], r["case"], r["threads"]): r for r in H.aggregate(runs, "numpy base")}
    a1 = rows[("m", "numpy a", 1)]
    assert a1["wall"] == {"median": 2.0, "min": 2.0, "max": 4.0, "best": 2.0, "n": 3} and a1["processes"] == 2
    assert a1["ratio_wall"] == 2.0 and a1["ratio_cpu"] == 1.0
    assert rows[("m", "numpy a", 2)]["ratio_wall"] == 0.5
    assert rows[("m", "numpy base", 1)]["ratio_wall"] == 1.0
    lonely = rows[("other", "numpy a", 1)]  # no baseline in its group: no ratio rather than a wrong one
    assert lonely["ratio_wall"] is None and lonely["baseline"] is None


def test_aggregate_summarises_numeric_extras_and_keeps_the_last_report():
    outs = [
        _out([1.0], extra={"compile_s": 0.3, "losses": [1.0, 0.9]}, flow_peak=5.0, ops=10),
        _out([1.0], extra={"compile_s": 0.1, "losses": [1.0, 0.8]}, flow_peak=7.0, ops=10, first=None),
    ]
    (row,) = H.aggregate({("g", "numpy a", 1): outs}, None)
    assert row["extra"] == {"compile_s": {"median": pytest.approx(0.2), "min": 0.1, "max": 0.3, "best": 0.1, "n": 2}}
    assert row["extra_last"]["losses"] == [1.0, 0.8]
    assert row["flow_peak_mib"]["median"] == 6.0 and row["ops_per_step"] == 10
    assert row["first_s"]["n"] == 1  # a process without a warm-up step has no first-call time
    assert "ratio_wall" not in row
    (cold,) = H.aggregate({("g", "numpy a", 1): [_out([1.0], first=None)]}, None)
    assert cold["first_s"] is None


def test_the_table_gives_time_per_op_with_ranges_and_the_load():
    outs = [_out([2e-3, 4e-3], ops=1000), _out([6e-3], ops=1000)]
    report = {
        "results": H.aggregate({("add", "numpy a", 2): outs}, None),
        "loads": [{"before": (1.5, 0, 0), "after": (2.25, 0, 0)}],
        "rounds": 2,
        "baseline": None,
    }
    table = H.markdown(report, unit="us")
    assert "| add | numpy a | 2 | 4.00 [3.00-6.00] |" in table  # 4 ms over 1000 ops; medians 3 and 6 ms
    assert "1.50-2.25" in table and "2 round(s)" in table


# -- cases and the command line -------------------------------------------------------------------
def test_case_checks_its_fields_and_round_trips_through_json():
    c = H.Case("flow", "graph", "graph:setup_graph", {"model": "mlp"}, group="mlp", env={"X": "1"}, ops_per_step=3)
    assert H.Case.from_json(c.to_json()) == c and c.name == "flow graph"
    with pytest.raises(ValueError, match="framework"):
        H.Case("jax", "eager", "m:f")
    with pytest.raises(ValueError, match="module:function"):
        H.Case("flow", "eager", "models.setup_eager")
    with pytest.raises(ValueError, match="ops_per_step"):
        H.Case("flow", "eager", "m:f", ops_per_step=0)


def test_thread_and_list_options():
    assert H.parse_threads("1,2") == (1, 2) and H.parse_threads("4") == (4,)
    for bad in ("", "0", "1,x", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--threads"):
            H.parse_threads(bad)
    assert H.parse_list("a, b", ("a", "b"), "model") == ["a", "b"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown model c"):
        H.parse_list("a,c", ("a", "b"), "model")


def test_run_rejects_an_unknown_baseline_and_duplicate_cases():
    with pytest.raises(ValueError, match="baseline 'torch eager' is none of the cases"):
        H.run([_case("a")], baseline="torch eager")
    with pytest.raises(ValueError, match="share a group"):
        H.run([_case("a"), _case("a")])


# -- end to end: real worker processes --------------------------------------------------------------
PROBE = """
import os, time

def setup(log, tag, ops=1):
    with open(log, "a") as fh:
        fh.write(f"{tag} {os.environ['OMP_NUM_THREADS']} {os.environ['PROBE']}\\n")
    state = {"n": 0}

    def step():
        state["n"] += 1
        sum(range(ops))

    return step, lambda: {"calls": state["n"]}
"""


def test_run_starts_a_process_per_case_round_and_thread_count_in_alternating_order(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text(PROBE)
    log = tmp_path / "order.log"
    env = {"PYTHONPATH": str(tmp_path), "PROBE": "on"}
    cases = [
        H.Case("numpy", tag, "probe:setup", {"log": str(log), "tag": tag, "ops": 1000}, group="g", env=env)
        for tag in ("a", "b")
    ]
    monkeypatch.setattr(H, "machine_info", lambda: {})  # not what is tested; it would import NumPy
    report = H.run(cases, rounds=2, threads=(1, 2), warmup=2, steps=3, baseline="numpy a", log=io.StringIO())
    # round 1 in order, round 2 reversed; each worker saw its thread count and its case's environment
    assert log.read_text().split("\n")[:-1] == [
        "a 1 on", "b 1 on", "a 2 on", "b 2 on",
        "b 2 on", "a 2 on", "b 1 on", "a 1 on",
    ]  # fmt: skip
    assert len(report["loads"]) == 2 and all(len(ld["before"]) == 3 for ld in report["loads"])
    rows = {(r["case"], r["threads"]): r for r in report["results"]}
    assert set(rows) == {("numpy a", 1), ("numpy b", 1), ("numpy a", 2), ("numpy b", 2)}
    for r in rows.values():
        assert r["processes"] == 2 and r["wall"]["n"] == 6 and r["wall"]["median"] > 0
        assert r["extra"]["calls"]["median"] == 5  # 2 warm-up + 3 timed steps per process
        assert r["first_s"]["n"] == 2 and r["peak_mib"]["n"] == 2
    assert rows[("numpy a", 1)]["ratio_wall"] == 1.0
    json.dumps(report)  # the --json dump


def test_a_failing_worker_names_its_case(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text("def setup():\n    raise RuntimeError('no such model')\n")
    case = H.Case("numpy", "broken", "probe:setup", group="g", env={"PYTHONPATH": str(tmp_path)})
    monkeypatch.setattr(H, "machine_info", lambda: {})
    with pytest.raises(RuntimeError, match=r"(?s)g numpy broken x1 failed.*no such model"):
        H.run([case], rounds=1, threads=(1,), log=io.StringIO())


def test_a_case_whose_setup_skips_is_reported_with_its_reason(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text(
        "import harness\n\ndef setup(skip):\n    if skip:\n        raise harness.Skip('no C compiler')\n"
        "    return lambda: None\n"
    )
    env = {"PYTHONPATH": str(tmp_path)}
    cases = [
        H.Case("numpy", v, "probe:setup", {"skip": v == "compiled"}, group="g", env=env) for v in ("eager", "compiled")
    ]
    monkeypatch.setattr(H, "machine_info", lambda: {})
    report = H.run(cases, rounds=1, threads=(1,), steps=2, baseline="numpy eager", log=io.StringIO())
    rows = {r["case"]: r for r in report["results"]}
    assert rows["numpy compiled"] == {"group": "g", "case": "numpy compiled", "threads": 1, "skipped": "no C compiler"}
    assert rows["numpy eager"]["wall"]["n"] == 2
    assert "| g | numpy compiled | 1 | skipped: no C compiler |" in H.markdown(report)


def test_peak_memory_counts_from_the_setups_baseline_mark(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text(
        "import harness\nKEEP = []\n\ndef setup(mark):\n"
        "    KEEP.append(bytearray(64 << 20))  # touched: resident before the mark\n"
        "    if mark:\n        harness.mark_baseline()\n    return lambda: None\n"
    )
    env = {"PYTHONPATH": str(tmp_path)}
    cases = [H.Case("numpy", str(m), "probe:setup", {"mark": m}, group="g", env=env) for m in (True, False)]
    monkeypatch.setattr(H, "machine_info", lambda: {})
    report = H.run(cases, rounds=1, threads=(1,), steps=1, log=io.StringIO())
    peak = {r["case"]: r["peak_mib"]["median"] for r in report["results"]}
    assert peak["numpy True"] < 16 and peak["numpy False"] > 48
