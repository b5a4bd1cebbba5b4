"""Eager training steps of four models, flow next to PyTorch, measured in one run on the same machine.

Every model is written once, against the ``nn`` / ``F`` (and, where the model needs a tensor
function, the top-level) namespace it is given, so the same code builds the PyTorch and the flow
version: a PyTorch training script runs on flow unchanged.

    python benchmarks/models.py                    # the table (5-10 minutes on 2 cores)
    python benchmarks/models.py --quick            # a smoke run (one to two minutes; numbers are noisy)
    python benchmarks/models.py --models mlp,gpt --steps 20 --repeats 3
    python benchmarks/models.py --json out.json    # also write the figures as JSON
    python benchmarks/models.py --worker flow gpt --profile gpt.prof   # one framework, cProfile'd

Models (the sizes the issue asks for):

- ``mlp``: MLP 784-1024-1024-10 (ReLU), batch 128, cross-entropy, SGD;
- ``gpt``: GPT-style decoder, 4 pre-LN blocks, d_model 256, 4 heads, vocab 512, sequence 128,
  batch 8 (a sample is one sequence of 128 tokens), dropout 0.1, AdamW;
- ``resnet18``: ResNet-18 for 32x32 inputs (3x3 stem, no max-pool), 10 classes, batch 32, SGD with
  momentum;
- ``dlrm``: DLRM-style recommender, 8 EmbeddingBag tables of 100,000 x 64 (sum of 10 indices per bag),
  bottom MLP 13-512-256-64 on the dense features, pairwise dot interaction, top MLP 100-512-256-1,
  batch 2,048, binary cross-entropy with logits, plain SGD (dense embedding gradients in both).

Method. Each (framework, model) runs in a fresh subprocess (``--worker``) that imports NumPy and
the framework, makes the batch with NumPy (the same seed for both frameworks), records its RSS as
the baseline, then builds the model and optimizer, runs ``warmup`` untimed training steps and
``steps`` timed ones (zero_grad, forward, loss, backward, optimizer step, and ``loss.item()``). A
step's time is wall-clock (``--timer cpu``: the process's CPU time). Subprocesses alternate between
the frameworks ``repeats`` times per model so that drifts in machine load hit both; each
framework's throughput is its batch size over the median of all its timed steps.

Peak memory is the RSS high-water mark of the worker (``getrusage(RUSAGE_SELF).ru_maxrss``) minus
its baseline: everything the training steps keep or allocate at their peak (parameters,
gradients, optimizer state, activations, temporaries, allocator slack), whoever allocated it
(NumPy, OpenBLAS, PyTorch's allocator, MKL's buffers). It is measured the same way for both
frameworks, each in a process of its own, so neither sees the other's memory; tracemalloc would
see only NumPy's allocations and not PyTorch's.

Both frameworks use 2 threads (``--threads``): ``torch.set_num_threads(2)``; flow's native kernels run
OpenMP with 2 threads and NumPy's BLAS runs 2 threads (each worker gets OMP/OPENBLAS/MKL_NUM_THREADS=2).
On a machine shared with other jobs, ``--threads 1 --timer cpu`` compares the work each framework does
per step with little sensitivity to the load (one thread's CPU time does not include waiting).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _common as C

HERE = os.path.dirname(os.path.abspath(__file__))


# -----------------------------------------------------------------------------------------------
# The models, each written once against a framework's namespaces
# -----------------------------------------------------------------------------------------------
def make_mlp(nn, F):
    """MLP 784-1024-1024-10 with ReLU."""
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def make_gpt(
    nn,
    F,
    vocab: int = 512,
    d_model: int = 256,
    n_heads: int = 4,
    n_layers: int = 4,
    seq_len: int = 128,
    dropout: float = 0.1,
):
    """A GPT-style decoder: token + position embeddings, pre-LN blocks of causal self-attention and a
    GELU MLP, a final LayerNorm and an untied LM head."""

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, T, n_heads, C // n_heads).transpose(1, 2)
            k = k.view(B, T, n_heads, C // n_heads).transpose(1, 2)
            v = v.view(B, T, n_heads, C // n_heads).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).reshape(B, T, C)
            return self.drop(self.proj(y))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.attn = CausalSelfAttention()
            self.ln2 = nn.LayerNorm(d_model)
            self.fc = nn.Linear(d_model, 4 * d_model)
            self.out = nn.Linear(4 * d_model, d_model)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(seq_len, d_model)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList([Block() for _ in range(n_layers)])
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)

        def forward(self, idx, pos):
            x = self.drop(self.tok(idx) + self.pos(pos))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return GPT()


def make_resnet18(nn, F, num_classes: int = 10):
    """ResNet-18 for 32x32 images (CIFAR-style: a 3x3 stem without max-pool)."""

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            else:
                self.shortcut = nn.Identity()

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + self.shortcut(x))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.layers(x)
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.fc(x)

    return ResNet18()


def make_dlrm(nn, F, fw, num_tables: int = 8, rows: int = 100_000, dim: int = 64, num_dense: int = 13):
    """DLRM-style: a bottom MLP on the dense features, one EmbeddingBag (sum) per sparse feature, the
    pairwise dot products of the resulting vectors, and a top MLP on [dense vector, dot products]."""
    import numpy as np

    def mlp(sizes, last_act=True):
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if last_act or i < len(sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    n = num_tables + 1
    li, lj = np.tril_indices(n, -1)
    n_pairs = len(li)

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.bot = mlp([num_dense, 512, 256, dim])
            self.emb = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(num_tables)])
            self.top = mlp([dim + n_pairs, 512, 256, 1], last_act=False)
            # the strictly-lower triangle of the (n, n) dot-product matrix, flattened
            self.register_buffer("pairs", fw.from_numpy((li * n + lj).astype(np.int64)), persistent=False)

        def forward(self, dense, indices, offsets):
            x = self.bot(dense)
            vecs = [x] + [e(idx, offsets) for e, idx in zip(self.emb, indices)]
            t = fw.stack(vecs, dim=1)  # (B, n, dim)
            z = fw.bmm(t, t.transpose(1, 2)).flatten(1)  # (B, n * n)
            inter = z.index_select(1, self.pairs)
            return self.top(fw.cat([x, inter], dim=1))

    return DLRM()


# -----------------------------------------------------------------------------------------------
# Workloads: model, optimizer, batch and loss per model
# -----------------------------------------------------------------------------------------------
BATCH = {"mlp": 128, "gpt": 8, "resnet18": 32, "dlrm": 2048}
MODELS = tuple(BATCH)
DEFAULT_STEPS = {"mlp": (10, 40), "gpt": (3, 10), "resnet18": (2, 6), "dlrm": (3, 10)}  # (warmup, timed)
QUICK_STEPS = {"mlp": (2, 5), "gpt": (1, 2), "resnet18": (1, 2), "dlrm": (1, 2)}
UNIT = {"gpt": "sequences of 128 tokens"}
DLRM_BAG = 10  # indices per bag


def make_batch(model: str, seed: int = 0) -> dict:
    """The batch of ``model`` as NumPy arrays (the same for both frameworks)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    b = BATCH[model]
    if model == "mlp":
        return {"x": rng.standard_normal((b, 784), dtype=np.float32), "y": rng.integers(0, 10, b)}
    if model == "gpt":
        return {"idx": rng.integers(0, 512, (b, 128)), "pos": np.arange(128), "y": rng.integers(0, 512, b * 128)}
    if model == "resnet18":
        return {"x": rng.standard_normal((b, 3, 32, 32), dtype=np.float32), "y": rng.integers(0, 10, b)}
    if model == "dlrm":
        return {
            "dense": rng.standard_normal((b, 13), dtype=np.float32),
            "indices": [rng.integers(0, 100_000, b * DLRM_BAG) for _ in range(8)],
            "offsets": np.arange(b, dtype=np.int64) * DLRM_BAG,
            "y": rng.integers(0, 2, (b, 1)).astype(np.float32),
        }
    raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")


