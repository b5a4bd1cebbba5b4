"""flow-dist on several processes: each script in tests/ranks runs under mpiexec at 2 and 4 ranks
(3 where uneven pieces matter) and must print its "ok" line."""

from __future__ import annotations

import pytest
from _ranks import needs_mpi, run_ranks

pytestmark = needs_mpi()


@pytest.mark.parametrize("n", [2, 4])
def test_collectives(n):
    assert "comm ok" in run_ranks("comm.py", n).stdout


@pytest.mark.parametrize("n", [2, 3, 4])
def test_boxing_every_pair_of_layouts(n):
    assert "boxing ok" in run_ranks("boxing.py", n).stdout


@pytest.mark.parametrize("n", [2, 4])
def test_rule_table_parity(n):
    out = run_ranks("sbp_rules.py", n, timeout=300).stdout
    assert "sbp rules ok" in out, out


@pytest.mark.parametrize("n", [2, 4])
def test_global_tensors_train_like_one_process(n):
    assert "global ops ok" in run_ranks("global_ops.py", n, timeout=300).stdout


def test_checkpoints_move_between_world_sizes(tmp_path):
    path = str(tmp_path / "ckpt.safetensors")
    assert "checkpoint ok" in run_ranks("checkpoint.py", 2, path).stdout
    assert "checkpoint ok" in run_ranks("checkpoint.py", 4, path, "--load-only").stdout


def test_a_collective_a_rank_never_joins_times_out():
    # both ranks leave without finalising MPI (the abandoned collective would block it), which
    # mpiexec may report with a nonzero status: what counts is rank 0's error and its timing
    p = run_ranks("timeout.py", 2, env={"FLOW_COMM_TIMEOUT": "1"}, check=False)
    out = p.stdout
    assert "timeout ok" in out, p.stdout + p.stderr
    took = float(out.split("timeout ok")[1].split()[0])
    assert 0.9 <= took < 5, took


@pytest.mark.parametrize("n", [2, 4])
def test_ddp_trains_like_one_process_on_the_whole_batch(n):
    assert "ddp ok" in run_ranks("ddp.py", n, timeout=300).stdout


@pytest.mark.parametrize("n", [2, 4])
def test_graph_mode_on_global_tensors_trains_like_one_process(n):
    assert "graph ok" in run_ranks("graph.py", n, timeout=300).stdout
