"""The CPU caching allocator on and off: CPU time (user / system) and page faults per training step.

    python benchmarks/allocator.py                       # resnet18 + gpt, 3 alternating rounds
    python benchmarks/allocator.py --models gpt --repeats 5 --steps 6 --json out.json

Each (setting, model) runs in a fresh subprocess (``--worker``): flow with the allocator on, flow with
``FLOW_CPU_CACHING_ALLOCATOR=0``, and PyTorch for comparison, alternating ``repeats`` times so that
drifts in machine load hit all three. In the worker, after ``warmup`` untimed steps, each timed step
(benchmarks/models.py's training step) is measured with ``resource.getrusage(RUSAGE_SELF)``: user
and system CPU seconds and minor page faults (``ru_minflt``), separately. The table gives, per setting,
the median over all timed steps of all rounds and the range (min-max) of the per-round medians; the
1-minute load average is recorded before each worker.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

import _common as C
import models as M

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = ("flow-cache", "flow-nocache", "torch")


def worker(setting: str, model: str, warmup: int, steps: int, threads: int) -> dict:
    fw = C.setup("torch" if setting == "torch" else "flow", threads)
    fw.manual_seed(0)
    _, _, step = M.make_workload(fw, model, M.make_batch(model))
    for _ in range(warmup):
        step()
    rows = []
    for _ in range(steps):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        loss = step()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        rows.append(
            {"user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime, "minflt": r1.ru_minflt - r0.ru_minflt}
        )
    out = {"setting": setting, "model": model, "steps": rows, "loss": loss}
    if setting != "torch":
        out["stats"] = fw.cpu.memory_stats()
    return out


def run_worker(setting: str, model: str, warmup: int, steps: int, threads: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", setting, model]
    cmd += ["--warmup", str(warmup), "--steps", str(steps), "--threads", str(threads)]
    env = dict(os.environ)
    for var in C.THREAD_VARS:
        env[var] = str(threads)
    env["FLOW_CPU_CACHING_ALLOCATOR"] = "0" if setting == "flow-nocache" else "1"
    load = os.getloadavg()[0]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{setting} {model} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["load"] = load
    return res


def summarise(runs: list[dict]) -> dict:
    summary = {}
    for key in ("user", "sys", "minflt"):
        every = [s[key] for r in runs for s in r["steps"]]
        per_round = [statistics.median(s[key] for s in r["steps"]) for r in runs]
        summary[key] = {"median": statistics.median(every), "min": min(per_round), "max": max(per_round)}
    summary["load"] = [round(r["load"], 2) for r in runs]
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=2, metavar=("SETTING", "MODEL"))
    ap.add_argument("--models", default="resnet18,gpt")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker[0], a.worker[1], a.warmup, a.steps, a.threads)))
        return 0
    settings = [s for s in a.settings.split(",") if s]
    report = {"machine": C.machine_info(), "threads": a.threads, "results": {}}
    for model in a.models.split(","):
        runs: dict[str, list[dict]] = {s: [] for s in settings}
        for _ in range(a.repeats):
            for s in settings:
                runs[s].append(run_worker(s, model, a.warmup, a.steps, a.threads))
        report["results"][model] = {s: summarise(r) for s, r in runs.items()}
        report["results"][model]["losses"] = {s: [r["loss"] for r in rs] for s, rs in runs.items()}
        print(f"\n{model}, per training step ({a.threads} thread(s)):")
        print(f"  {'setting':<14}{'user s':>22}{'system s':>22}{'minor faults':>26}")
        for s in settings:
            r = report["results"][model][s]
            cells = [f"{r[k]['median']:.3f} [{r[k]['min']:.3f}-{r[k]['max']:.3f}]" for k in ("user", "sys")]
            f = r["minflt"]
            cells.append(f"{f['median']:.0f} [{f['min']:.0f}-{f['max']:.0f}]")
            print(f"  {s:<14}{cells[0]:>22}{cells[1]:>22}{cells[2]:>26}   load {r['load']}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