def make_workload(fw, model: str, batch: dict):
    """``(module, optimizer, step)`` where ``step()`` runs one training step and returns the loss."""
    nn, F = fw.nn, fw.nn.functional
    t = fw.from_numpy
    if model == "mlp":
        m = make_mlp(nn, F)
        opt = fw.optim.SGD(m.parameters(), lr=0.01)
        inputs, target, loss_fn = (t(batch["x"]),), t(batch["y"]), F.cross_entropy
    elif model == "gpt":
        m = make_gpt(nn, F)
        opt = fw.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1)
        inputs, target = (t(batch["idx"]), t(batch["pos"])), t(batch["y"])
        loss_fn = lambda logits, y: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
    elif model == "resnet18":
        m = make_resnet18(nn, F)
        opt = fw.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        inputs, target, loss_fn = (t(batch["x"]),), t(batch["y"]), F.cross_entropy
    elif model == "dlrm":
        m = make_dlrm(nn, F, fw)
        opt = fw.optim.SGD(m.parameters(), lr=0.01)
        inputs = (t(batch["dense"]), [t(i) for i in batch["indices"]], t(batch["offsets"]))
        target, loss_fn = t(batch["y"]), F.binary_cross_entropy_with_logits
    else:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    m.train()

    def step():
        opt.zero_grad()
        loss = loss_fn(m(*inputs), target)
        loss.backward()
        opt.step()
        return loss.item()

    return m, opt, step


