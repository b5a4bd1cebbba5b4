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
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = dict(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=128)
BATCH = 16
PP_MICRO_BATCHES = 4
# (label, mode, ranks): DP in graph mode; TP and PP eager, as their APIs run, against one eager process
RUNS = [
    ("dp", "dp", 1),
    ("dp", "dp", 2),
    ("dp", "dp", 4),
    ("tp/pp 1 rank (eager)", "eager", 1),
    ("tp", "tp", 2),
    ("tp", "tp", 4),
    ("pp2", "pp", 2),
    ("dp2 x pp2", "pp", 4),
]


def worker(mode: str, steps: int) -> None:
    import numpy as np

    import flow
    from flow_dist.comm.backend import get_backend
    from flow_models.nlp.gpt import GPT, GPTConfig

    flow.set_default_dtype(flow.float64)
    n = flow.env.get_world_size()
    flow.manual_seed(0)
    model = GPT(GPTConfig(**CFG))
    rng = np.random.default_rng(0)
    idx = rng.integers(0, CFG["vocab_size"], (BATCH, CFG["block_size"]))
    tgt = np.roll(idx, -1, axis=1)
    be = get_backend("cpu", None)
    if mode in ("dp", "graph1"):
        run = _graph_dp(flow, model, idx, tgt, n)
    elif mode == "tp":
        run = _eager_tp(flow, model, idx, tgt, n)
    elif mode == "pp":
        run = _eager_pp(flow, model, idx, tgt, n)
    else:  # eager: one process, the baseline of the eager TP and PP runs
        run = _eager_local(flow, model, idx, tgt)
    times, cpu = [], []
    for i in range(steps + 2):
        be.barrier()
        t, c = time.perf_counter(), time.process_time()
        run()
        be.barrier()
        if i >= 2:
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    # the share of a core this rank got (CPU time / wall time): the machine is shared, and MPI ranks
    # spin while they wait, so this overstates the share that went to compute
    share = float(np.mean(be.all_gather(np.array([sum(cpu) / sum(times)]))))
    if flow.env.get_rank() == 0:
        print(json.dumps({"median": float(np.median(times)), "times": times, "cpu_share": share}), flush=True)


def _graph_dp(flow, model, idx, tgt, n):
    """nn.Graph on global tensors: parameters broadcast, the batch split S(0)."""
    from flow_dist.handler import implicit_broadcast

    P = flow.placement("cpu", list(range(n)))
    B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
    model.to_global(P, B)
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    class Step(flow.nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.m = model
            self.add_optimizer(opt)

        def build(self, x, y):
            with implicit_broadcast():  # the GPT's positions are a local arange: the same on every rank
                loss = self.m.loss(self.m(x), y)
            loss.backward()
            return loss

    step = Step()
    x = flow.tensor(idx).to_global(P, B).to_global(sbp=S0)
    y = flow.tensor(tgt).to_global(P, B).to_global(sbp=S0)
    return lambda: float(step(x, y).detach().numpy())


def _eager_local(flow, model, idx, tgt):
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    x, y = flow.tensor(idx), flow.tensor(tgt)

    def run():
        opt.zero_grad()
        loss = model.loss(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach().numpy())

    return run


def _eager_tp(flow, model, idx, tgt, n):
    """Megatron's GPT split through flow_dist.parallel.tensor_parallel, eager."""
    from flow_dist.handler import implicit_broadcast
    from flow_dist.parallel import tensor_parallel

    P = flow.placement("cpu", list(range(n)))
    tensor_parallel(model, P, "gpt")
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    B = flow.sbp.broadcast
    x, y = flow.tensor(idx).to_global(P, B), flow.tensor(tgt).to_global(P, B)

    def run():
        opt.zero_grad()
        with implicit_broadcast():
            loss = model.loss(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach().to_local().numpy())

    return run


def _eager_pp(flow, model, idx, tgt, n):
    """2 stages of 1F1B over 4 micro-batches; 4 ranks: 2 data-parallel replicas of the pipeline."""
    from flow_dist import pipeline as pp

    mesh = pp.pipeline_mesh(num_stages=2)
    module = pp.gpt_stages(model, 2, mesh.stage_index)
    stage = pp.PipelineStage(module, mesh.stage_index, 2, group_ranks=mesh.group_ranks, dp_ranks=mesh.dp_ranks)
    schedule = pp.Schedule1F1B(stage, n_microbatches=PP_MICRO_BATCHES, loss_fn=model.loss)
    opt = flow.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.1)
    dp = n // 2
    r = flow.env.get_rank() // 2  # this rank's replica (pipeline_mesh: consecutive ranks, consecutive stages)
    rows = slice(r * BATCH // dp, (r + 1) * BATCH // dp)
    x, y = flow.tensor(idx[rows]), flow.tensor(tgt[rows])

    def run():
        opt.zero_grad()
        if stage.is_first:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=[])
        opt.step()

    return run


