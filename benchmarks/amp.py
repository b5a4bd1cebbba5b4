"""Mixed precision on the CPU: fp32 against bf16 AMP training steps, flow next to PyTorch, in one run.

    python benchmarks/amp.py                          # the tables (10-15 minutes on 2 loaded cores)
    python benchmarks/amp.py --quick                  # a smoke run (about two minutes; noisy)
    python benchmarks/amp.py --threads 2 --timer wall # wall time at 2 threads instead of 1 thread's CPU time
    python benchmarks/amp.py --json out.json          # also write the figures as JSON
    python benchmarks/amp.py --worker flow-amp gpt --profile amp.prof   # one mode in this process, cProfile'd

Modes, on the models, batches, optimizers and hyper-parameters of models.py (its builders and
graph.py's graph step are imported, not copied):

- ``flow-f32``: the flow.nn.Graph training step of graph.py (forward, loss, backward, optimizer);
- ``flow-amp``: the same graph with ``config.enable_amp(True, dtype=flow.bfloat16)`` (flow-amp's
  ``amp`` graph pass: bf16 compute, fp32 loss, fp32 master weights and optimizer);
- ``torch-f32``: PyTorch eager;
- ``torch-amp``: PyTorch eager with ``torch.autocast("cpu", dtype=torch.bfloat16)`` around forward
  and loss (PyTorch's own recipe; backward and ``step()`` outside it);
- ``flow-eager-f32`` / ``flow-eager-amp``: flow eager, without / with ``flow.autocast`` around
  forward and loss.

Method (that of models.py and graph.py). Each (mode, model) runs in a fresh subprocess which makes
the batch, records its RSS, builds the model, runs ``warmup`` untimed and ``steps`` timed training
steps; modes alternate in rotating order ``repeats`` times per model, and the 1-minute load
average is taken before each worker. Step time is the process's CPU time at 1 thread by default
(the machine is shared; one thread's CPU time does not count waiting), wall time with ``--timer
wall``; figures are the median and the range (min-max) of all timed steps of all repeats.
Every mode runs the same number of steps per model (``STEPS``).

Memory, per worker:

- **saved activations** (bytes kept from forward for backward in one step, each buffer once,
  views counted in their base, parameters and inputs not counted; saved_activations.py defines
  it): flow's graph from the compiled IR, PyTorch from ``saved_tensors_hooks`` around forward and
  loss of the first step. flow eager has no saved-tensor hooks: not measured there.
- **planned peak** (flow's graph): the compiled step's planned peak of intermediate values,
  ``memory_report(plan)["peak_bytes"]``.
- **RSS peak** (all modes): the RSS high-water mark minus the RSS before the model was built.

The final-loss column is the loss at the last step every mode of the model ran (the same seed in
every worker of a framework, so flow-amp tracks flow-f32 and torch-amp torch-f32 step by step).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

import _common as C
import graph as G
import models as M
import saved_activations as S

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("flow-f32", "flow-amp", "flow-eager-f32", "flow-eager-amp", "torch-f32", "torch-amp")
GRAPH_MODES = ("flow-f32", "flow-amp")
MODELS = ("gpt", "resnet18", "mlp")
DEFAULT_MODELS = ("gpt", "resnet18")
THREADS = 1
STEPS = {"gpt": (2, 8), "resnet18": (1, 4), "mlp": (3, 20)}  # (warmup, timed)
QUICK_STEPS = {"gpt": (1, 2), "resnet18": (1, 1), "mlp": (1, 3)}
TARGETS = (
    "flow amp/f32 saved activations and peak memory <= 0.65 (35% lower); "
    "flow amp/f32 step time <= 1.1; torch-amp/flow-amp step time >= 1.0"
)


# -- workloads -------------------------------------------------------------------------------------
def _amp_context(fw, amp: bool):
    """A factory of the context around forward and loss: autocast to bf16 (torch's or flow's), or nothing."""
    if not amp:
        return contextlib.nullcontext
    return lambda: fw.autocast("cpu", dtype=fw.bfloat16)


def make_eager_workload(fw, model: str, batch: dict, amp: bool):
    """``(module, inputs, step)``: models.py's model and optimizer for ``model``; ``step(hooks)`` runs
    one training step with autocast around forward and loss when ``amp``, ``hooks`` (a context
    manager, or None) around them too, and returns the loss."""
    if model not in STEPS:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    m, opt, _ = M.make_workload(fw, model, batch)  # the model, the optimizer and its hyper-parameters
    F = fw.nn.functional
    t = fw.from_numpy
    if model == "gpt":
        inputs, target = (t(batch["idx"]), t(batch["pos"])), t(batch["y"])

        def loss_fn(logits, y):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
    else:
        inputs, target, loss_fn = (t(batch["x"]),), t(batch["y"]), F.cross_entropy
    autocast = _amp_context(fw, amp)

    def step(hooks=None):
        opt.zero_grad()
        with hooks if hooks is not None else contextlib.nullcontext(), autocast():
            loss = loss_fn(m(*inputs), target)
        loss.backward()
        opt.step()
        return loss.item()

    return m, (*inputs, target), step


# -- one (mode, model) in this process -------------------------------------------------------------
def _run_steps(step, warmup: int, steps: int, clock, first=None) -> tuple[list, list]:
    losses, times = [], []
    for i in range(warmup + steps):
        t0 = clock()
        losses.append(first() if i == 0 and first is not None else step())
        if i >= warmup:
            times.append(clock() - t0)
    return times, losses


def worker(mode: str, model: str, warmup: int, steps: int, timer: str, threads: int, profile: str | None = None):
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if warmup < 1:
        raise ValueError("warmup must be >= 1 (the first step compiles the graph or measures saved tensors)")
    framework = "torch" if mode.startswith("torch") else "flow"
    amp = mode.endswith("-amp")
    fw = C.setup(framework, threads)
    fw.manual_seed(0)
    batch = M.make_batch(model)
    base_rss = C.current_rss()
    clock = C.TIMERS[timer]
    res: dict = {"mode": mode, "model": model, "version": getattr(fw, "__version__", "?")}
    first = None
    if mode in GRAPH_MODES:
        g, step = G.make_graph_workload(fw, model, batch)
        if amp:
            g.config.enable_amp(True, dtype=fw.bfloat16)
    else:
        m, inputs, eager_step = make_eager_workload(fw, model, batch, amp)
        step = eager_step
        if framework == "torch":
            probe = S.TorchSavedTensors(fw, [*m.parameters(), *m.buffers(), *inputs])

            def first():
                loss = eager_step(probe)
                res["saved"] = probe.report()
                return loss

    if profile:
        import cProfile

        _run_steps(step, warmup, 0, clock, first)
        prof = cProfile.Profile()
        prof.enable()
        times, losses = _run_steps(step, 0, steps, clock)
        prof.disable()
        prof.dump_stats(profile)
    else:
        t0 = clock()
        first_loss = first() if first is not None else step()
        res["first_s"] = clock() - t0
        times, losses = _run_steps(step, warmup - 1, steps, clock)
        losses.insert(0, first_loss)
    res.update(times=times, losses=losses, peak_rss_bytes=C.peak_rss() - base_rss, baseline_rss=base_rss)
    if mode in GRAPH_MODES:
        from flow.graph.passes.memory import memory_report

        ir = g._latest.ir
        res["saved"] = S.graph_saved_bytes(ir)
        res["planned_peak_bytes"] = memory_report(g._latest.plan)["peak_bytes"]
        res["amp_pass"] = ir.meta.get("amp")
        res["compile_s"] = g.compile_time
    return res


def steps_for(mode: str, model: str, quick: bool, warmup: int | None, steps: int | None) -> tuple[int, int]:
    table = QUICK_STEPS if quick else STEPS
    w, s = table[model]
    return (w if warmup is None else warmup), (s if steps is None else steps)


def run_worker(mode: str, model: str, warmup: int, steps: int, timer: str, threads: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, model]
    cmd += ["--warmup", str(warmup), "--steps", str(steps), "--timer", timer, "--threads", str(threads)]
    env = dict(os.environ)
    for var in C.THREAD_VARS:  # the thread pools read these when they start
        env[var] = str(threads)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} {model} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the side-by-side run ----------------------------------------------------------------------------
def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=HERE).stdout
    except OSError:
        return ""


def tree_state() -> str:
    """The commit measured, the changed files under packages/ and a digest of their changes: other
    work lands in the tree while a run goes on, and each worker imports the tree as it is then."""
    import hashlib

    head = _git("rev-parse", "--short", "HEAD").strip() or "unknown"
    changed = [line for line in _git("status", "--porcelain", "--", "../packages").splitlines() if line.strip()]
    if not changed:
        return head
    digest = hashlib.sha1(_git("diff", "HEAD", "--", "../packages").encode()).hexdigest()[:8]
    return f"{head} + {len(changed)} changed files under packages/ (diff {digest})"


def _summary(per: dict) -> dict:
    times = per["times"]
    row = {
        "step_ms": C.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "timed_steps": len(times),
        "peak_rss_mib": C.mib(C.median(per["rss"])),
        "losses": per["losses"],
    }
    if per["saved"] is not None:
        row["saved"] = per["saved"]
        row["saved_mib"] = C.mib(per["saved"]["total"])
    if per["planned"]:
        row["planned_peak_mib"] = C.mib(C.median(per["planned"]))
    if per["compile"]:
        row["compile_s"] = C.median(per["compile"])
    if per["amp_pass"]:
        row["amp_pass"] = per["amp_pass"]
    return row


def _ratio(row: dict, a: str, b: str, key: str):
    if a in row and b in row and key in row[a] and key in row[b] and row[b][key]:
        return row[a][key] / row[b][key]
    return None


def _ratios(row: dict) -> dict:
    r = {
        "flow saved amp/f32": _ratio(row, "flow-amp", "flow-f32", "saved_mib"),
        "flow planned peak amp/f32": _ratio(row, "flow-amp", "flow-f32", "planned_peak_mib"),
        "flow RSS peak amp/f32": _ratio(row, "flow-amp", "flow-f32", "peak_rss_mib"),
        "flow time amp/f32": _ratio(row, "flow-amp", "flow-f32", "step_ms"),
        "torch-amp time / flow-amp time": _ratio(row, "torch-amp", "flow-amp", "step_ms"),
        "saved flow-amp/torch-amp": _ratio(row, "flow-amp", "torch-amp", "saved_mib"),
        "torch saved amp/f32": _ratio(row, "torch-amp", "torch-f32", "saved_mib"),
        "torch RSS peak amp/f32": _ratio(row, "torch-amp", "torch-f32", "peak_rss_mib"),
        "torch time amp/f32": _ratio(row, "torch-amp", "torch-f32", "step_ms"),
        "flow eager time amp/f32": _ratio(row, "flow-eager-amp", "flow-eager-f32", "step_ms"),
        "flow eager RSS peak amp/f32": _ratio(row, "flow-eager-amp", "flow-eager-f32", "peak_rss_mib"),
    }
    return {k: v for k, v in r.items() if v is not None}


def _record(p: dict, res: dict) -> None:
    p["times"] += res["times"]
    p["rss"].append(res["peak_rss_bytes"])
    p["losses"] = res["losses"]
    p["saved"] = res.get("saved", p["saved"])  # the same in every repeat (one trace, one seed)
    p["amp_pass"] = res.get("amp_pass")
    if "planned_peak_bytes" in res:
        p["planned"].append(res["planned_peak_bytes"])
        p["compile"].append(res["compile_s"])


def _model_row(model: str, modes, per: dict, per_steps: dict, repeats: int) -> dict:
    row = {"model": model, "batch": M.BATCH[model], "repeats": repeats, "steps": per_steps}
    ran = [md for md in modes if per[md]["times"]]
    for md in modes:
        row[md] = _summary(per[md]) if md in ran else {"error": per[md]["error"]}
    if ran:
        common = min(len(per[md]["losses"]) for md in ran)
        row["loss_step"] = common
        for md in ran:
            row[md]["loss"] = per[md]["losses"][common - 1]
    row["ratios"] = _ratios(row)
    return row


def run(models, modes, repeats: int, quick: bool, warmup, steps, timer: str, threads: int, log=sys.stderr) -> dict:
    results, versions, loads, trees = [], {}, [], []
    for model in models:
        keys = ("times", "rss", "planned", "compile")
        per = {md: {**{k: [] for k in keys}, "saved": None, "losses": None, "error": None} for md in modes}
        per_steps = {md: steps_for(md, model, quick, warmup, steps) for md in modes}
        for r in range(repeats):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            for md in order:
                if per[md]["error"]:
                    continue  # a mode that failed once fails again: no point in repeating it
                load = os.getloadavg()[0]
                loads.append(load)
                tree = tree_state()
                if tree not in trees:
                    trees.append(tree)
                try:
                    res = run_worker(md, model, *per_steps[md], timer, threads)
                except RuntimeError as e:
                    per[md]["error"] = str(e).strip().splitlines()[-1]
                    print(f"  {model:<9} {md:<15} FAILED: {per[md]['error']}", file=log, flush=True)
                    continue
                _record(per[md], res)
                versions["torch" if md.startswith("torch") else "flow"] = res["version"]
                saved = f", saved {C.mib(res['saved']['total']):7.1f} MiB" if "saved" in res else ""
                print(
                    f"  {model:<9} {md:<15} run {r + 1}/{repeats} (load {load:.2f}): median step "
                    f"{C.median(res['times']) * 1e3:9.1f} ms, RSS peak {C.mib(res['peak_rss_bytes']):7.1f} MiB"
                    f"{saved}, loss {res['losses'][-1]:.4f}",
                    file=log,
                    flush=True,
                )
        results.append(_model_row(model, modes, per, per_steps, repeats))
    machine = C.machine_info()
    machine.update(
        threads=threads,
        timer=timer,
        versions=versions,
        trees=trees,  # the tree before each worker: more than one means it changed during the run
        date=time.strftime("%Y-%m-%d %H:%M"),
        loads=loads,
        load_min=min(loads),
        load_median=C.median(loads),
        load_max=max(loads),
    )
    return {"machine": machine, "results": results}


# -- the tables ------------------------------------------------------------------------------------
def _fmt(v, spec: str, width: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}{spec}}"


def targets(report: dict) -> list[str]:
    """One line per target of the issue and model: the figure and whether it holds."""
    lines = []
    for row in report["results"]:
        r, name = row["ratios"], row["model"]
        checks = (
            ("saved activations amp/f32 <= 0.65", r.get("flow saved amp/f32"), lambda x: x <= 0.65),
            ("planned peak amp/f32 <= 0.65", r.get("flow planned peak amp/f32"), lambda x: x <= 0.65),
            ("RSS peak amp/f32 <= 0.65", r.get("flow RSS peak amp/f32"), lambda x: x <= 0.65),
            ("step time amp/f32 <= 1.1", r.get("flow time amp/f32"), lambda x: x <= 1.1),
            ("torch-amp / flow-amp step time >= 1.0", r.get("torch-amp time / flow-amp time"), lambda x: x >= 1.0),
        )
        for what, v, ok in checks:
            if v is not None:
                lines.append(f"{name}: {what}: {v:.3f} -> {'holds' if ok(v) else 'does not hold'}")
    return lines


def print_table(report: dict, out=sys.stdout) -> None:
    m = report["machine"]
    v = m.get("versions", {})
    print(
        f"{m['date']}; {m['cpu']}, {m['cores']} cores; Python {m['python']}, NumPy {m['numpy']}, "
        f"torch {v.get('torch', '-')}, flow {v.get('flow', '-')}; {m['threads']} thread(s), "
        f"{m['timer']} time; 1-min load average before the workers: min {m['load_min']:.2f}, "
        f"median {m['load_median']:.2f}, max {m['load_max']:.2f}",
        file=out,
    )
    trees = m["trees"]
    note = " (it changed during the run: workers measured different code)" if len(trees) > 1 else ""
    print(f"tree: {' -> '.join(trees)}{note}", file=out)
    head = (
        f"{'model':<9}{'mode':<16}{'steps':>6}{'step ms':>10}{'(min-max)':>20}{'saved MiB':>11}"
        f"{'planned MiB':>13}{'RSS MiB':>9}{'loss':>9}"
    )
    print(head, file=out)
    for row in report["results"]:
        for md in MODES:
            s = row.get(md)
            if s is None:
                continue
            if "error" in s:
                print(f"{row['model']:<9}{md:<16}failed: {s['error']}", file=out)
                continue
            rng = f"({s['min_ms']:.1f}-{s['max_ms']:.1f})"
            print(
                f"{row['model']:<9}{md:<16}{s['timed_steps']:>6}{s['step_ms']:>10.1f}{rng:>20}"
                f"{_fmt(s.get('saved_mib'), '.1f', 11)}{_fmt(s.get('planned_peak_mib'), '.1f', 13)}"
                f"{s['peak_rss_mib']:>9.1f}{s['loss']:>9.4f}",
                file=out,
            )
        if "loss_step" in row:
            print(f"{'':<9}(loss at step {row['loss_step']}; steps: timed steps over all repeats)", file=out)
    print(file=out)
    keys = []
    for row in report["results"]:
        keys += [k for k in row["ratios"] if k not in keys]
    print(f"{'ratio':<34}" + "".join(f"{row['model']:>10}" for row in report["results"]), file=out)
    for k in keys:
        print(f"{k:<34}" + "".join(_fmt(row["ratios"].get(k), ".2f", 10) for row in report["results"]), file=out)
    print(file=out)
    for row in report["results"]:
        for md in MODES:
            s = row.get(md, {}).get("saved")
            if s:
                parts = ", ".join(f"{dt} {C.mib(b):.1f}" for dt, b in sorted(s["by_dtype"].items()))
                extra = f"; param copies {C.mib(s['param_copies']):.1f}" if "param_copies" in s else ""
                print(f"saved MiB by dtype, {row['model']} {md}: {parts}{extra} ({s['buffers']} buffers)", file=out)
    print(file=out)
    print(f"targets: {TARGETS}", file=out)
    for line in targets(report):
        print("  " + line, file=out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    p.add_argument("--steps", type=int, help="timed steps per process (default: per model and mode)")
    p.add_argument("--warmup", type=int, help="untimed steps per process, >= 1 (default: per model and mode)")
    p.add_argument("--repeats", type=int, default=3, help="processes per mode and model (rotating order)")
    p.add_argument("--quick", action="store_true", help="a short smoke run: fewer steps, one process each")
    p.add_argument("--timer", choices=sorted(C.TIMERS), default="cpu", help="cpu (default): CPU time; wall")
    p.add_argument("--threads", type=int, default=THREADS, help=f"threads of each framework (default {THREADS})")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument("--worker", nargs=2, metavar=("MODE", "MODEL"), help="internal: one mode and model, print JSON")
    p.add_argument("--profile", metavar="PATH", help="with --worker: cProfile the timed steps into PATH")
    args = p.parse_args(argv)
    if args.warmup is not None and args.warmup < 1:
        p.error("--warmup must be >= 1 (the first step compiles the graph or measures saved tensors)")
    models = [x.strip() for x in args.models.split(",") if x.strip()]
    for x in models:
        if x not in MODELS:
            p.error(f"unknown model {x!r}; choose from {', '.join(MODELS)}")
    modes = tuple(x.strip() for x in args.modes.split(",") if x.strip())
    for x in modes:
        if x not in MODES:
            p.error(f"unknown mode {x!r}; choose from {', '.join(MODES)}")
    if args.worker:
        mode, model = args.worker
        if model not in MODELS or mode not in MODES:
            p.error(f"--worker takes a mode of {', '.join(MODES)} and a model of {', '.join(MODELS)}")
        w, s = steps_for(mode, model, args.quick, args.warmup, args.steps)
        print(json.dumps(worker(mode, model, w, s, args.timer, args.threads, args.profile)))
        return 0
    repeats = 1 if args.quick and args.repeats == 3 else args.repeats
    report = run(models, modes, repeats, args.quick, args.warmup, args.steps, args.timer, args.threads)
    print_table(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
