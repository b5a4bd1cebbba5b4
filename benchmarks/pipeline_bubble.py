"""The pipeline bubble of flow_dist.pipeline, measured: per stage, the time blocked waiting for
messages over the schedule's time, for GPipe and 1F1B, at 4 and 8 micro-batches, next to the
theory (p - 1) / (m + p - 1) for p stages of equal cost and m micro-batches.

    python benchmarks/pipeline_bubble.py                  # 2 stages (launches mpiexec itself)
    python benchmarks/pipeline_bubble.py --stages 4 --steps 5

The model is a stack of equal blocks (Linear 512-512 + tanh, 4 per stage, float32), batch 512,
so every stage costs the same; one rank per stage, one BLAS thread each. A stage's bubble is the
time it spent in receives (waiting for the activation or the gradient of a micro-batch) and in
waiting for its sends, over the wall-clock time of the schedule (gradient synchronisation after
the micro-batches excluded); the figure is the median over the timed steps, after a warm-up
step. The wait includes the transfers themselves, which the theory leaves out; on a machine
with fewer cores than stages the ranks share cores and the figures mean little.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

WIDTH, BLOCKS_PER_STAGE, BATCH = 512, 4, 512


def worker(steps: int) -> None:
    import numpy as np

    import flow
    from flow_dist import pipeline as pp
    from flow_dist.comm.backend import get_backend

    nn = flow.nn
    rank, p = flow.env.get_rank(), flow.env.get_world_size()
    flow.manual_seed(0)
    layers = []
    for _ in range(p * BLOCKS_PER_STAGE):
        layers += [nn.Linear(WIDTH, WIDTH), nn.Tanh()]
    module = pp.split_sequential(nn.Sequential(*layers), p)
    x = flow.randn(BATCH, WIDTH)
    y = flow.randn(BATCH, WIDTH)
    rows = []
    for name, cls in (("GPipe", pp.ScheduleGPipe), ("1F1B", pp.Schedule1F1B)):
        for m in (4, 8):
            sched = cls(pp.PipelineStage(module, rank, p), m, flow.nn.functional.mse_loss)
            bubbles, times = [], []
            for s in range(steps + 1):
                for q in module.parameters():
                    q.grad = None
                sched.step(x) if rank == 0 else sched.step(target=y) if rank == p - 1 else sched.step()
                if s:  # the first step warms up
                    bubbles.append(sched.timing["bubble"])
                    times.append(sched.timing["schedule_s"])
            rows.append((name, m, float(np.median(bubbles)), float(np.median(times))))
    every = get_backend("cpu", None).all_gather(np.array([[b, t] for _, _, b, t in rows]))
    if rank == 0:
        per_stage = f"{BLOCKS_PER_STAGE} x Linear({WIDTH}, {WIDTH}) + tanh per stage"
        print(f"pipeline bubble: {p} stages, {per_stage}, batch {BATCH}")
        head = "".join(f"  stage {s} idle" for s in range(p))
        print(f"{'schedule':<9}{'m':>3}{head}  {'mean':>6}  {'theory':>6}  {'step ms':>8}")
        for i, (name, m, _, _) in enumerate(rows):
            idle = [every[s][i][0] for s in range(p)]
            step_ms = 1e3 * max(every[s][i][1] for s in range(p))
            theory = (p - 1) / (m + p - 1)
            cells = "".join(f"  {v:>12.1%}" for v in idle)
            print(f"{name:<9}{m:>3}{cells}  {np.mean(idle):>6.1%}  {theory:>6.1%}  {step_ms:>8.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.steps)
        return
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = here if os.path.exists(here) else "mpiexec"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [mpiexec, "-n", str(args.stages), sys.executable, "-m", "mpi4py", os.path.abspath(__file__), "--worker"]
    sys.exit(subprocess.run(cmd + ["--steps", str(args.steps)], env=env, timeout=900).returncode)


if __name__ == "__main__":
    main()
