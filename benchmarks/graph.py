"""Graph mode next to eager flow and eager PyTorch: training steps of the four models of models.py.

    python benchmarks/graph.py                     # the table (several minutes)
    python benchmarks/graph.py --quick             # a smoke run (numbers are noisy)
    python benchmarks/graph.py --models mlp,gpt --steps 10 --repeats 3
    python benchmarks/graph.py --json out.json     # also write the figures as JSON

Three modes per model, the model definitions, batches, optimizers and hyper-parameters being those
of models.py (its builders are imported, not copied):

- ``graph``: a ``flow.nn.Graph`` whose ``build`` runs forward, loss and backward, with the
  optimizer added by ``add_optimizer`` (the update is part of the compiled step); a step is one
  call of the graph plus ``loss.item()``;
- ``eager``: flow eager, exactly models.py's worker;
- ``torch``: PyTorch eager (``torch.set_num_threads(2)``), exactly models.py's worker.

Method (that of models.py). Each (mode, model) runs in a fresh subprocess which records its RSS
after making the batch, builds the model, runs ``warmup`` untimed steps and ``steps`` timed ones;
the modes alternate (rotating order) ``repeats`` times per model so that drifts in machine load hit
all three. Throughput is the batch size over the median of all timed steps of a mode; peak memory
is the worker's RSS high-water mark minus its baseline (median over its processes). The graph's
compile time is its first call (trace, passes, lowering and one run) minus its median steady
step. The 1-minute load average is recorded before every worker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import _common as C
import models as M

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("graph", "eager", "torch")
TARGETS = "graph/eager >= 1.2, graph/torch >= 1.0, peak graph/torch <= 0.8, GPT compile < 2 s"


def make_graph_workload(flow, model: str, batch: dict):
    """``(graph, step)``: models.py's model and optimizer for ``model``, trained by a flow.nn.Graph."""
    nn, F = flow.nn, flow.nn.functional
    t = flow.from_numpy
    if model == "mlp":
        m = M.make_mlp(nn, F)
        opt = flow.optim.SGD(m.parameters(), lr=0.01)
        inputs, target, loss_fn = (t(batch["x"]),), t(batch["y"]), F.cross_entropy
    elif model == "gpt":
        m = M.make_gpt(nn, F)
        opt = flow.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1)
        inputs, target = (t(batch["idx"]), t(batch["pos"])), t(batch["y"])

        def loss_fn(logits, y):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
    elif model == "resnet18":
        m = M.make_resnet18(nn, F)
        opt = flow.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        inputs, target, loss_fn = (t(batch["x"]),), t(batch["y"]), F.cross_entropy
    elif model == "dlrm":
        m = M.make_dlrm(nn, F, flow)
        opt = flow.optim.SGD(m.parameters(), lr=0.01)
        inputs = (t(batch["dense"]), [t(i) for i in batch["indices"]], t(batch["offsets"]))
        target, loss_fn = t(batch["y"]), F.binary_cross_entropy_with_logits
    else:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(M.MODELS)}")
    m.train()

    class TrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = m
            self.add_optimizer(opt)

        def build(self, inputs, target):
            loss = loss_fn(self.model(*inputs), target)
            loss.backward()
            return loss

    g = TrainGraph()

    def step():
        return g(inputs, target).item()

    return g, step


def graph_worker(model: str, warmup: int, steps: int, timer: str) -> dict:
    flow = C.setup("flow")
    flow.manual_seed(0)
    batch = M.make_batch(model)
    base_rss, base_peak = C.current_rss(), C.peak_rss()
    g, step = make_graph_workload(flow, model, batch)
    clock = C.TIMERS[timer]
    t0 = clock()
    step()  # traces and compiles, then runs the step once
    first = clock() - t0
    times = C.time_steps(step, steps, max(warmup - 1, 0), timer)
    loss = step()
    peak = C.peak_rss()
    return {
        "framework": "graph",
        "model": model,
        "times": times,
        "first_s": first,
        "compile_s": first - C.median(times),
        "reported_compile_s": getattr(g, "compile_time", None),
        "compiles": getattr(g, "compiles", None),
        "peak_bytes": peak - base_rss,
        "baseline_rss": base_rss,
        "baseline_peak": base_peak,
        "loss": loss,
        "version": getattr(flow, "__version__", "?"),
    }


