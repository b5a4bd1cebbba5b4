"""Mixed precision on the CPU: fp32 against bf16 AMP training steps, flow next to PyTorch, in one run.

    python benchmarks/amp.py                          # the tables (10-15 minutes on 2 loaded cores)
    python benchmarks/amp.py --quick                  # a smoke run (about two minutes; noisy)
    python benchmarks/amp.py --threads 1,2 --timer wall   # wall time at 1 and 2 threads instead of 1 thread's CPU time
    python benchmarks/amp.py --json out.json          # also write the figures as JSON
    python benchmarks/amp.py --profile flow-amp gpt amp.prof   # one mode in this process, cProfile'd

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

Method: harness.py's (a fresh process per mode, model, thread count and round, rounds alternating the
order, the load average before and after every round). The worker makes the batch, records its
RSS, builds the model, runs ``warmup`` untimed and ``steps`` timed training steps. Step time is the
process's CPU time at 1 thread by default (the machine is shared; one thread's CPU time does not
count waiting), wall time with ``--timer wall``; figures are the median of all timed steps of all
rounds and the range (min-max) of the per-process medians. Every mode runs the same number of
steps per model (``STEPS``).

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
import importlib
import statistics
import subprocess
import sys

import graph as G
import harness as H
import models as M
import saved_activations as S

HERE = H.HERE
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


# -- one (mode, model) in a process of its own, run by harness.py -----------------------------------
def setup_mode(mode: str, model: str):
    """harness setup: ``mode``'s training step of ``model``. The first call compiles the graph (graph
    modes) or counts PyTorch's saved tensors (torch modes); the report gives the saved bytes, the
    planned peak, the compile time and the loss of every step."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if model not in STEPS:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    framework = "torch" if mode.startswith("torch") else "flow"
    amp = mode.endswith("-amp")
    fw = importlib.import_module(framework)
    fw.manual_seed(0)
    batch = M.make_batch(model)
    H.mark_baseline()
    res: dict = {"losses": []}
    if mode in GRAPH_MODES:
        g, step = G.make_graph_workload(fw, model, batch)
        if amp:
            g.config.enable_amp(True, dtype=fw.bfloat16)

        def timed():
            res["losses"].append(step())

        def report() -> dict:
            from flow.graph.passes.memory import memory_report

            ir = g._latest.ir
            plan = memory_report(g._latest.plan)["peak_bytes"]
            return {
                **res,
                "saved": S.graph_saved_bytes(ir),
                "planned_peak_bytes": plan,
                "amp_pass": ir.meta.get("amp"),
                "compile_s": g.compile_time,
            }

        return timed, report
    m, inputs, eager_step = make_eager_workload(fw, model, batch, amp)
    probe = S.TorchSavedTensors(fw, [*m.parameters(), *m.buffers(), *inputs]) if framework == "torch" else None

    def timed():
        if probe is not None and not res["losses"]:  # the first step (a warm-up one) counts the saved tensors
            res["losses"].append(eager_step(probe))
            res["saved"] = probe.report()
        else:
            res["losses"].append(eager_step())

    return timed, lambda: dict(res)


def steps_for(model: str, quick: bool) -> tuple[int, int]:
    return (QUICK_STEPS if quick else STEPS)[model]


def cases(models, modes) -> list[H.Case]:
    out = []
    for model in models:
        for md in modes:
            fw = "torch" if md.startswith("torch") else "flow"
            variant = md.split("-", 1)[1]  # the case's name is then the mode, "flow amp" for flow-amp
            out.append(H.Case(fw, variant, "amp:setup_mode", {"mode": md, "model": model}, group=model))
    return out


def profile(mode: str, model: str, path: str, warmup: int, steps: int) -> None:
    """cProfile ``steps`` timed steps of one mode and model in this process, after ``warmup`` untimed ones."""
    import cProfile

    step, _ = setup_mode(mode, model)
    for _ in range(warmup):
        step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    prof.dump_stats(path)


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


def _summary(r: dict, timer: str) -> dict:
    """The figures of one mode from its harness row: step time by ``timer``, memory, what the workers reported."""
    t, last = r[timer], r["extra_last"]
    row = {
        "step_ms": t["median"] * 1e3,
        "min_ms": t["min"] * 1e3,  # the range of the per-process medians
        "max_ms": t["max"] * 1e3,
        "timed_steps": t["n"],
        "peak_rss_mib": r["peak_mib"]["median"],
        "losses": last["losses"],
    }
    if last.get("saved") is not None:  # the same in every process (one trace, one seed)
        row["saved"] = last["saved"]
        row["saved_mib"] = last["saved"]["total"] / (1 << 20)
    if "planned_peak_bytes" in r["extra"]:
        row["planned_peak_mib"] = r["extra"]["planned_peak_bytes"]["median"] / (1 << 20)
    if "compile_s" in r["extra"]:
        row["compile_s"] = r["extra"]["compile_s"]["median"]
    if last.get("amp_pass"):
        row["amp_pass"] = last["amp_pass"]
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


