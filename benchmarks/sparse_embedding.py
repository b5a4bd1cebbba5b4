"""A DLRM-like training step with dense vs sparse embedding gradients: flow next to PyTorch.

    python benchmarks/sparse_embedding.py                       # 8 tables of 100,000 x 64, batch 128
    python benchmarks/sparse_embedding.py --rows 20000 --rounds 5 --steps 20 --optim adagrad --threads 1
    python benchmarks/sparse_embedding.py --quick

The model: ``--tables`` EmbeddingBag(rows, dim, mode='sum') tables (``--bag`` indices per sample and
table), a bottom MLP on 13 dense features, the concatenated embeddings through a top MLP, BCE loss;
one step is forward + backward + ``optimizer.step()`` (SGD or Adagrad over everything). ``dense``
builds the tables with ``sparse=False`` (the weight's gradient is a full ``rows x dim`` array and the
optimizer updates every row), ``sparse`` with ``sparse=True`` (the gradient holds the looked-up rows,
the optimizer touches only them). Method: harness.py's (a fresh process per framework, mode, thread
count and round, rounds alternating; wall and CPU time of every step; ratios against PyTorch
dense). Eager mode only (flow's graph mode does not trace sparse gradients).
"""

from __future__ import annotations

import argparse
import importlib
import sys

import harness as H

VARIANTS = (("flow", "dense"), ("flow", "sparse"), ("torch", "dense"), ("torch", "sparse"))


def setup(framework: str, mode: str, rows: int, dim: int, tables: int, bag: int, batch: int, optim: str):
    """harness setup: one training step of the DLRM-like model with ``mode`` (dense / sparse) gradients."""
    import numpy as np

    fw = importlib.import_module(framework)
    fw.manual_seed(0)
    nn = fw.nn
    sparse = mode == "sparse"
    embs = [nn.EmbeddingBag(rows, dim, mode="sum", sparse=sparse) for _ in range(tables)]
    bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, dim), nn.ReLU())
    top = nn.Sequential(nn.Linear(dim * (tables + 1), 64), nn.ReLU(), nn.Linear(64, 1))
    params = [p for m in embs + [bottom, top] for p in m.parameters()]
    opt = fw.optim.SGD(params, lr=0.01) if optim == "sgd" else fw.optim.Adagrad(params, lr=0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    rng = np.random.default_rng(0)
    # a fixed pool of batches (the data pipeline is not timed)
    batches = []
    for _ in range(8):
        x = fw.tensor(rng.standard_normal((batch, 13)).astype(np.float32))
        idx = [fw.tensor(rng.integers(0, rows, (batch, bag))) for _ in range(tables)]
        y = fw.tensor(rng.integers(0, 2, (batch, 1)).astype(np.float32))
        batches.append((x, idx, y))
    k = [0]

    def step():
        x, idx, y = batches[k[0] % len(batches)]
        k[0] += 1
        opt.zero_grad()
        feats = [bottom(x)] + [t(i) for t, i in zip(embs, idx)]
        loss = loss_fn(top(fw.cat(feats, 1)), y)
        loss.backward()
        opt.step()

    return step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--bag", type=int, default=1, help="indices per sample and table")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--optim", choices=("sgd", "adagrad"), default="sgd")
    H.add_args(p, rounds=3)
    a = p.parse_args(argv)
    cfg = {k: getattr(a, k) for k in ("rows", "dim", "tables", "bag", "batch", "optim")}
    if a.quick:
        cfg["rows"] = min(cfg["rows"], 20_000)
    cases = [
        H.Case(fw, mode, "sparse_embedding:setup", {"framework": fw, "mode": mode, **cfg}, group="dlrm-like")
        for fw, mode in VARIANTS
    ]
    report = H.run_args(a, cases, 1 if a.quick else 2, 3 if a.quick else 10, baseline="torch dense")
    report["config"] = cfg
    print(
        f"DLRM-like step ({cfg['tables']} tables of {cfg['rows']} x {cfg['dim']}, bag {cfg['bag']}, batch "
        f"{cfg['batch']}, {cfg['optim']})"
    )
    print(H.markdown(report))
    H.write_json(report, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
