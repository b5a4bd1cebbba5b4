"""Eager training steps of four models, flow next to PyTorch, measured in one run on the same machine.

Every model is written once, against the ``nn`` / ``F`` (and, where the model needs a tensor
function, the top-level) namespace it is given, so the same code builds the PyTorch and the flow
version: a PyTorch training script runs on flow unchanged.

    python benchmarks/models.py                    # the table: 1 and 2 threads, 2 rounds
    python benchmarks/models.py --quick            # a smoke run (one round, few steps; numbers are noisy)
    python benchmarks/models.py --models mlp,gpt --steps 20 --rounds 3 --threads 1
    python benchmarks/models.py --json out.json    # also write the figures as JSON
    python benchmarks/models.py --profile flow gpt gpt.prof   # one framework in this process, cProfile'd

Models (the sizes the issue asks for):

- ``mlp``: MLP 784-1024-1024-10 (ReLU), batch 128, cross-entropy, SGD;
- ``gpt``: GPT-style decoder, 4 pre-LN blocks, d_model 256, 4 heads, vocab 512, sequence 128,
  batch 8 (a sample is one sequence of 128 tokens), dropout 0.1, AdamW;
- ``resnet18``: ResNet-18 for 32x32 inputs (3x3 stem, no max-pool), 10 classes, batch 32, SGD with
  momentum;
- ``dlrm``: DLRM-style recommender, 8 EmbeddingBag tables of 100,000 x 64 (sum of 10 indices per bag),
  bottom MLP 13-512-256-64 on the dense features, pairwise dot interaction, top MLP 100-512-256-1,
  batch 2,048, binary cross-entropy with logits, plain SGD (dense embedding gradients in both).

Method: harness.py's. Each (framework, model, thread count) runs in a fresh process per round,
rounds alternating the order; the worker makes the batch with NumPy (the same seed for both
frameworks), builds the model and optimizer, runs ``warmup`` untimed training steps and ``steps``
timed ones (zero_grad, forward, loss, backward, optimizer step, and ``loss.item()``), each timed by
the wall clock and the process's CPU time. Throughput is the batch size over the median wall step.
At one thread the CPU time is the work per step with little sensitivity to the machine's load.

Peak memory is the RSS high-water mark of the worker minus its RSS before the model was built:
everything the training steps keep or allocate at their peak (parameters, gradients, optimizer
state, activations, temporaries, allocator slack), whoever allocated it (NumPy, OpenBLAS, PyTorch's
allocator). It is measured the same way for both frameworks, each in a process of its own.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import harness as H


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
# The cases: one (framework, model) per process, run by harness.py
# -----------------------------------------------------------------------------------------------
def setup_eager(framework: str, model: str):
    """harness setup: ``model``'s eager training step in ``framework``; the report gives the last loss."""
    fw = importlib.import_module(framework)
    fw.manual_seed(0)
    batch = make_batch(model)
    H.mark_baseline()
    _, _, step = make_workload(fw, model, batch)
    last = {}

    def timed():
        last["loss"] = step()

    return timed, lambda: {"loss": last.get("loss"), "batch": BATCH[model]}


def cases(models, frameworks=("flow", "torch")) -> list[H.Case]:
    return [
        H.Case(f, "eager", "models:setup_eager", {"framework": f, "model": m}, group=m)
        for m in models
        for f in frameworks
    ]


def steps_of(quick: bool):
    """The (warmup, steps) callables of harness.run for the models' default or quick step counts."""
    table = QUICK_STEPS if quick else DEFAULT_STEPS
    return (lambda c: table[c.kwargs["model"]][0]), (lambda c: table[c.kwargs["model"]][1])


def throughput_table(report: dict, modes: list[str], baseline: str) -> str:
    """samples/s per mode (batch over the median wall step), the ratios to ``baseline`` (of the medians and of
    the fastest steps) and the peak memory, per model and thread count."""
    rows = {}
    for r in report["results"]:
        rows.setdefault((r["group"], r["threads"]), {})[r["case"]] = r
    head = [
        "model",
        "threads",
        *(f"{m} samples/s" for m in modes),
        *(f"{m} / {baseline}" for m in modes if m != baseline),
        *(f"(best step) {m}" for m in modes if m != baseline),
    ]
    head += [f"{m} peak MiB" for m in modes]
    out = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)]
    for (model, threads), by in rows.items():
        sps = {m: BATCH[model] / by[m]["wall"]["median"] for m in modes if m in by}
        cells = [model, str(threads), *(f"{sps[m]:.1f}" if m in sps else "-" for m in modes)]
        cells += [
            f"{sps[m] / sps[baseline]:.2f}" if m in sps and baseline in sps else "-" for m in modes if m != baseline
        ]
        # the same ratio from each mode's fastest step, the one least disturbed by the machine's load
        cells += [
            f"{by[baseline]['wall']['best'] / by[m]['wall']['best']:.2f}" if m in by and baseline in by else "-"
            for m in modes
            if m != baseline
        ]
        cells += [f"{by[m]['peak_mib']['median']:.1f}" if m in by else "-" for m in modes]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def profile(framework: str, model: str, path: str, steps: int) -> None:
    """cProfile ``steps`` training steps of one framework and model in this process (after one warm-up)."""
    import cProfile

    step, _ = setup_eager(framework, model)
    step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    prof.dump_stats(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--frameworks", default="flow,torch", help="comma-separated: flow, torch")
    H.add_args(p, rounds=2)
    p.add_argument("--profile", nargs=3, metavar=("FRAMEWORK", "MODEL", "PATH"), help="cProfile one case here")
    args = p.parse_args(argv)
    if args.profile:
        fwk, model, path = args.profile
        profile(fwk, model, path, args.steps or DEFAULT_STEPS[model][1])
        return 0
    try:
        models = H.parse_list(args.models, MODELS, "model")
        frameworks = H.parse_list(args.frameworks, ("flow", "torch"), "framework")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    warmup, steps = steps_of(args.quick)
    baseline = "torch eager" if "torch" in frameworks else None
    report = H.run_args(args, cases(models, frameworks), warmup, steps, baseline)
    print(H.markdown(report))
    print()
    print(
        throughput_table(
            report, [c for c in ("flow eager", "torch eager") if c.split()[0] in frameworks], "torch eager"
        )
    )
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