def model_rows(report: dict, modes, timer: str) -> list[dict]:
    """One row per (model, thread count) from harness.run's report: each mode's figures, the loss at the
    last step every mode ran, and the ratios."""
    by: dict = {}
    for r in report["results"]:
        by.setdefault((r["group"], r["threads"]), {})[f"{r['framework']}-{r['variant']}"] = r
    rows = []
    for (model, threads), per in by.items():
        row = {"model": model, "threads": threads, "batch": M.BATCH[model], "rounds": report["rounds"]}
        for md in modes:
            row[md] = _summary(per[md], timer)
        common = min(len(row[md]["losses"]) for md in modes)
        row["loss_step"] = common
        for md in modes:
            row[md]["loss"] = row[md]["losses"][common - 1]
        row["ratios"] = _ratios(row)
        rows.append(row)
    return rows


def run(models, modes, args: argparse.Namespace) -> dict:
    """harness.run over every mode and model; the report of the tables, the harness's report inside."""
    tree = tree_state()
    warmup = (
        (lambda c: max(1, args.warmup)) if args.warmup is not None else (lambda c: steps_for(c.group, args.quick)[0])
    )
    steps = args.steps if args.steps is not None else (lambda c: steps_for(c.group, args.quick)[1])
    rounds = 1 if args.quick else args.rounds
    h = H.run(cases(models, modes), rounds, args.threads, warmup, steps)
    trees = [tree] + ([t] if (t := tree_state()) != tree else [])
    loads = [x for ld in h["loads"] for x in (ld["before"][0], ld["after"][0])]
    machine = {**h["machine"], "threads": ",".join(map(str, args.threads)), "timer": args.timer}
    machine.update(versions=h["versions"], trees=trees, date=h["date"], loads=loads)
    machine.update(load_min=min(loads), load_median=statistics.median(loads), load_max=max(loads))
    return {"machine": machine, "results": model_rows(h, modes, args.timer), "harness": h}


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
        f"{m['timer']} time; 1-min load average before and after the rounds: min {m['load_min']:.2f}, "
        f"median {m['load_median']:.2f}, max {m['load_max']:.2f}",
        file=out,
    )
    trees = m["trees"]
    note = " (it changed during the run: workers measured different code)" if len(trees) > 1 else ""
    print(f"tree: {' -> '.join(trees)}{note}", file=out)
    head = (
        f"{'model':<13}{'mode':<16}{'steps':>6}{'step ms':>10}{'(min-max)':>20}{'saved MiB':>11}"
        f"{'planned MiB':>13}{'RSS MiB':>9}{'loss':>9}"
    )
    print(head, file=out)
    for row in report["results"]:
        label = f"{row['model']} x{row['threads']}"
        for md in MODES:
            s = row.get(md)
            if s is None:
                continue
            rng = f"({s['min_ms']:.1f}-{s['max_ms']:.1f})"
            print(
                f"{label:<13}{md:<16}{s['timed_steps']:>6}{s['step_ms']:>10.1f}{rng:>20}"
                f"{_fmt(s.get('saved_mib'), '.1f', 11)}{_fmt(s.get('planned_peak_mib'), '.1f', 13)}"
                f"{s['peak_rss_mib']:>9.1f}{s['loss']:>9.4f}",
                file=out,
            )
        if "loss_step" in row:
            print(
                f"{'':<13}(loss at step {row['loss_step']}; steps: all rounds; range: per-process medians)",
                file=out,
            )
    print(file=out)
    keys = []
    for row in report["results"]:
        keys += [k for k in row["ratios"] if k not in keys]
    print(
        f"{'ratio':<34}" + "".join(f"{row['model'] + ' x' + str(row['threads']):>12}" for row in report["results"]),
        file=out,
    )
    for k in keys:
        print(f"{k:<34}" + "".join(_fmt(row["ratios"].get(k), ".2f", 12) for row in report["results"]), file=out)
    print(file=out)
    for row in report["results"]:
        for md in MODES:
            s = row.get(md, {}).get("saved")
            if s:
                parts = ", ".join(f"{dt} {b / (1 << 20):.1f}" for dt, b in sorted(s["by_dtype"].items()))
                extra = f"; param copies {s['param_copies'] / (1 << 20):.1f}" if "param_copies" in s else ""
                print(f"saved MiB by dtype, {row['model']} {md}: {parts}{extra} ({s['buffers']} buffers)", file=out)
    print(file=out)
    print(f"targets: {TARGETS}", file=out)
    for line in targets(report):
        print("  " + line, file=out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    p.add_argument("--timer", choices=("cpu", "wall"), default="cpu", help="cpu (default): CPU time; wall")
    H.add_args(p, rounds=3, threads=str(THREADS))
    p.add_argument("--profile", nargs=3, metavar=("MODE", "MODEL", "PATH"), help="cProfile one mode in this process")
    args = p.parse_args(argv)
    if args.warmup is not None and args.warmup < 1:
        p.error("--warmup must be >= 1 (the first step compiles the graph or measures saved tensors)")
    try:
        models = H.parse_list(args.models, MODELS, "model")
        modes = tuple(H.parse_list(args.modes, MODES, "mode"))
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if args.profile:
        mode, model, path = args.profile
        w, s = steps_for(model, args.quick)
        profile(mode, model, path, args.warmup or w, args.steps or s)
        return 0
    report = run(models, modes, args)
    print_table(report)
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
