"""Running a script on several ranks from a test: ``run_ranks(script, n)``.

The script runs as ``timeout T mpiexec -n N python -m mpi4py script args`` (a rank that raises
aborts the job), with one BLAS thread per rank; a nonzero exit fails the test with the whole
output. Tests skip when mpi4py or mpiexec is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RANKS = Path(__file__).parent / "ranks"


def mpiexec() -> str | None:
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def needs_mpi():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return pytest.mark.skip(reason="mpi4py is not installed (pip install flow-dist[mpi])")
    if mpiexec() is None:
        return pytest.mark.skip(reason="no mpiexec on PATH")
    return pytest.mark.skipif(False, reason="")


def run_ranks(script: str, n: int, *args: str, timeout: float = 120, env: dict | None = None, check: bool = True):
    """Run ``ranks/<script>`` on ``n`` ranks; returns the CompletedProcess (output in ``.stdout``).
    ``check=False``: any exit status (a script that leaves MPI unfinalised on purpose)."""
    e = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env or {}))
    cmd = [
        "timeout",
        str(int(timeout)),
        mpiexec(),
        "-n",
        str(n),
        sys.executable,
        "-m",
        "mpi4py",
        str(RANKS / script),
        *args,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout + 30)
    if check and p.returncode != 0:
        pytest.fail(f"{script} on {n} ranks exited with {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p
