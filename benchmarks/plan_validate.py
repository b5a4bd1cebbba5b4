"""Predicted vs measured step time of flow-dist's cost model on this machine.

    python benchmarks/plan_validate.py [--alpha-beta ~/.cache/flow/plan/mpi.json] [--steps 7]

A small GPT (float64, AdamW, nn.Graph on global tensors) trained with data parallelism at 1, 2 and
4 ranks (batch split S(0), parameters broadcast) and with tensor parallelism by hand at 2 ranks
(every block's c_fc weight and bias S(0), c_proj weight S(1): Megatron's MLP split, the rest
replicated). Each run reports the median of ``--steps`` timed steps after 2 warm-up steps; the
prediction is ``flow_dist.plan.simulate`` with this CPU's profile (measured with one BLAS thread,
as the ranks run) and the MPI link of benchmarks/mpi_alpha_beta.py's JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = dict(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=128)
BATCH = 16


def worker(mode: str, steps: int) -> None:
    import numpy as np

    import flow
    from flow_models.nlp.gpt import GPT, GPTConfig

    flow.set_default_dtype(flow.float64)
    n = flow.env.get_world_size()
    P = flow.placement("cpu", list(range(n)))
    B, S0, S1 = flow.sbp.broadcast, flow.sbp.split(0), flow.sbp.split(1)
    flow.manual_seed(0)
    model = GPT(GPTConfig(**CFG))
    if mode == "tp":
        for name, m in model.named_modules():
            if name.endswith("mlp.c_fc"):
                m.to_global(P, lambda pname, t: [S0])
            elif name.endswith("mlp.c_proj"):
                m.to_global(P, lambda pname, t: [S1] if pname == "weight" else [B])
        model.to_global(P, B)  # everything not split yet: replicated
    else:
        model.to_global(P, B)
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    F = flow.nn.functional

    class Step(flow.nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.m = model
            self.add_optimizer(opt)

        def build(self, x, y):
            from flow_dist.handler import implicit_broadcast

            with implicit_broadcast():  # the GPT's positions are a local arange: the same on every rank
                logits = self.m(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
            loss.backward()
            return loss

    step = Step()
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.integers(0, CFG["vocab_size"], (BATCH, CFG["block_size"]))).to_global(P, B)
    y = flow.tensor(rng.integers(0, CFG["vocab_size"], (BATCH * CFG["block_size"],))).to_global(P, B)
    if mode == "dp":
        x, y = x.to_global(sbp=S0), y.to_global(sbp=S0)
    from flow_dist.comm.backend import get_backend

    be = get_backend("cpu", None)
    times, cpu = [], []
    for i in range(steps + 2):
        be.barrier()
        t, c = time.perf_counter(), time.process_time()
        loss = step(x, y)
        float(loss.detach().numpy())  # wait for the step
        be.barrier()
        if i >= 2:
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    # the share of a core this rank got: the machine is shared, so a step's wall time is its CPU
    # time stretched by the other processes' load
    share = float(np.mean(be.all_gather(np.array([sum(cpu) / sum(times)]))))
    if flow.env.get_rank() == 0:
        print(json.dumps({"median": float(np.median(times)), "times": times, "cpu_share": share}), flush=True)


def measure(mode: str, n: int, steps: int) -> dict:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = ["timeout", "600", mpiexec, "-n", str(n), sys.executable, "-m", "mpi4py", __file__]
    cmd += ["--worker", mode, "--steps", str(steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_one_thread())
    if p.returncode:
        raise RuntimeError(f"{mode} at {n} ranks failed:\n{p.stdout}{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _one_thread() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha-beta", default=os.path.join(os.path.expanduser("~"), ".cache", "flow", "plan", "mpi.json"))
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--worker", choices=["dp", "tp"], help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.steps)
        return 0
    if a.profile:  # this CPU as one rank sees it: one BLAS thread
        from dataclasses import asdict

        from flow_dist.plan.devices import measure_cpu

        print(json.dumps(asdict(measure_cpu(1.0))))
        return 0
    import flow
    from flow_dist.plan import Cluster, DeviceProfile, Strategy, gpt_workload, simulate
    from flow_models.nlp.gpt import GPTConfig

    p = subprocess.run([sys.executable, __file__, "--profile"], capture_output=True, text=True, env=_one_thread())
    dev = DeviceProfile(**json.loads(p.stdout.strip().splitlines()[-1]))
    ab = a.alpha_beta if os.path.isfile(a.alpha_beta) else None
    flow.set_default_dtype(flow.float64)
    work = gpt_workload(GPTConfig(**CFG), trace_layers=CFG["n_layer"], name="gpt-small")
    print(f"device: {dev.flops / 1e9:.1f} GFLOP/s, {dev.mem_bandwidth / 1e9:.1f} GB/s per rank (1 thread)")
    print(f"model: {work.params / 1e6:.2f}M parameters, batch {BATCH} x {CFG['block_size']}, float64, AdamW")
    print(f"MPI link: {ab or 'not measured (run benchmarks/mpi_alpha_beta.py)'}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cols = f"{'idle pred ms':>12} {'CPU share':>9} {'pred ms':>8} {'measured ms':>11} {'error':>7}"
    print(f"{'run':<10} {'ranks':>5} {cols}")
    runs = [("dp", 1, Strategy(dp=1)), ("dp", 2, Strategy(dp=2, overlap=False))]
    runs += [("dp", 4, Strategy(dp=4, overlap=False)), ("tp (mlp)", 2, Strategy(tp=2, tp_scopes=("mlp",)))]
    for name, n, st in runs:
        idle = simulate(work, Cluster.local(n, ab, dev), st, BATCH).step_time
        got = measure(name.split()[0], n, a.steps)
        share = min(1.0, got["cpu_share"])
        pred = simulate(work, Cluster.local(n, ab, dev, cpu_share=share), st, BATCH).step_time
        med = got["median"]
        print(
            f"{name:<10} {n:>5} {idle * 1e3:>12.1f} {share:>9.2f} {pred * 1e3:>8.1f} {med * 1e3:>11.1f} "
            f"{(pred - med) / med:>+7.1%}",
            flush=True,
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