def run_worker(mode: str, model: str, warmup: int, steps: int, timer: str) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        mode,
        model,
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
        "--timer",
        timer,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} {model} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(
    models, repeats: int, steps: int | None, warmup: int | None, quick: bool, timer: str, modes=MODES, log=sys.stderr
) -> dict:
    results, versions, loads = [], {}, []
    for model in models:
        w, s = (M.QUICK_STEPS if quick else M.DEFAULT_STEPS)[model]
        w = w if warmup is None else warmup
        s = s if steps is None else steps
        per = {md: {"times": [], "peaks": [], "compile": [], "loss": None} for md in modes}
        for r in range(repeats):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            for md in order:
                load = os.getloadavg()[0]
                loads.append(load)
                res = run_worker(md, model, w, s, timer)
                per[md]["times"] += res["times"]
                per[md]["peaks"].append(res["peak_bytes"])
                per[md]["loss"] = res["loss"]
                if "compile_s" in res:
                    per[md]["compile"].append(res["compile_s"])
                versions["torch" if md == "torch" else "flow"] = res["version"]
                extra = f", compile {res['compile_s']:.2f} s" if "compile_s" in res else ""
                print(
                    f"  {model:<9} {md:<6} run {r + 1}/{repeats} (load {load:.2f}): median step "
                    f"{C.median(res['times']) * 1e3:8.1f} ms, peak {C.mib(res['peak_bytes']):8.1f} MiB{extra}",
                    file=log,
                    flush=True,
                )
        row = {"model": model, "batch": M.BATCH[model], "warmup": w, "steps": s, "repeats": repeats}
        for md in modes:
            med = C.median(per[md]["times"])
            row[md] = {
                "step_ms": med * 1e3,
                "samples_per_s": M.BATCH[model] / med,
                "peak_mib": C.mib(C.median(per[md]["peaks"])),
                "final_loss": per[md]["loss"],
            }
            if per[md]["compile"]:
                row[md]["compile_s"] = C.median(per[md]["compile"])
        if "graph" in row:
            for other in ("eager", "torch"):
                if other in row:
                    row[f"graph/{other}"] = row["graph"]["samples_per_s"] / row[other]["samples_per_s"]
            if "torch" in row:
                row["mem graph/torch"] = row["graph"]["peak_mib"] / max(row["torch"]["peak_mib"], 1e-9)
        results.append(row)
    machine = C.machine_info()
    machine.update(
        timer=timer,
        versions=versions,
        date=time.strftime("%Y-%m-%d %H:%M"),
        load_min=min(loads),
        load_median=C.median(loads),
        load_max=max(loads),
        loadavg_end=os.getloadavg(),
    )
    return {"machine": machine, "results": results}


def _cell(row, *keys, width, fmt):
    v = row
    for k in keys:
        if not isinstance(v, dict) or k not in v:
            return f"{'-':>{width}}"
        v = v[k]
    return f"{v:>{width}{fmt}}"


def print_table(report: dict, out=sys.stdout) -> None:
    m = report["machine"]
    v = m.get("versions", {})
    print(
        f"{m['date']}; machine: {m['cpu']}, {m['cores']} cores, {m['threads']} threads each; Python {m['python']}, "
        f"NumPy {m['numpy']} ({m['blas']}), torch {v.get('torch', '-')}, flow {v.get('flow', '-')}; "
        f"{m['timer']} time; 1-min load average before the workers: min {m['load_min']:.2f}, "
        f"median {m['load_median']:.2f}, max {m['load_max']:.2f}",
        file=out,
    )
    head = (
        f"{'model':<10}{'batch':>6}{'graph s/s':>11}{'eager s/s':>11}{'torch s/s':>11}{'g/eager':>9}"
        f"{'g/torch':>9}{'graph MiB':>11}{'eager MiB':>11}{'torch MiB':>11}{'mem g/t':>9}{'compile s':>11}"
    )
    print(head, file=out)
    for r in report["results"]:
        print(
            "".join(
                [
                    f"{r['model']:<10}{r['batch']:>6}",
                    _cell(r, "graph", "samples_per_s", width=11, fmt=".1f"),
                    _cell(r, "eager", "samples_per_s", width=11, fmt=".1f"),
                    _cell(r, "torch", "samples_per_s", width=11, fmt=".1f"),
                    _cell(r, "graph/eager", width=9, fmt=".2f"),
                    _cell(r, "graph/torch", width=9, fmt=".2f"),
                    _cell(r, "graph", "peak_mib", width=11, fmt=".1f"),
                    _cell(r, "eager", "peak_mib", width=11, fmt=".1f"),
                    _cell(r, "torch", "peak_mib", width=11, fmt=".1f"),
                    _cell(r, "mem graph/torch", width=9, fmt=".2f"),
                    _cell(r, "graph", "compile_s", width=11, fmt=".2f"),
                ]
            ),
            file=out,
        )
    print(
        f"(s/s: samples/s, batch over the median step of alternating fresh processes; MiB: RSS high-water mark "
        f"minus the RSS before the model was built; compile: first graph call minus a steady step; "
        f"targets: {TARGETS})",
        file=out,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(M.MODELS), help=f"comma-separated, from {', '.join(M.MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: graph, eager, torch")
    p.add_argument("--steps", type=int, help="timed steps per process (default: per model, as models.py)")
    p.add_argument("--warmup", type=int, help="untimed steps per process (default: per model; graph: incl. compile)")
    p.add_argument("--repeats", type=int, default=2, help="processes per mode and model (alternating)")
    p.add_argument("--quick", action="store_true", help="a short smoke run: fewer steps, one process each")
    p.add_argument("--timer", choices=sorted(C.TIMERS), default="wall")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument("--worker", nargs=2, metavar=("MODE", "MODEL"), help="internal: one mode and model, print JSON")
    args = p.parse_args(argv)
    if args.worker:
        mode, model = args.worker
        w, s = M.DEFAULT_STEPS[model]
        w = w if args.warmup is None else args.warmup
        s = s if args.steps is None else args.steps
        if mode == "graph":
            res = graph_worker(model, w, s, args.timer)
        else:
            res = M.worker({"eager": "flow", "torch": "torch"}[mode], model, w, s, args.timer)
            res["framework"] = mode
        print(json.dumps(res))
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in M.BATCH:
            p.error(f"unknown model {m!r}; choose from {', '.join(M.MODELS)}")
    modes = tuple(md.strip() for md in args.modes.split(",") if md.strip())
    for md in modes:
        if md not in MODES:
            p.error(f"unknown mode {md!r}; choose from {', '.join(MODES)}")
    repeats = 1 if args.quick and args.repeats == 2 else args.repeats
    report = run(models, repeats, args.steps, args.warmup, args.quick, args.timer, modes)
    print_table(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
