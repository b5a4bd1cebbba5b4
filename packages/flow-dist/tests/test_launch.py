"""flow-launch: runs a script on N ranks through mpiexec, passes arguments and the exit status on,
and stops the whole job, quickly and without leftovers, when a rank raises."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid

import pytest
from _ranks import RANKS, needs_mpi

pytestmark = needs_mpi()


def launch(*args, timeout=60):
    cmd = [sys.executable, "-m", "flow_dist.launch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_runs_every_rank_with_its_arguments():
    p = launch("-n", "3", str(RANKS / "hello.py"), "a", "--b")
    assert p.returncode == 0, p.stderr
    # (mpiexec forwards each rank's output in chunks: lines of two ranks may run together)
    found = sorted(re.findall(r"hello rank \d of \d args \[[^\]]*\]", p.stdout))
    assert found == [f"hello rank {r} of 3 args ['a', '--b']" for r in range(3)], p.stdout


def test_a_module_runs_with_dash_m():
    p = launch("-n", "2", "-m", "flow_dist.env_main")
    assert p.returncode == 0, p.stderr
    assert sorted(re.findall(r"rank=\d/\d", p.stdout)) == ["rank=0/2", "rank=1/2"], p.stdout


def test_the_exit_status_is_passed_on():
    p = launch("-n", "2", str(RANKS / "hello.py"), "--exit", "3")
    assert p.returncode == 3, (p.returncode, p.stderr)


def test_a_rank_that_raises_stops_the_job_quickly_with_one_traceback_and_no_leftovers():
    marker = f"flow-launch-test-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    p = launch("-n", "2", str(RANKS / "raises.py"), marker, timeout=30)
    took = time.monotonic() - start
    out = p.stdout + p.stderr
    assert p.returncode != 0
    assert took < 10, f"the job took {took:.1f} s to stop"
    assert out.count("Traceback (most recent call last)") == 1, out
    assert f"ValueError: boom from rank 1 ({marker})" in out
    assert "rank 0 should not get here" not in out
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"processes left over: {left.stdout}"


@pytest.mark.parametrize(
    "args, message",
    [(["-n", "0", "x.py"], "-n must be at least 1"), (["-n", "2", "/no/such/script.py"], "no such script")],
)
def test_bad_command_lines_say_what_is_wrong(args, message):
    p = launch(*args)
    assert p.returncode != 0 and message in p.stderr, p.stderr