# -----------------------------------------------------------------------------------------------
# One (framework, model) in this process
# -----------------------------------------------------------------------------------------------
def worker(
    framework: str,
    model: str,
    warmup: int,
    steps: int,
    timer: str,
    profile: str | None = None,
    threads: int = C.THREADS,
) -> dict:
    fw = C.setup(framework, threads)
    fw.manual_seed(0)
    batch = make_batch(model)
    base_rss, base_peak = C.current_rss(), C.peak_rss()
    _, _, step = make_workload(fw, model, batch)
    if profile:
        import cProfile

        for _ in range(warmup):
            step()
        prof = cProfile.Profile()
        prof.enable()
        times = C.time_steps(step, steps, 0, timer)
        prof.disable()
        prof.dump_stats(profile)
    else:
        times = C.time_steps(step, steps, warmup, timer)
    loss = step()
    peak = C.peak_rss()
    return {
        "framework": framework,
        "model": model,
        "times": times,
        "peak_bytes": peak - base_rss,
        "baseline_rss": base_rss,
        "baseline_peak": base_peak,
        "loss": loss,
        "version": getattr(fw, "__version__", "?"),
        "blas": C.blas_kernel(),
    }


def run_worker(framework: str, model: str, warmup: int, steps: int, timer: str, threads: int = C.THREADS) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        framework,
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
    env = dict(os.environ)
    for var in C.THREAD_VARS:  # the thread pools read these when they start
        env[var] = str(threads)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{framework} {model} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -----------------------------------------------------------------------------------------------
# The side-by-side run
# -----------------------------------------------------------------------------------------------
def run(
    models,
    repeats: int,
    steps: int | None,
    warmup: int | None,
    quick: bool,
    timer: str,
    frameworks=("flow", "torch"),
    threads: int = C.THREADS,
    log=sys.stderr,
) -> dict:
    results = []
    versions = {}
    blas = None
    for model in models:
        w, s = (QUICK_STEPS if quick else DEFAULT_STEPS)[model]
        w = w if warmup is None else warmup
        s = s if steps is None else steps
        per = {fwk: {"times": [], "peaks": [], "loss": None} for fwk in frameworks}
        for r in range(repeats):
            order = frameworks if r % 2 == 0 else tuple(reversed(frameworks))
            for fwk in order:
                res = run_worker(fwk, model, w, s, timer, threads)
                per[fwk]["times"] += res["times"]
                per[fwk]["peaks"].append(res["peak_bytes"])
                per[fwk]["loss"] = res["loss"]
                versions[fwk] = res["version"]
                if fwk == "flow":
                    blas = res.get("blas")
                print(
                    f"  {model:<9} {fwk:<6} run {r + 1}/{repeats}: median step "
                    f"{C.median(res['times']) * 1e3:8.1f} ms, peak {C.mib(res['peak_bytes']):8.1f} MiB",
                    file=log,
                    flush=True,
                )
        row = {"model": model, "batch": BATCH[model], "warmup": w, "steps": s, "repeats": repeats}
        for fwk in frameworks:
            med = C.median(per[fwk]["times"])
            row[fwk] = {
                "step_ms": med * 1e3,
                "samples_per_s": BATCH[model] / med,
                "peak_mib": C.mib(C.median(per[fwk]["peaks"])),
                "min_step_ms": min(per[fwk]["times"]) * 1e3,
                "final_loss": per[fwk]["loss"],
            }
        if "flow" in row and "torch" in row:
            row["throughput_ratio"] = row["flow"]["samples_per_s"] / row["torch"]["samples_per_s"]
            row["best_step_ratio"] = row["torch"]["min_step_ms"] / row["flow"]["min_step_ms"]
            row["memory_ratio"] = row["flow"]["peak_mib"] / max(row["torch"]["peak_mib"], 1e-9)
        results.append(row)
    machine = C.machine_info()
    machine.update(timer=timer, versions=versions, threads=threads)
    if blas:  # as the flow workers ran it (this process's pool may have another size)
        machine["blas"] = blas
    return {"machine": machine, "results": results}


