"""A DLRM-like training step with dense vs sparse embedding gradients: flow next to PyTorch.

    python benchmarks/sparse_embedding.py                       # 8 tables of 100,000 x 64, batch 128
    python benchmarks/sparse_embedding.py --rows 20000 --rounds 5 --steps 20 --optim adagrad

The model: ``--tables`` EmbeddingBag(rows, dim, mode='sum') tables (``--bag`` indices per sample and
table), a bottom MLP on 13 dense features, the concatenated embeddings through a top MLP, BCE loss;
one step is forward + backward + ``optimizer.step()`` (SGD or Adagrad over everything). ``dense``
builds the tables with ``sparse=False`` (the weight's gradient is a full ``rows x dim`` array and the
optimizer updates every row), ``sparse`` with ``sparse=True`` (the gradient holds the looked-up rows,
the optimizer touches only them). Each (framework, mode) runs in its own worker process; workers
alternate round after round so that load drifts hit all of them. Figures are medians of the
per-step CPU time (``time.process_time``) at one thread. Eager mode only (graph mode is not
measured: flow's graph mode does not trace sparse gradients).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _common as C

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = (("flow", "dense"), ("flow", "sparse"), ("torch", "dense"), ("torch", "sparse"))


def worker(fw_name: str, mode: str, a) -> dict:
    import numpy as np

    fw = C.setup(fw_name, 1)
    fw.manual_seed(0)
    nn = fw.nn
    sparse = mode == "sparse"
    tables = [nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=sparse) for _ in range(a.tables)]
    bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, a.dim), nn.ReLU())
    top = nn.Sequential(nn.Linear(a.dim * (a.tables + 1), 64), nn.ReLU(), nn.Linear(64, 1))
    params = [p for m in tables + [bottom, top] for p in m.parameters()]
    opt = fw.optim.SGD(params, lr=0.01) if a.optim == "sgd" else fw.optim.Adagrad(params, lr=0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    rng = np.random.default_rng(0)
    # a fixed pool of batches (the data pipeline is not timed)
    batches = []
    for _ in range(8):
        x = fw.tensor(rng.standard_normal((a.batch, 13)).astype(np.float32))
        idx = [fw.tensor(rng.integers(0, a.rows, (a.batch, a.bag))) for _ in range(a.tables)]
        y = fw.tensor(rng.integers(0, 2, (a.batch, 1)).astype(np.float32))
        batches.append((x, idx, y))
    k = [0]

    def step():
        x, idx, y = batches[k[0] % len(batches)]
        k[0] += 1
        opt.zero_grad()
        feats = [bottom(x)] + [t(i) for t, i in zip(tables, idx)]
        loss = loss_fn(top(fw.cat(feats, 1)), y)
        loss.backward()
        opt.step()

    times = C.time_steps(step, a.steps, a.warmup, "cpu")
    return {"times": times}


def run_worker(fw_name: str, mode: str, a) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", fw_name, mode]
    for k in ("rows", "dim", "tables", "bag", "batch", "steps", "warmup"):
        cmd += [f"--{k}", str(getattr(a, k))]
    cmd += ["--optim", a.optim]
    env = dict(os.environ)
    for var in C.THREAD_VARS:
        env[var] = "1"
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{fw_name} {mode} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--bag", type=int, default=1, help="indices per sample and table")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--optim", choices=("sgd", "adagrad"), default="sgd")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "MODE"), help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker[0], a.worker[1], a)))
        return 0
    per = {v: {"times": [], "medians": []} for v in VARIANTS}
    for r in range(a.rounds):
        for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            res = run_worker(v[0], v[1], a)
            per[v]["times"] += res["times"]
            per[v]["medians"].append(C.median(res["times"]))
            print(
                f"  {v[0]:<6}{v[1]:<7} round {r + 1}/{a.rounds}: {C.median(res['times']) * 1e3:8.2f} ms",
                file=sys.stderr,
            )
    report = {
        "machine": C.machine_info(),
        "config": {k: getattr(a, k) for k in ("rows", "dim", "tables", "bag", "batch", "optim", "rounds", "steps")},
        "results": {
            f"{fw} {mode}": {
                "step_ms": C.median(per[(fw, mode)]["times"]) * 1e3,
                "round_ms": [min(per[(fw, mode)]["medians"]) * 1e3, max(per[(fw, mode)]["medians"]) * 1e3],
            }
            for fw, mode in VARIANTS
        },
    }
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    cfg = report["config"]
    print(
        f"DLRM-like step ({cfg['tables']} tables of {cfg['rows']} x {cfg['dim']}, bag {cfg['bag']}, batch "
        f"{cfg['batch']}, {cfg['optim']}), CPU time per step, 1 thread, {cfg['rounds']} rounds x {cfg['steps']} steps"
    )
    for name, x in report["results"].items():
        print(f"  {name:<14}{x['step_ms']:>9.2f} ms  (rounds {x['round_ms'][0]:.2f}-{x['round_ms'][1]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
