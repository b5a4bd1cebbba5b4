"""Graph mode next to eager flow and eager PyTorch: training steps of the four models of models.py.

    python benchmarks/graph.py                     # the table: 1 and 2 threads, 2 rounds (slow: ResNet-18, DLRM)
    python benchmarks/graph.py --quick             # a smoke run (one round, few steps; numbers are noisy)
    python benchmarks/graph.py --models mlp,gpt,dlrm --rounds 2 --steps 3 --warmup 1 --threads 2
    python benchmarks/graph.py --json out.json     # also write the figures as JSON

Modes per model, the model definitions, batches, optimizers and hyper-parameters being those of
models.py (its builders are imported, not copied):

- ``flow graph``: a ``flow.nn.Graph`` whose ``build`` runs forward, loss and backward, with the
  optimizer added by ``add_optimizer`` (the update is part of the compiled step); a step is one
  call of the graph plus ``loss.item()``;
- ``flow eager`` and ``torch eager``: models.py's eager training step;
- ``torch sparse`` (DLRM only): PyTorch eager with ``EmbeddingBag(sparse=True)``, so the tables get
  sparse gradients and SGD updates only the looked-up rows (flow's DLRM keeps dense gradients).

Method: harness.py's (a fresh process per mode, model, thread count and round; rounds alternate the
order; wall and CPU time of every step; the load average before and after every round).
Throughput is the batch size over the median wall step; peak memory is the worker's RSS high-water
mark minus its RSS before the model was built. The graph's compile time is its first call (trace,
passes, lowering and one run) minus its median steady step. Targets (reported, not asserted):
graph/eager >= 1.2, graph/torch >= 1.0 on every model, peak graph/torch <= 0.8, GPT compile < 2 s.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import harness as H
import models as M

MODES = ("flow graph", "flow eager", "torch eager", "torch sparse")
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


def setup_graph(model: str):
    """harness setup: ``model``'s training step as a compiled flow.nn.Graph; the report gives the loss
    and how many times the graph compiled (1 when every step reused the first plan)."""
    flow = importlib.import_module("flow")
    flow.manual_seed(0)
    batch = M.make_batch(model)
    H.mark_baseline()
    g, step = make_graph_workload(flow, model, batch)
    last = {}

    def timed():
        last["loss"] = step()

    return timed, lambda: {"loss": last.get("loss"), "compiles": getattr(g, "compiles", None)}


def setup_torch_sparse(model: str):
    """harness setup: PyTorch's DLRM with sparse embedding gradients (``EmbeddingBag.sparse``, read by its forward)."""
    if model != "dlrm":
        raise ValueError(f"torch sparse is a DLRM mode, not one of {model!r}")
    torch = importlib.import_module("torch")
    torch.manual_seed(0)
    batch = M.make_batch(model)
    H.mark_baseline()
    m, _, step = M.make_workload(torch, model, batch)
    for e in m.emb:
        e.sparse = True
    last = {}

    def timed():
        last["loss"] = step()

    return timed, lambda: {"loss": last.get("loss")}


def cases(models, modes) -> list[H.Case]:
    out = []
    for m in models:
        for md in modes:
            if md == "torch sparse" and m != "dlrm":
                continue
            fw, variant = md.split()
            setup = {"graph": "graph:setup_graph", "sparse": "graph:setup_torch_sparse"}.get(
                variant, "models:setup_eager"
            )
            kwargs = {"model": m} if variant != "eager" else {"framework": fw, "model": m}
            out.append(H.Case(fw, variant, setup, kwargs, group=m))
    return out


def compile_table(report: dict) -> str:
    """Per model and threads: graph/eager throughput and the compile time (first call minus a steady step)."""
    by = {}
    for r in report["results"]:
        by.setdefault((r["group"], r["threads"]), {})[r["case"]] = r
    out = ["| model | threads | graph/eager | compile s |", "|---|---:|---:|---:|"]
    for (model, threads), rows in by.items():
        g, e = rows.get("flow graph"), rows.get("flow eager")
        ge = f"{e['wall']['median'] / g['wall']['median']:.2f}" if g and e else "-"
        comp = f"{g['first_s']['median'] - g['wall']['median']:.2f}" if g and g["first_s"] else "-"
        out.append(f"| {model} | {threads} | {ge} | {comp} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(M.MODELS), help=f"comma-separated, from {', '.join(M.MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    H.add_args(p, rounds=2)
    args = p.parse_args(argv)
    try:
        models = H.parse_list(args.models, M.MODELS, "model")
        modes = H.parse_list(args.modes, MODES, "mode")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    warmup, steps = M.steps_of(args.quick)
    # the graph's first call is its compile: it must be an untimed one
    report = H.run_args(args, cases(models, modes), lambda c: max(warmup(c), 1), steps, baseline="torch eager")
    print(H.markdown(report))
    print()
    print(M.throughput_table(report, [md for md in MODES if md in modes], "torch eager"))
    print()
    print(compile_table(report))
    print(f"(targets: {TARGETS})")
    H.write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
