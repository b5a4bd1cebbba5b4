"""``flow.compile(module)`` next to eager flow, eager PyTorch and ``torch.compile``: an MLP training step.

    python benchmarks/compile_module.py                 # the table
    python benchmarks/compile_module.py --quick         # a smoke run (numbers are noisy)
    python benchmarks/compile_module.py --steps 20 --repeats 3 --json out.json

Two MLPs: ``mlp``, models.py's (784-1024-1024-10, batch 128), where matrix products take nearly
all the time, and ``mlp-small`` (64-64-64-10, batch 32), where the per-op overhead does. A training
step is
``zero_grad``, forward, cross-entropy, ``backward``, an SGD step (momentum 0.9) and ``loss.item()``,
written the same way in every mode; only the module differs:

- ``eager``: flow eager;
- ``compiled``: ``flow.compile(model)`` (compiled forward and backward graphs inside eager
  autograd; the optimizer step stays eager);
- ``torch``: PyTorch eager;
- ``torch.compile``: ``torch.compile(model)``, which on the CPU needs a C compiler at run time: when
  compiling fails the mode is reported as skipped, with the reason.

Method (that of graph.py): each mode runs in a fresh subprocess with one thread
(``OMP_NUM_THREADS=1`` and the frameworks' own settings) that builds the model, runs ``warmup``
untimed steps (for the compiled modes the first one compiles) and ``steps`` timed ones, timed in
process CPU time; the modes alternate (rotating order) ``repeats`` times, and the figure of a mode
is the median of all its timed steps.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before _common, NumPy and the frameworks read it

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import _common as C  # noqa: E402
import models as M  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("eager", "compiled", "torch", "torch.compile")
MODELS = ("mlp", "mlp-small")
SMALL_BATCH = 32


def _step_fn(fw, model, opt, x, y):
    F = fw.nn.functional

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def _workload(fw, model: str):
    """The module and the batch ``(x, y)`` of ``model``."""
    if model == "mlp":
        batch = M.make_batch("mlp")
        return M.make_mlp(fw.nn, fw.nn.functional), fw.from_numpy(batch["x"]), fw.from_numpy(batch["y"])
    import numpy as np

    nn = fw.nn
    rng = np.random.default_rng(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    x = fw.from_numpy(rng.standard_normal((SMALL_BATCH, 64), dtype=np.float32))
    return m, x, fw.from_numpy(rng.integers(0, 10, SMALL_BATCH))


def worker(mode: str, model_name: str, warmup: int, steps: int) -> dict:
    framework = "flow" if mode in ("eager", "compiled") else "torch"
    fw = C.setup(framework, threads=1)
    fw.manual_seed(0)
    model, x, y = _workload(fw, model_name)
    if mode == "compiled":
        model = fw.compile(model)
    elif mode == "torch.compile":
        model = fw.compile(model)
    opt = fw.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = _step_fn(fw, model, opt, x, y)
    t0 = time.process_time()
    try:
        step()
    except Exception as e:  # torch.compile without a working C toolchain
        if mode != "torch.compile":
            raise
        return {"mode": mode, "skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    first = time.process_time() - t0
    times = C.time_steps(step, steps, max(warmup - 1, 0), "cpu")
    return {
        "mode": mode,
        "times": times,
        "first_s": first,
        "compile_s": first - C.median(times),
        "loss": step(),
        "version": getattr(fw, "__version__", "?"),
    }


def run_worker(mode: str, model: str, warmup: int, steps: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, model]
    cmd += ["--warmup", str(warmup), "--steps", str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(model: str, modes, repeats: int, warmup: int, steps: int, log=sys.stderr) -> dict:
    per = {md: {"times": [], "compile": [], "skipped": None, "loss": None} for md in modes}
    versions: dict = {}
    for r in range(repeats):
        order = modes[r % len(modes) :] + modes[: r % len(modes)]
        for md in order:
            if per[md]["skipped"]:
                continue
            res = run_worker(md, model, warmup, steps)
            if "skipped" in res:
                per[md]["skipped"] = res["skipped"]
                print(f"  {md:<14} skipped: {res['skipped']}", file=log, flush=True)
                continue
            per[md]["times"] += res["times"]
            per[md]["compile"].append(res["compile_s"])
            per[md]["loss"] = res["loss"]
            versions["flow" if md in ("eager", "compiled") else "torch"] = res["version"]
            print(
                f"  {model} {md:<14} run {r + 1}/{repeats}: median step {C.median(res['times']) * 1e3:7.2f} ms CPU",
                file=log,
                flush=True,
            )
    rows = {}
    for md in modes:
        if per[md]["times"]:
            rows[md] = {
                "step_ms": C.median(per[md]["times"]) * 1e3,
                "first_minus_step_s": C.median(per[md]["compile"]),
                "final_loss": per[md]["loss"],
            }
        else:
            rows[md] = {"skipped": per[md]["skipped"]}
    machine = C.machine_info()
    machine.update(threads=1, timer="cpu", versions=versions, date=time.strftime("%Y-%m-%d %H:%M"))
    batch = M.BATCH["mlp"] if model == "mlp" else SMALL_BATCH
    return {"machine": machine, "model": model, "batch": batch, "warmup": warmup, "steps": steps, "results": rows}


def print_table(report: dict, out=sys.stdout) -> None:
    m = report["machine"]
    v = m["versions"]
    print(
        f"{m['date']}; {m['cpu']}; 1 thread, process CPU time; Python {m['python']}, NumPy {m['numpy']}, "
        f"flow {v.get('flow', '-')}, torch {v.get('torch', '-')}; {report['model']}, batch {report['batch']}",
        file=out,
    )
    rows = report["results"]
    eager = rows.get("eager", {}).get("step_ms")
    print(f"{'mode':<15}{'step ms':>10}{'vs eager':>10}{'compile s':>11}", file=out)
    for md, r in rows.items():
        if "skipped" in r:
            print(f"{md:<15}  skipped: {r['skipped']}", file=out)
            continue
        ratio = f"{eager / r['step_ms']:>10.2f}" if eager else f"{'-':>10}"
        comp = f"{r['first_minus_step_s']:>11.2f}" if md in ("compiled", "torch.compile") else f"{'-':>11}"
        print(f"{md:<15}{r['step_ms']:>10.2f}{ratio}{comp}", file=out)
    print("(vs eager: flow eager's step time over the mode's; compile: first step minus a steady one)", file=out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    p.add_argument("--steps", type=int, default=20, help="timed steps per process")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per process (the first compiles)")
    p.add_argument("--repeats", type=int, default=2, help="processes per mode (alternating)")
    p.add_argument("--quick", action="store_true", help="a short smoke run: 5 steps, one process each")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument("--worker", nargs=2, metavar=("MODE", "MODEL"), help="internal: one mode and model, print JSON")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.warmup, args.steps)))
        return 0
    modes = tuple(md.strip() for md in args.modes.split(",") if md.strip())
    for md in modes:
        if md not in MODES:
            p.error(f"unknown mode {md!r}; choose from {', '.join(MODES)}")
    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    for m in models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}; choose from {', '.join(MODELS)}")
    steps, repeats = (5, 1) if args.quick else (args.steps, args.repeats)
    reports = [run(m, modes, repeats, args.warmup, steps) for m in models]
    for report in reports:
        print_table(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(reports, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
