"""``flow-launch``: start a script on several processes (``python -m flow_dist.launch`` too).

    flow-launch -n 4 train.py --epochs 3
    flow-launch -n 8 --hosts node1,node2 train.py
    flow-launch -n 2 -m flow_models.train gpt

runs ``mpiexec -n N [-hosts ...] python -m flow_dist._rank script args...``: mpi4py's runner with
MPI initialised first, which turns an exception that escapes a rank into ``MPI_Abort``, so the
whole job stops (the failing rank prints its traceback once) instead of leaving the other ranks
waiting in a collective. The launcher
passes its exit status on, forwards SIGINT / SIGTERM to the job and makes sure no process of it
outlives the launcher. Each rank gets ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` of
``cores // N`` (at least 1) unless they are set, so that N ranks do not oversubscribe the cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["main", "mpiexec_path", "command"]


class LaunchError(SystemExit):
    pass


def mpiexec_path() -> str:
    """The mpiexec next to this Python (the ``mpich`` wheel installs one), else on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if found is None:
        raise LaunchError("flow-launch: no mpiexec found; install MPI with `pip install flow-dist[mpi]` (MPICH)")
    return found


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flow-launch",
        description="Run a flow script on N processes (mpiexec -n N python -m mpi4py ...).",
    )
    p.add_argument("-n", "--nproc", type=int, required=True, help="number of processes (ranks)")
    p.add_argument("--hosts", default=None, help="comma-separated host names to spread the ranks over")
    p.add_argument("-m", dest="module", default=None, help="run a module (as python -m) instead of a script")
    p.add_argument("script", nargs="?", help="the script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def command(argv: list[str]) -> tuple[list[str], dict]:
    """The mpiexec command line and environment ``flow-launch argv`` runs."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        raise LaunchError("flow-launch: mpi4py is not installed; `pip install flow-dist[mpi]`") from None
    ns = _parser().parse_args(argv)
    if ns.nproc < 1:
        raise LaunchError(f"flow-launch: -n must be at least 1, got {ns.nproc}")
    if ns.module is None and ns.script is None:
        raise LaunchError("flow-launch: give a script to run (or -m module)")
    cmd = [mpiexec_path(), "-n", str(ns.nproc)]
    if ns.hosts:
        cmd += ["-hosts", ns.hosts]
    cmd += [sys.executable, "-m", "flow_dist._rank"]
    if ns.module is not None:
        rest = ([ns.script] if ns.script is not None else []) + ns.args
        cmd += ["-m", ns.module, *rest]
    else:
        if not Path(ns.script).exists():
            raise LaunchError(f"flow-launch: no such script: {ns.script}")
        cmd += [ns.script, *ns.args]
    env = dict(os.environ)
    threads = str(max(1, (os.cpu_count() or 1) // ns.nproc))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(var, threads)
    return cmd, env


def main(argv: list[str] | None = None) -> int:
    cmd, env = command(sys.argv[1:] if argv is None else argv)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)  # its own group: signals reach every rank

    def forward(signum, frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        try:  # nothing of the job outlives the launcher
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
