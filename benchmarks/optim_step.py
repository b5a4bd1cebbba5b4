"""``optimizer.step()`` alone on the models of ``models.py``: flow (one or more source trees) next to PyTorch.

    python benchmarks/optim_step.py                                    # installed flow vs PyTorch, 1 thread
    python benchmarks/optim_step.py --models gpt,dlrm --rounds 7 --steps 30
    python benchmarks/optim_step.py --variant old=/tmp/old/packages/flow-core/src --variant new=packages/flow-core/src

Each model uses its optimizer from ``models.py`` (MLP: SGD; GPT: AdamW; ResNet-18: SGD with momentum
and weight decay; DLRM: SGD over 8 tables of 100,000 x 64; tiny: SGD with momentum over 8 parameters of
16 x 16 and 16, where step()'s fixed cost per call shows). A worker process builds the model and
optimizer, runs ``--warmup`` whole training steps (so the gradients and the optimizer's states
exist), then times ``--steps`` calls of ``opt.step()`` alone on the last gradients. It also builds a
second optimizer on the same model and times its first ``step()`` (with the states' allocation)
and the RSS that first step adds.

``--variant NAME=PATH`` runs flow from the source tree ``PATH`` (a ``packages/flow-core/src``
folder with a built ``flow/_C`` extension in it) instead of the installed one; ``torch`` is
PyTorch. Workers alternate between the variants, round after round, so that load drifts hit all
of them; a figure is the median over all timed steps of a variant, with the range of the rounds'
medians. ``--timer cpu`` (default) is the process's CPU time, at ``--threads 1`` the work per step
with little sensitivity to the load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _common as C

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("mlp", "gpt", "resnet18", "dlrm", "tiny")


def _tiny_workload(fw):
    """Four Linear(16, 16) layers (8 small parameters), SGD with momentum: step()'s fixed cost per
    update call, which the real models' tensor sizes hide."""
    m = fw.nn.Sequential(*[fw.nn.Linear(16, 16) for _ in range(4)])
    opt = fw.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = fw.randn(8, 16)

    def step():
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()

    return m, opt, step


def _use_tree(path: str) -> None:
    """Import flow from the source tree ``path``, not from the (editable) installation."""
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
    sys.path.insert(0, os.path.abspath(path))


def worker(variant: str, path: str | None, model: str, warmup: int, steps: int, timer: str, threads: int) -> dict:
    if path:
        _use_tree(path)
    fw = C.setup("torch" if variant == "torch" else "flow", threads)
    import models as M

    fw.manual_seed(0)
    if model == "tiny":
        m, opt, step = _tiny_workload(fw)
    else:
        m, opt, step = M.make_workload(fw, model, M.make_batch(model))
    for _ in range(warmup):
        step()
    times = C.time_steps(opt.step, steps, 1, timer)
    fresh = type(opt)(
        m.parameters(), **{k: v for k, v in opt.defaults.items() if k in ("lr", "momentum", "weight_decay")}
    )
    rss0, clock = C.current_rss(), C.TIMERS[timer]
    t0 = clock()
    fresh.step()
    first = clock() - t0
    return {
        "variant": variant,
        "model": model,
        "times": times,
        "first_step": first,
        "first_step_rss": C.current_rss() - rss0,
        "flow": getattr(fw, "__file__", "?"),
    }


def run_worker(variant: str, path: str | None, model: str, warmup: int, steps: int, timer: str, threads: int) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        variant,
        model,
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
        "--timer",
        timer,
        "--threads",
        str(threads),
    ]
    if path:
        cmd += ["--path", path]
    env = dict(os.environ)
    for var in C.THREAD_VARS:
        env[var] = str(threads)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{variant} {model} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(models, variants: dict, rounds: int, steps: int, warmup: int, timer: str, threads: int, log=sys.stderr) -> dict:
    rows = []
    load = [os.getloadavg()[0]]
    for model in models:
        per = {v: {"times": [], "medians": [], "first": [], "rss": []} for v in variants}
        names = list(variants)
        for r in range(rounds):
            for v in names if r % 2 == 0 else names[::-1]:
                res = run_worker(v, variants[v], model, warmup, steps, timer, threads)
                per[v]["times"] += res["times"]
                per[v]["medians"].append(C.median(res["times"]))
                per[v]["first"].append(res["first_step"])
                per[v]["rss"].append(res["first_step_rss"])
                print(
                    f"  {model:<9} {v:<8} round {r + 1}/{rounds}: step() {C.median(res['times']) * 1e3:8.2f} ms, "
                    f"first step() {res['first_step'] * 1e3:8.1f} ms",
                    file=log,
                    flush=True,
                )
            load.append(os.getloadavg()[0])
        row = {"model": model}
        for v in names:
            row[v] = {
                "step_ms": C.median(per[v]["times"]) * 1e3,
                "round_ms": [min(per[v]["medians"]) * 1e3, max(per[v]["medians"]) * 1e3],
                "first_step_ms": C.median(per[v]["first"]) * 1e3,
                "first_step_rss_mib": C.mib(C.median(per[v]["rss"])),
            }
        rows.append(row)
    return {
        "machine": C.machine_info(),
        "threads": threads,
        "timer": timer,
        "rounds": rounds,
        "steps": steps,
        "warmup": warmup,
        "variants": variants,
        "load_average": [min(load), max(load)],
        "results": rows,
    }


def print_table(report: dict, out=sys.stdout) -> None:
    names = list(report["variants"])
    print(
        f"optimizer.step(), {report['timer']} time, {report['threads']} thread(s), {report['rounds']} rounds x "
        f"{report['steps']} steps; load average {report['load_average'][0]:.1f}-{report['load_average'][1]:.1f}",
        file=out,
    )
    print(f"{'model':<10}" + "".join(f"{v + ' ms':>26}{'first':>10}{'+MiB':>8}" for v in names), file=out)
    for r in report["results"]:
        cells = []
        for v in names:
            x = r[v]
            cells.append(
                f"{x['step_ms']:>9.2f} ({x['round_ms'][0]:.2f}-{x['round_ms'][1]:.2f})".rjust(26)
                + f"{x['first_step_ms']:>10.1f}{x['first_step_rss_mib']:>8.1f}"
            )
        print(f"{r['model']:<10}" + "".join(cells), file=out)
    print(
        "(ms: median step() over all rounds, in brackets the range of the rounds' medians; first: the first "
        "step() of a new optimizer; +MiB: the RSS it adds)",
        file=out,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="flow from a source tree (repeatable); default: the installed flow",
    )
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2, help="whole training steps before timing")
    p.add_argument("--timer", choices=sorted(C.TIMERS), default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument("--worker", nargs=2, metavar=("VARIANT", "MODEL"), help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        res = worker(args.worker[0], args.path, args.worker[1], args.warmup, args.steps, args.timer, args.threads)
        print(json.dumps(res))
        return 0
    variants: dict = {}
    for spec in args.variant:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path or name == "torch":
            p.error(f"--variant expects NAME=PATH with NAME other than 'torch', got {spec!r}")
        variants[name] = os.path.abspath(path)
    if not variants:
        variants["flow"] = None
    if not args.no_torch:
        variants["torch"] = None
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad:
        p.error(f"unknown models {bad}; choose from {', '.join(MODELS)}")
    report = run(models, variants, args.rounds, args.steps, args.warmup, args.timer, args.threads)
    print_table(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
