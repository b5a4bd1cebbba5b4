"""Parallel strategies side by side: data, tensor and pipeline parallelism and ZeRO 1/2/3 training
the zoo GPT at 2 and 4 ranks, as ratios to data parallelism at the same world size, with the cost
model's prediction next to each measured step.

    python benchmarks/dist_strategies.py              # 3 rounds
    python benchmarks/dist_strategies.py --quick      # 1 round, 1 + 2 steps (a smoke test)

Method. Every (strategy, ranks) is its own MPI job (``mpiexec -n N``, one BLAS thread per rank),
the strategies alternating round by round (reversed every other round, so a drift in the machine's
load hits each alike). All of them train the same GPT (float32, dropout 0, AdamW) from the same
initial weights on the same global batch of ``BATCH`` sequences, so each step is the same work:

- dp: ``flow.nn.parallel.DistributedDataParallel`` (eager, local tensors), each rank a slice of
  the batch; the baseline;
- tp: ``flow_dist.parallel.tensor_parallel(model, mesh, "gpt")`` (Megatron's split, eager global
  tensors) over all ranks; dp2xtp2: a ``[[0, 1], [2, 3]]`` mesh, the batch split on axis 0;
- pp: ``flow_dist.pipeline``, 2 stages, ``Schedule1F1B`` over 4 micro-batches; dp2xpp2: two replicas;
- zero1/2/3: ``flow_dist.zero.ZeroRedundancyOptimizer`` (stage 1 behind DDP, 2 and 3 on the bare
  module), each rank a slice of the batch.

A step is timed on rank 0 from a barrier to a barrier (so a pipeline's last stage is inside it);
throughput = global batch / median step time. Memory per rank: the peak RSS of each process
(``ru_maxrss``) and the bytes of parameters + gradients + optimizer state this rank holds after the
last step (``flow_dist.zero.memory_report``; under TP the local pieces of the global tensors). Each
job also reports the mean loss over the global batch at every step: the table prints the largest
difference from DP's, so it shows the strategies did the same training.

The prediction is ``flow_dist.plan.simulate`` for the same strategy on ``Cluster.local`` (this CPU's
one-thread profile, measured by ``plan_validate.py --profile`` in a process of its own, and the MPI
link of ``benchmarks/mpi_alpha_beta.py``'s JSON when it exists).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import _common as C

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = dict(vocab_size=256, block_size=64, n_layer=4, n_head=4, n_embd=128, dropout=0.0)
BATCH = 16  # sequences per step, over all ranks
MICRO_BATCHES = 4
LR = dict(lr=1e-3, weight_decay=0.1)
# per world size: the strategies, DP first (the ratios' baseline)
CONFIGS = {
    2: ("dp", "tp", "pp", "zero1", "zero2", "zero3"),
    4: ("dp", "tp", "dp2xtp2", "dp2xpp2", "zero1", "zero2", "zero3"),
}
STEPS = (1, 3)  # (warm-up, timed)
QUICK = (1, 2)
ALPHA_BETA = os.path.join(os.path.expanduser("~"), ".cache", "flow", "plan", "mpi.json")


def _mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


# -- one rank ----------------------------------------------------------------------------------
def _data():
    import numpy as np

    rng = np.random.default_rng(0)
    idx = rng.integers(0, CFG["vocab_size"], (BATCH, CFG["block_size"]))
    return idx, np.roll(idx, -1, axis=1)


def _rows(rank: int, dp: int) -> slice:
    return slice(rank * BATCH // dp, (rank + 1) * BATCH // dp)


def _local_memory(model, opt) -> dict[str, int]:
    """memory_report's figures for a model of global tensors: the bytes of this rank's pieces
    (memory_report itself only sees NumPy-backed local tensors)."""

    def local_bytes(t) -> int:
        if t is None:
            return 0
        return int((t.to_local() if t.is_global else t).numpy().nbytes)

    params = list({id(p): p for p in model.parameters()}.values())  # the tied lm_head once
    out = {
        "parameters": sum(local_bytes(p.detach()) for p in params),
        "gradients": sum(local_bytes(p.grad) for p in params),
        "optimizer_state": sum(local_bytes(t) for s in opt.state.values() for t in s.values() if t.dim() > 0),
    }
    out["total"] = sum(out.values())
    return out


def _build(flow, config: str, rank: int, world: int):
    """(step, memory) for one strategy: ``step()`` trains one step and returns (loss sum, weight)
    this rank contributes to the global batch's mean loss; ``memory()`` the bytes it holds."""
    from flow_dist.zero import ZeroRedundancyOptimizer, memory_report
    from flow_models.nlp.gpt import GPT, GPTConfig

    idx, tgt = _data()
    flow.manual_seed(0)  # every rank builds the whole model alike
    model = GPT(GPTConfig(**CFG))
    AdamW = flow.optim.AdamW

    if config in ("dp", "zero1", "zero2", "zero3"):
        rows = _rows(rank, world)
        x, y = flow.tensor(idx[rows]), flow.tensor(tgt[rows])
        if config == "dp":
            net = flow.nn.parallel.DistributedDataParallel(model)
            opt = AdamW(model.parameters(), **LR)
        elif config == "zero1":
            net = flow.nn.parallel.DistributedDataParallel(model)
            opt = ZeroRedundancyOptimizer(net.parameters(), AdamW, stage=1, **LR)
        else:  # stages 2 and 3 reduce-scatter the gradients themselves
            net = model
            opt = ZeroRedundancyOptimizer(model.parameters(), AdamW, stage=int(config[-1]), module=model, **LR)

        def step():
            opt.zero_grad()
            loss = model.loss(net(x), y)
            loss.backward()
            opt.step()
            return float(loss.detach().numpy()), 1.0  # this slice's mean; the slices are equal

        return step, lambda: memory_report(model, opt)

    if config in ("tp", "dp2xtp2"):
        from flow_dist.handler import implicit_broadcast
        from flow_dist.parallel import tensor_parallel

        B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
        if config == "tp":
            mesh, whole, data = flow.placement("cpu", list(range(world))), B, B
        else:
            mesh, whole, data = flow.placement("cpu", ranks=[[0, 1], [2, 3]]), (B, B), (S0, B)
        tensor_parallel(model, mesh, "gpt")
        opt = AdamW(model.parameters(), **LR)  # after tensor_parallel: it sees the split weights
        x = flow.tensor(idx).to_global(mesh, whole).to_global(sbp=data)
        y = flow.tensor(tgt).to_global(mesh, whole).to_global(sbp=data)

        def step():
            opt.zero_grad()
            with implicit_broadcast():  # the GPT's positions are a local arange, alike on every rank
                loss = model.loss(model(x), y)
            loss.backward()
            opt.step()
            value = float(loss.detach().numpy())  # the logical loss: every rank calls numpy()
            return value, 1.0 if rank == 0 else 0.0  # the same on every rank: count it once

        return step, lambda: _local_memory(model, opt)

    if config in ("pp", "dp2xpp2"):
        from flow_dist import pipeline as pp

        mesh = pp.pipeline_mesh(num_stages=2)
        module = pp.gpt_stages(model, 2, mesh.stage_index)
        stage = pp.PipelineStage(module, mesh.stage_index, 2, group_ranks=mesh.group_ranks, dp_ranks=mesh.dp_ranks)
        schedule = pp.Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=model.loss)
        opt = AdamW(module.parameters(), **LR)
        rows = _rows(rank // 2, world // 2)  # pipeline_mesh: rank r is stage r % 2 of replica r // 2
        x, y = flow.tensor(idx[rows]), flow.tensor(tgt[rows])

        def step():
            opt.zero_grad()
            if stage.is_first:
                schedule.step(x)
                out = (0.0, 0.0)
            else:
                losses: list = []
                schedule.step(target=y, losses=losses)
                out = (sum(float(v.detach().numpy()) for v in losses) / len(losses), 1.0)
            opt.step()
            return out

        return step, lambda: memory_report(module, opt)
    raise ValueError(f"unknown strategy {config!r} (expected one of {sorted(set(sum(CONFIGS.values(), ())))})")


def worker(config: str, warmup: int, steps: int) -> None:
    import numpy as np

    flow = C.setup("flow", 1)
    from flow_dist.comm.backend import get_backend

    flow.set_default_dtype(flow.float32)
    rank, world = flow.env.get_rank(), flow.env.get_world_size()
    comm = get_backend("cpu", None)
    step, memory = _build(flow, config, rank, world)
    times, losses = [], []
    for i in range(warmup + steps):
        comm.barrier()
        s = time.perf_counter()
        part = step()
        comm.barrier()  # the step ends when its slowest rank (a pipeline's last stage) is done
        if i >= warmup:
            times.append(time.perf_counter() - s)
        # the global batch's mean loss: the weighted mean of the ranks' parts
        got = np.array(comm.all_gather(np.array(part, dtype=np.float64))).reshape(world, 2)
        losses.append(float((got[:, 0] * got[:, 1]).sum() / got[:, 1].sum()))
    mem = memory()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    per_rank = np.array(comm.all_gather(np.array([mem["total"], rss], dtype=np.float64))).reshape(world, 2)
    if rank == 0:
        out = {
            "times": times,
            "losses": losses,
            "state_bytes": per_rank[:, 0].tolist(),
            "rss_bytes": per_rank[:, 1].tolist(),
            "memory_rank0": mem,
        }
        print("RESULT " + json.dumps(out), flush=True)


# -- the prediction ------------------------------------------------------------------------------
def strategy(config: str, world: int):
    """The simulator's Strategy for one of CONFIGS."""
    from flow_dist.plan import Strategy

    # one core per rank or less: nothing runs behind backward, so the DP all-reduce is not overlapped
    if config == "dp":
        return Strategy(dp=world, overlap=False)
    if config.startswith("zero"):
        return Strategy(dp=world, zero_stage=int(config[-1]), overlap=False)
    if config == "tp":
        return Strategy(tp=world)
    if config == "dp2xtp2":
        return Strategy(dp=2, tp=2, overlap=False)
    if config == "pp":
        return Strategy(pp=2, micro_batches=MICRO_BATCHES)
    return Strategy(dp=2, pp=2, micro_batches=MICRO_BATCHES, overlap=False)  # dp2xpp2


def predictions() -> dict | None:
    """Predicted step seconds per (config, world), or None where the calibration cannot run."""
    env = dict(os.environ, **{v: "1" for v in C.THREAD_VARS})
    p = subprocess.run(
        [sys.executable, os.path.join(HERE, "plan_validate.py"), "--profile"], capture_output=True, text=True, env=env
    )
    if p.returncode:
        print(f"no prediction: the CPU calibration failed:\n{p.stderr[-2000:]}", file=sys.stderr)
        return None
    import dataclasses

    import flow
    from flow_dist.plan import Cluster, DeviceProfile, gpt_workload, simulate
    from flow_models.nlp.gpt import GPTConfig

    dev = DeviceProfile.from_dict(json.loads(p.stdout.strip().splitlines()[-1]))
    ab = ALPHA_BETA if os.path.isfile(ALPHA_BETA) else None
    flow.set_default_dtype(flow.float32)
    work = gpt_workload(GPTConfig(**CFG), trace_layers=CFG["n_layer"], name="gpt-bench")
    work = dataclasses.replace(work, mode="eager")  # every strategy here runs eagerly
    out = {}
    for world, configs in CONFIGS.items():
        for config in configs:
            out[(config, world)] = simulate(work, Cluster.local(world, ab, dev), strategy(config, world), BATCH)
    return {"reports": out, "alpha_beta": ab, "gflops": dev.flops / 1e9}


# -- the side-by-side run ----------------------------------------------------------------------
def run_job(config: str, world: int, warmup: int, steps: int) -> dict:
    env = dict(os.environ, **{v: "1" for v in C.THREAD_VARS})
    cmd = [_mpiexec(), "-n", str(world), sys.executable, "-m", "mpi4py", os.path.abspath(__file__)]
    cmd += ["--worker", config, "--warmup", str(warmup), "--steps", str(steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"{config} x{world} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    line = [x for x in p.stdout.splitlines() if "RESULT " in x][-1]
    return json.loads(line.split("RESULT ", 1)[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", metavar="STRATEGY")
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", default="2,4", help="world sizes, comma separated")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-predict", action="store_true", help="skip the simulator's column")
    ap.add_argument("--json", default=None, help="write the report here too")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.warmup, a.steps)
        return
    rounds = 1 if a.quick else a.rounds
    warmup, steps = QUICK if a.quick else STEPS
    worlds = [int(w) for w in a.ranks.split(",")]
    report: dict = {"machine": C.machine_info(), "load_before": os.getloadavg(), "rounds": rounds, "steps": steps}
    jobs = [(c, w) for w in worlds for c in CONFIGS[w]]
    per: dict = {}
    for r in range(rounds):
        for config, world in jobs if r % 2 == 0 else jobs[::-1]:
            res = run_job(config, world, warmup, steps)
            d = per.setdefault((config, world), {"medians": []})
            d["medians"].append(C.median(res["times"]))
            d.update(losses=res["losses"], state=res["state_bytes"], rss=res["rss_bytes"], mem0=res["memory_rank0"])
            print(f"  {config} x{world} round {r + 1}: median step {d['medians'][-1] * 1e3:.0f} ms", file=sys.stderr)
    report["load_after"] = os.getloadavg()
    pred = None
    if not a.no_predict:
        try:
            pred = predictions()
        except Exception as e:  # the measurements stand without the model's column
            print(f"no prediction: {type(e).__name__}: {e}", file=sys.stderr)
    rows = []
    for config, world in jobs:
        d, base = per[(config, world)], per[("dp", world)]
        med, base_med = C.median(d["medians"]), C.median(base["medians"])
        row = {
            "strategy": config,
            "ranks": world,
            "step_ms": med * 1e3,
            "step_ms_range": [min(d["medians"]) * 1e3, max(d["medians"]) * 1e3],
            "samples_per_s": BATCH / med,
            "throughput_vs_dp": base_med / med,
            "state_bytes_max": max(d["state"]),
            "state_vs_dp": max(d["state"]) / max(base["state"]),
            "rss_mib_max": max(d["rss"]) / 2**20,
            "rss_vs_dp": max(d["rss"]) / max(base["rss"]),
            "memory_rank0": d["mem0"],
            "final_loss": d["losses"][-1],
            "loss_diff_vs_dp": max(abs(u - v) for u, v in zip(d["losses"], base["losses"])),
        }
        if pred is not None:
            rep = pred["reports"][(config, world)]
            row["predicted_ms"] = rep.step_time * 1e3
            row["predicted_state_bytes"] = sum(rep.memory[k] for k in ("parameters", "gradients", "optimizer"))
        rows.append(row)
    report["results"] = rows
    if pred is not None:
        report["predict"] = {"alpha_beta": pred["alpha_beta"], "gflops": pred["gflops"]}
    print_table(report)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


def print_table(report: dict) -> None:
    m = report["machine"]
    print(
        f"machine: {m['cpu']}, {m['cores']} cores; 1 BLAS thread per rank; {report['rounds']} rounds of "
        f"{report['steps']} timed steps; load {report['load_before'][0]:.2f} before, "
        f"{report['load_after'][0]:.2f} after"
    )
    print(f"GPT {CFG}, global batch {BATCH}, float32, AdamW; ratios are to dp at the same ranks")
    print(
        "| strategy | ranks | step ms (range) | samples/s | throughput / dp | state MB / rank | state / dp "
        "| peak RSS MiB | RSS / dp | final loss | max loss diff vs dp | predicted ms | pred / measured |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in report["results"]:
        lo, hi = r["step_ms_range"]
        pm = r.get("predicted_ms")
        pred = f"{pm:.0f} | {pm / r['step_ms']:.2f}" if pm is not None else "- | -"
        print(
            f"| {r['strategy']} | {r['ranks']} | {r['step_ms']:.0f} ({lo:.0f}-{hi:.0f}) | {r['samples_per_s']:.1f} "
            f"| {r['throughput_vs_dp']:.2f} | {r['state_bytes_max'] / 1e6:.2f} | {r['state_vs_dp']:.2f} "
            f"| {r['rss_mib_max']:.0f} | {r['rss_vs_dp']:.2f} | {r['final_loss']:.6f} | {r['loss_diff_vs_dp']:.1e} "
            f"| {pred} |"
        )


if __name__ == "__main__":
    main()
