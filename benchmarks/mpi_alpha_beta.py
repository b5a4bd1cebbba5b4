"""Measure this machine's MPI: alpha (latency) and beta (seconds per byte) for flow-dist's cost model.

    python benchmarks/mpi_alpha_beta.py --out ~/.cache/flow/plan/mpi.json

runs itself under mpiexec at 2 and 4 ranks (``--ranks``): a ping-pong between ranks 0 and 1 and an
all-reduce of float64 buffers over sizes from 8 B to 8 MiB through ``flow_dist.comm`` (the backend
flow-dist uses), the median of ``--repeats`` timings per size; fits ``t = alpha + n beta`` to each
and writes the JSON that ``flow_dist.plan.Cluster.local(ranks, path)`` reads (both fits per rank
count: on this 2-core machine 4 ranks oversubscribe the cores and the latency grows with it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SIZES = [8 << (2 * i) for i in range(11)]  # 8 B .. 8 MiB


def worker(repeats: int) -> None:
    import flow  # noqa: F401  (sets up the job's environment)
    from flow_dist.comm.backend import get_backend

    be = get_backend("cpu", None)
    rank, size = be.rank, be.size
    out: dict = {"ranks": size, "ping_pong": [], "all_reduce": []}
    for n in SIZES:
        buf = np.ones(n // 8)
        got = np.empty_like(buf)
        times = []
        for _ in range(repeats):
            be.barrier()
            t = time.perf_counter()
            if rank == 0:
                be.send(buf, 1)
                be.recv(got, 1)
            elif rank == 1:
                be.recv(got, 0)
                be.send(buf, 0)
            times.append((time.perf_counter() - t) / 2)  # one way
        out["ping_pong"].append(float(np.median(times)))
        times = []
        for _ in range(repeats):
            be.barrier()
            t = time.perf_counter()
            be.all_reduce(buf)
            times.append(time.perf_counter() - t)
        # the slowest rank decides when a collective is done
        out["all_reduce"].append(float(np.max(be.all_gather(np.array([np.median(times)])))))
    if rank == 0:
        print(json.dumps(out), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.expanduser("~"), ".cache", "flow", "plan", "mpi.json"))
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.repeats)
        return 0
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "packages", "flow-dist", "src"))
    from flow_dist.plan.collectives import fit_alpha_beta

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    result: dict = {"sizes": SIZES, "all_reduce": {}, "load_average": os.getloadavg(), "cores": os.cpu_count()}
    for n in (int(r) for r in a.ranks.split(",")):
        cmd = ["timeout", "300", mpiexec, "-n", str(n), sys.executable, "-m", "mpi4py", __file__, "--worker"]
        cmd += ["--repeats", str(a.repeats)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode:
            print(p.stdout + p.stderr, file=sys.stderr)
            return p.returncode
        data = json.loads(p.stdout.strip().splitlines()[-1])
        ar = fit_alpha_beta(SIZES, data["all_reduce"])
        result["all_reduce"][str(n)] = {"alpha": ar.alpha, "beta": ar.beta, "seconds": data["all_reduce"]}
        # ping-pong per rank count too: with more ranks than cores, a send waits for its peer to be
        # scheduled, so a pipeline's send/recv latency depends on how many ranks share the cores
        pp = fit_alpha_beta(SIZES, data["ping_pong"])
        fit = {"alpha": pp.alpha, "beta": pp.beta, "seconds": data["ping_pong"]}
        result.setdefault("ping_pong", fit)  # the smallest rank count: the uncontended link
        result.setdefault("ping_pong_by_ranks", {})[str(n)] = fit
        print(
            f"{n} ranks: all-reduce alpha {ar.alpha * 1e6:.1f} us, {ar.bandwidth / 1e9:.2f} GB/s; "
            f"ping-pong alpha {pp.alpha * 1e6:.1f} us, {pp.bandwidth / 1e9:.2f} GB/s"
        )
    pp = result["ping_pong"]
    print(f"ping-pong: alpha {pp['alpha'] * 1e6:.1f} us, {1 / pp['beta'] / 1e9:.2f} GB/s")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