def measure(mode: str, n: int, steps: int) -> dict:
    """One run under mpiexec; meanwhile the machine's runnable threads are sampled every 20 ms (the
    other jobs' load during the run is an input of the prediction, as the core count is)."""
    from flow_dist.plan.calibrate import runnable

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = ["timeout", "600", mpiexec, "-n", str(n), sys.executable, "-m", "mpi4py", __file__]
    cmd += ["--worker", mode, "--steps", str(steps)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=_one_thread())
        samples = []
        while p.poll() is None:
            r = runnable()
            if r is not None:
                samples.append(r)
            time.sleep(0.02)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode:
        raise RuntimeError(f"{mode} at {n} ranks failed:\n{stdout}{stderr}")
    got = json.loads(stdout.strip().splitlines()[-1])
    got["runnable"] = samples
    return got


def _one_thread() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")


def strategy(mode: str, n: int):
    """The simulator's strategy for one of RUNS."""
    from flow_dist.plan import Strategy

    if mode == "dp":
        return Strategy(dp=n, overlap=False)  # one core per rank (or less): nothing to overlap with
    if mode == "tp":
        return Strategy(tp=n)
    if mode == "pp":
        return Strategy(dp=n // 2, pp=2, micro_batches=PP_MICRO_BATCHES)
    return Strategy()


def predict(mode: str, n: int, ab, dev, work_graph, work_eager, background: float = 0.0) -> float:
    from flow_dist.plan import Cluster, simulate

    work = work_graph if mode == "dp" else work_eager
    return simulate(work, Cluster.local(n, ab, dev, background=background), strategy(mode, n), BATCH).step_time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha-beta", default=os.path.join(os.path.expanduser("~"), ".cache", "flow", "plan", "mpi.json"))
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the runs (alternating order)")
    ap.add_argument("--out", default=os.path.join(os.path.expanduser("~"), ".cache", "flow", "plan", "validate.json"))
    ap.add_argument("--predict-only", action="store_true", help="predict against the measurements in --out")
    ap.add_argument("--worker", choices=["dp", "tp", "pp", "eager"], help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.steps)
        return 0
    if a.profile:  # this CPU as one rank sees it: one BLAS thread
        from dataclasses import asdict

        from flow_dist.plan.calibrate import calibrate_cpu

        print(json.dumps(asdict(calibrate_cpu())))
        return 0
    import dataclasses

    import numpy as np

    import flow
    from flow_dist.plan import DeviceProfile, gpt_workload
    from flow_dist.plan.calibrate import background_load
    from flow_models.nlp.gpt import GPTConfig

    if not a.predict_only:
        measured: dict = {"load_average": [list(os.getloadavg())], "runs": {}}
        for r in range(a.rounds):
            order = RUNS if r % 2 == 0 else RUNS[::-1]  # alternate, so a load drift hits every run alike
            for _, mode, n in order:
                got = measure(mode, n, a.steps)
                measured["runs"].setdefault(f"{mode}{n}", []).append(got)
                print(f"round {r}: {mode} at {n}: {got['median'] * 1e3:.1f} ms", flush=True)
            measured["load_average"].append(list(os.getloadavg()))
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(measured, f, indent=1)
    with open(a.out) as f:
        measured = json.load(f)
    if "profile" not in measured:  # calibrated after the runs, in a process of its own (one BLAS thread)
        p = subprocess.run([sys.executable, __file__, "--profile"], capture_output=True, text=True, env=_one_thread())
        if p.returncode:
            raise RuntimeError(f"calibration failed:\n{p.stdout}{p.stderr}")
        measured["profile"] = json.loads(p.stdout.strip().splitlines()[-1])
        with open(a.out, "w") as f:
            json.dump(measured, f, indent=1)
    prof = measured["profile"]
    dev = DeviceProfile.from_dict(prof)
    ab = a.alpha_beta if os.path.isfile(a.alpha_beta) else None
    flow.set_default_dtype(flow.float64)
    work_graph = gpt_workload(GPTConfig(**CFG), trace_layers=CFG["n_layer"], name="gpt-small")
    work_eager = dataclasses.replace(work_graph, mode="eager")
    print(f"device: {dev.flops / 1e9:.1f} GFLOP/s peak GEMM, {dev.mem_bandwidth / 1e9:.1f} GB/s per rank (1 thread)")
    print(f"dispatch per op: eager {dev.eager_overhead * 1e6:.1f} us, graph {dev.graph_overhead * 1e6:.1f} us")
    print(f"model: {work_graph.params / 1e6:.2f}M parameters, batch {BATCH} x {CFG['block_size']}, float64, AdamW")
    print(f"MPI link: {ab or 'not measured (run benchmarks/mpi_alpha_beta.py)'}")
    print("load average: " + "; ".join(" ".join(f"{x:.2f}" for x in la) for la in measured["load_average"]))
    print("| run | ranks | idle pred ms | background | pred ms | measured ms | error | CPU share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, mode, n in RUNS:
        got = measured["runs"][f"{mode}{n}"]
        med = float(np.median([g["median"] for g in got]))
        share = float(np.median([g["cpu_share"] for g in got]))
        bg = float(np.median([background_load(g["runnable"], n) for g in got]))
        idle = predict(mode, n, ab, dev, work_graph, work_eager)
        pred = predict(mode, n, ab, dev, work_graph, work_eager, bg)
        print(
            f"| {label} | {n} | {idle * 1e3:.1f} | {bg:.2f} | {pred * 1e3:.1f} | {med * 1e3:.1f} | "
            f"{(pred - med) / med:+.1%} | {share:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