def print_table(report: dict, out=sys.stdout) -> None:
    m = report["machine"]
    v = m.get("versions", {})
    print(
        f"machine: {m['cpu']}, {m['cores']} cores, {m['threads']} threads each; Python {m['python']}, "
        f"NumPy {m['numpy']} ({m['blas']}), torch {v.get('torch', '-')}, flow {v.get('flow', '-')}; "
        f"{m['timer']} time",
        file=out,
    )
    head = (
        f"{'model':<10}{'batch':>6}{'flow samples/s':>16}{'torch samples/s':>17}{'flow/torch':>12}"
        f"{'(best step)':>12}{'flow peak MiB':>15}{'torch peak MiB':>16}{'flow/torch':>12}"
    )
    print(head, file=out)
    for r in report["results"]:
        f, t = r.get("flow"), r.get("torch")
        cells = [f"{r['model']:<10}{r['batch']:>6}"]
        cells.append(f"{f['samples_per_s']:>16.1f}" if f else f"{'-':>16}")
        cells.append(f"{t['samples_per_s']:>17.1f}" if t else f"{'-':>17}")
        cells.append(f"{r['throughput_ratio']:>12.2f}" if "throughput_ratio" in r else f"{'-':>12}")
        cells.append(f"{r['best_step_ratio']:>12.2f}" if "best_step_ratio" in r else f"{'-':>12}")
        cells.append(f"{f['peak_mib']:>15.1f}" if f else f"{'-':>15}")
        cells.append(f"{t['peak_mib']:>16.1f}" if t else f"{'-':>16}")
        cells.append(f"{r['memory_ratio']:>12.2f}" if "memory_ratio" in r else f"{'-':>12}")
        print("".join(cells), file=out)
    print(
        "(samples/s: batch over the median step time of alternating fresh processes; best step: the same ratio "
        "from each framework's fastest step; peak: RSS high-water mark minus the RSS before the model was "
        "built; targets: throughput ratio >= 0.8, memory ratio <= 1.2)",
        file=out,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--frameworks", default="flow,torch", help="comma-separated: flow, torch")
    p.add_argument("--steps", type=int, help="timed steps per process (default: per model)")
    p.add_argument("--warmup", type=int, help="untimed steps per process before timing (default: per model)")
    p.add_argument("--repeats", type=int, default=2, help="processes per framework and model (alternating)")
    p.add_argument("--quick", action="store_true", help="a short smoke run: fewer steps, one process each")
    p.add_argument(
        "--timer",
        choices=sorted(C.TIMERS),
        default="wall",
        help="wall: elapsed time (default); cpu: the process's CPU time",
    )
    p.add_argument("--threads", type=int, default=C.THREADS, help="threads of each framework (default 2)")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument(
        "--worker",
        nargs=2,
        metavar=("FRAMEWORK", "MODEL"),
        help="internal: run one framework and model in this process and print JSON",
    )
    p.add_argument("--profile", metavar="PATH", help="with --worker: cProfile the timed steps into PATH")
    args = p.parse_args(argv)
    if args.worker:
        fwk, model = args.worker
        w, s = DEFAULT_STEPS[model]
        res = worker(
            fwk,
            model,
            w if args.warmup is None else args.warmup,
            s if args.steps is None else args.steps,
            args.timer,
            args.profile,
            args.threads,
        )
        print(json.dumps(res))
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in BATCH:
            p.error(f"unknown model {m!r}; choose from {', '.join(MODELS)}")
    frameworks = tuple(f.strip() for f in args.frameworks.split(",") if f.strip())
    repeats = 1 if args.quick and args.repeats == 2 else args.repeats
    report = run(models, repeats, args.steps, args.warmup, args.quick, args.timer, frameworks, args.threads)
    print_table(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
