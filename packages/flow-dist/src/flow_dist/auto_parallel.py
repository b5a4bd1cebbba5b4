"""Auto-parallel: choose a data x tensor (x pipeline) parallel layout of a model by simulating each candidate.

``plan(model, sample_inputs, world)`` enumerates layouts of the zoo GPT (``flow_models.nlp.gpt``)
over ``world`` ranks and scores each with :func:`flow_dist.plan.simulate` (step time, and memory per
rank against a cap); :meth:`AutoPlan.apply` lays the model out as the best one says and
:meth:`AutoPlan.shard_batch` lays the inputs out. ``graph.config.enable_auto_parallel(True)`` does
both when an ``nn.Graph`` is first called (:func:`graph_prepare`, the ``"graph.auto_parallel"`` hook).

The search space, honestly: a strategy-level search over the SBP layouts of parameter groups, not
a per-op search of SBP signatures (OneFlow's ILP). A candidate is

* a mesh ``dp x tp = world`` (``tp`` dividing the heads; the batch split ``dp`` ways, every weight
  broadcast on the data axis);
* for ``tp > 1``, which groups are tensor parallel on the TP axis: the attention (head parallel),
  the MLP (Megatron's column then row parallel) and the vocabulary (the embedding and the tied
  output layer), any non-empty subset; the rest is broadcast;
* a pipeline degree ``pp`` dividing the layers (``dp x tp x pp = world``; stages cut as
  :func:`flow_dist.pipeline.gpt_stages` does, whole blocks, embeddings on the first stage and the
  head on the last), with the micro-batch count (gradient accumulation over 1F1B) that the
  simulator finds fastest; a pipeline's bubble and its activation sends are the simulator's. With
  ``tp > 1`` a pipeline candidate splits every group (Megatron's plan). Pipeline candidates are
  **scored, not applied**: ``AutoPlan.apply`` lays out DP and TP only (the graph pipeline needs its
  stages set on the model's blocks and a rank per stage before the first compile), so ``best`` is
  the fastest applicable plan and ``search_best`` the fastest that fits of all, pipelines included;
  :meth:`AutoPlan.explain` says which and why;
* a ZeRO stage, only when asked for (``zero_stages``). Stages 1 and 2 of a pure data-parallel
  layout apply in graph mode (``plan(..., mode="graph")``, then ``apply(model, graph=g)`` turns on
  the ``zero`` graph pass, :mod:`flow_dist.zero.graph_pass`); the other ZeRO candidates are scored
  but not chosen (the pass shards 1-d placements only and refuses stage 3; eager global tensors have
  no ZeRO: use :class:`flow_dist.zero.ZeroRedundancyOptimizer` by hand).

Within a candidate the handler still picks each op's cheapest signature (:mod:`flow_dist.handler`).
The simulator models tensor parallelism of whole blocks; the scores here correct it for partial
plans: the parameters one rank holds are counted group by group, and the TP collectives are two
all-reduces (forward and backward) per split group and layer, plus two for a split vocabulary.
The data-parallel collectives are counted as they run (measured with ``count_collectives`` and the
backend's calls): eagerly every parameter's gradient is all-reduced on its own (no buckets), in a
graph they are one bucket (ZeRO's reduce-scatters and all-gathers one per sharded parameter), and
the loss costs 3 small all-reduces either way; on this machine each costs a scheduling latency of
milliseconds, which decides between DP and TP.
Activation memory is the simulator's (divided by ``tp`` even when only some groups are split).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import numpy as np

import flow
from flow_dist.errors import GlobalTensorError

__all__ = ["AutoParallelError", "AutoPlan", "Candidate", "GROUPS", "plan", "graph_prepare"]

GROUPS = ("attn", "mlp", "vocab")
# the op scopes (node scopes of the traced step) each group's split covers, for simulate's tp_scopes
_SCOPES = {"attn": (".attn",), "mlp": (".mlp",), "vocab": ("lm_head", "transformer.wte")}


class AutoParallelError(GlobalTensorError):
    """Auto-parallel cannot plan or apply a layout (an unsupported model, no candidate fits, ...)."""


@dataclass
class Candidate:
    """One scored layout: ``dp x tp x pp`` ranks, the tensor-parallel ``groups``, a ZeRO stage, the
    micro-batches of a pipeline."""

    dp: int
    tp: int
    groups: tuple
    zero_stage: int
    step_time: float = float("nan")  # seconds, predicted
    memory: float = float("nan")  # bytes per rank, predicted
    fits: bool = False
    note: str = ""
    applicable: bool = True  # AutoPlan.apply can lay it out (a ZeRO plan only in graph mode, stage 1/2, tp 1)
    pp: int = 1
    micro_batches: int = 1
    bubble: float = 0.0  # the pipeline's idle fraction, predicted

    @property
    def name(self) -> str:
        tp = f" tp{self.tp}[{'+'.join(self.groups)}]" if self.tp > 1 else ""
        pp = f" pp{self.pp} m{self.micro_batches}" if self.pp > 1 else ""
        return f"dp{self.dp}{tp}{pp}" + (f" zero{self.zero_stage}" if self.zero_stage else "")


@dataclass
class AutoPlan:
    """The chosen layout (``best``) and every candidate scored (``candidates``, fastest first)."""

    best: Candidate
    candidates: list
    world: int
    batch: int
    memory_cap: float
    placement: object = field(default=None, repr=False)  # the mesh, set by apply()

    @property
    def search_best(self) -> Candidate | None:
        """The fastest candidate that fits the memory cap, whether or not ``apply`` can lay it out."""
        fit = [c for c in self.candidates if c.fits]
        return min(fit, key=lambda c: c.step_time) if fit else None

    def explain(self) -> str:
        """The table and why ``best`` was chosen (and, when it differs, what the search preferred)."""
        lines = [self.table()]
        sb = self.search_best
        lines.append(
            f"chosen: {self.best.name}, {self.best.step_time * 1e3:.3f} ms, the fastest plan apply() can lay out"
        )
        if sb is not None and sb is not self.best:
            lines.append(
                f"fastest that fits: {sb.name}, {sb.step_time * 1e3:.3f} ms "
                f"({(self.best.step_time / sb.step_time - 1):+.1%} for the chosen one): {sb.note or 'not applicable'}"
            )
        out = [c for c in self.candidates if not c.fits]
        if out:
            lines.append(f"over the memory cap: {', '.join(c.name for c in out)}")
        return "\n".join(lines)

    @property
    def mesh_shape(self) -> tuple:
        return (self.best.dp, self.best.tp)

    def tp_plan(self, model=None) -> dict:
        """The :func:`~flow_dist.parallel.tensor_parallel` plan of the chosen groups (empty for ``tp == 1``)."""
        if self.best.tp == 1:
            return {}
        from flow_dist.parallel.layers import GPTAttentionParallel

        out: dict = {}
        if "vocab" in self.best.groups:
            out.update({"transformer.wte": "vocab", "lm_head": "vocab"})
        if "attn" in self.best.groups:
            out.update({"transformer.h.*.attn": GPTAttentionParallel(), "transformer.h.*.attn.c_proj": "rowwise"})
        if "mlp" in self.best.groups:
            out.update({"transformer.h.*.mlp.c_fc": "colwise", "transformer.h.*.mlp.c_proj": "rowwise"})
        return out

    def make_placement(self):
        """The mesh: 1-d over the world when one of dp, tp is 1, else ``dp x tp`` (axis 1 tensor parallel)."""
        dp, tp = self.mesh_shape
        ranks = list(range(self.world))
        if dp == 1 or tp == 1:
            return flow.placement("cpu", ranks=ranks)
        return flow.placement("cpu", ranks=[ranks[i * tp : (i + 1) * tp] for i in range(dp)])

    @property
    def input_sbp(self) -> tuple:
        """The SBP of every input (the batch split on the data axis)."""
        dp, tp = self.mesh_shape
        if dp > 1 and tp > 1:
            return (flow.sbp.split(0), flow.sbp.broadcast)
        return (flow.sbp.split(0),) if dp > 1 else (flow.sbp.broadcast,)

    def apply(self, model, graph=None):
        """Lay ``model`` out in place on the mesh (tensor parallel groups split, the rest broadcast)
        and return it. Build the optimizer afterwards (a split attention gets new parameters). A
        ZeRO plan needs the ``nn.Graph`` that will run the step (``graph``): its ``zero`` pass is
        turned on (``graph.config.enable_zero(stage=...)``) before its first compile."""
        z = self.best.zero_stage
        if z:
            why = _zero_unsupported(self.best, "graph" if graph is not None else "eager")
            if why:
                raise AutoParallelError(f"auto_parallel: the plan {self.best.name} cannot be applied: {why}")
            if not hasattr(getattr(graph, "config", None), "enable_zero"):
                raise TypeError(f"AutoPlan.apply: graph must be an nn.Graph, got {type(graph).__name__}")
        _check_gpt(model)
        mesh = self.make_placement()
        if self.best.tp > 1:
            from flow_dist.parallel import tensor_parallel

            tensor_parallel(model, mesh, self.tp_plan(model), tp_axis=-1)
        else:
            model.to_global(mesh, (flow.sbp.broadcast,))
        if z:
            graph.config.enable_zero(stage=z)
        self.placement = mesh
        return model

    def shard_batch(self, x):
        """``x`` (the whole batch on every rank, local, or a global tensor on the mesh) laid out as
        :attr:`input_sbp`."""
        if self.placement is None:
            raise AutoParallelError("auto_parallel: call AutoPlan.apply(model) before shard_batch")
        if not isinstance(x, flow.Tensor):
            raise TypeError(f"shard_batch: expected a flow.Tensor, got {type(x).__name__}")
        if x.ndim == 0 or x.shape[0] % self.best.dp:
            raise AutoParallelError(
                f"shard_batch: a batch of shape {tuple(x.shape)} does not split over dp={self.best.dp} ranks on dim 0"
            )
        if getattr(x._data, "is_global", False):
            return x.to_global(self.placement, self.input_sbp)
        whole = (flow.sbp.broadcast,) * len(self.input_sbp)
        return x.to_global(self.placement, whole).to_global(sbp=self.input_sbp)

    def table(self) -> str:
        """The candidates, fastest first: predicted step time, memory per rank, whether it fits."""
        cap = "none" if self.memory_cap == float("inf") else f"{self.memory_cap / 2**20:.2f} MiB"
        lines = [f"auto-parallel over {self.world} ranks, batch {self.batch}, memory cap {cap}"]
        lines.append(f"  {'layout':<34} {'step ms':>9} {'MiB/rank':>9} {'bubble':>6}  fits")
        sb = self.search_best
        for c in self.candidates:
            mark = "*" if c is self.best else ("+" if c is sb else " ")
            lines.append(
                f"{mark} {c.name:<34} {c.step_time * 1e3:>9.3f} {c.memory / 2**20:>9.3f} {c.bubble:>6.1%}  "
                f"{'yes' if c.fits else 'no'}{'  ' + c.note if c.note else ''}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _check_gpt(model) -> None:
    from flow import nn

    if not isinstance(model, nn.Module):
        raise TypeError(f"auto_parallel: model must be an nn.Module, got {type(model).__name__}")
    cfg = getattr(model, "config", None)
    tr = getattr(model, "transformer", None)
    if cfg is None or tr is None or not hasattr(tr, "h") or not hasattr(model, "lm_head"):
        raise AutoParallelError(
            f"auto_parallel: {type(model).__name__} is not laid out like the zoo GPT (config, transformer.h, "
            "lm_head); the search knows the parameter groups of flow_models.nlp.gpt.GPT only"
        )


def _zero_unsupported(c: Candidate, mode: str) -> str:
    """Why ZeRO candidate ``c`` cannot be laid out in ``mode`` ("" when it can)."""
    if not c.zero_stage:
        return ""
    if mode != "graph":
        return (
            "ZeRO on eager global tensors is not done; plan with mode='graph' and pass the nn.Graph to "
            "apply, or shard the optimizer by hand with flow_dist.zero.ZeroRedundancyOptimizer"
        )
    if c.zero_stage == 3:
        return "the graph's zero pass refuses stage 3"
    if c.tp > 1:
        return "the graph's zero pass shards 1-d placements only, and a dp x tp mesh is 2-d"
    return ""


def _group_params(model) -> dict:
    """Element counts: per group the tensors its split lays out ``S(k)``, and ``"all"``."""

    def n(t) -> int:
        return int(np.prod(t.shape)) if t is not None else 0

    seen, total, tensors, large = set(), 0, 0, 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += n(p)
            tensors += 1
            large += n(p) >= 1024  # the graph zero pass's default shard_min_size
    out = {"all": total, "attn": 0, "mlp": 0, "vocab": n(model.transformer.wte.weight)}
    out.update(tensors=tensors, large=large)
    for blk in model.transformer.h:
        # colwise weight and bias, rowwise weight (a row-parallel bias stays whole, added once)
        a, m = blk.attn, blk.mlp
        out["attn"] += n(a.c_attn.weight) + n(getattr(a.c_attn, "bias", None)) + n(a.c_proj.weight)
        out["mlp"] += n(m.c_fc.weight) + n(getattr(m.c_fc, "bias", None)) + n(m.c_proj.weight)
    return out


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def _world_of(placement_or_world) -> int:
    if isinstance(placement_or_world, bool) or placement_or_world is None:
        raise TypeError(f"auto_parallel: expected a world size or a placement, got {placement_or_world!r}")
    if isinstance(placement_or_world, int):
        world = placement_or_world
    else:
        ranks = getattr(placement_or_world, "ranks", None)
        if ranks is None:
            raise TypeError(f"auto_parallel: expected a world size or a placement, got {placement_or_world!r}")
        world = int(np.asarray(ranks).size)
    if world < 1:
        raise ValueError(f"auto_parallel: the world must have >= 1 rank, got {world}")
    return world


# the small all-reduces of the loss a data-parallel step on global tensors runs (counted: the mean
# cross-entropy's partial sums, and the read-back; the same eagerly and in a graph)
LOSS_COLLECTIVES = 3


def _score(work, cluster, cand: Candidate, batch: int, counts: dict, simulate, Strategy) -> None:
    scopes = tuple(s for g in cand.groups for s in _SCOPES[g]) if cand.tp > 1 else None
    if cand.pp > 1:
        # a pipeline's stages hold 1/pp of the blocks' gradients: the DP buckets follow the stage
        counts = dict(counts, tensors=max(1, counts["tensors"] // cand.pp), large=max(1, counts["large"] // cand.pp))
    if work.mode != "graph":
        buckets = counts["tensors"]  # one P->B per gradient
    else:
        buckets = counts["large"] if cand.zero_stage else 1  # ZeRO's rewrite is per parameter, unbucketed
    st = Strategy(
        dp=cand.dp,
        tp=cand.tp,
        pp=cand.pp,
        micro_batches=cand.micro_batches,
        zero_stage=cand.zero_stage,
        tp_scopes=scopes,
        loss_collectives=LOSS_COLLECTIVES,
        dp_buckets=buckets,
        overlap=cluster.cores is None,  # on shared CPU cores nothing overlaps (one core per rank or less)
    )
    r = simulate(work, cluster, st, batch)
    step = r.step_time
    mem = dict(r.memory)
    if cand.tp > 1:
        # collectives: the simulator counts 2 per scope and layer; Megatron has 2 per split group
        # and layer (forward and backward), and a split vocabulary 2 more (embedding, head input);
        # a pipeline pays its stage's per micro-batch, in every one of its m + pp - 1 slots
        layers = work.n_layer // cand.pp
        k = st.tp_collectives_per_layer * layers * cand.micro_batches
        one = r.comm_time["tp"] / k if k else 0.0
        layer_groups = sum(g in cand.groups for g in ("attn", "mlp"))
        real = (2 * layer_groups * layers + 2 * ("vocab" in cand.groups)) * one * cand.micro_batches
        slots = (cand.micro_batches + cand.pp - 1) / cand.micro_batches
        step += (real - r.comm_time["tp"]) * slots
        # parameters: the simulator splits all of them tp ways; only the chosen groups are split
        split = sum(counts[g] for g in cand.groups)
        real = counts["all"] - split + split / cand.tp
        ratio = real / (counts["all"] / cand.tp)
        for key in ("parameters", "gradients", "optimizer"):
            mem[key] *= ratio
        mem["total"] = sum(v for key, v in mem.items() if key != "total")
    cand.step_time, cand.memory, cand.bubble = step, mem["total"], r.bubble


def plan(
    model,
    sample_inputs,
    world,
    *,
    memory_cap: float | None = None,
    cluster=None,
    zero_stages: tuple = (0,),
    groups: tuple = GROUPS,
    mode: str = "eager",
    pipeline: bool = True,
) -> AutoPlan:
    """Search the data x tensor parallel layouts of ``model`` (the zoo GPT) over ``world`` ranks (an
    int or a placement holding them) for one training step on ``sample_inputs`` (the token ids of
    the whole global batch, ``(batch, seq)``, or a tuple whose first item they are), and return an
    :class:`AutoPlan` with the fastest candidate that fits ``memory_cap`` (bytes per rank; default:
    the cluster device's memory). ``cluster``: a :class:`flow_dist.plan.Cluster` of ``world``
    devices (default ``Cluster.local(world)``: this machine's MPI processes). ``groups``: the
    groups that may be tensor parallel. In a multi-process job every rank must call it; rank 0's
    choice is broadcast, so the ranks agree even if their device profiles differ. ``mode``: how the
    step will run, ``"eager"`` or ``"graph"`` (an ``nn.Graph``: bucketed gradients, ZeRO 1/2 applicable).
    ``pipeline``: also score pipeline degrees (reported, not applied; see :attr:`AutoPlan.search_best`).
    """
    from flow_dist.plan import Cluster, Strategy, gpt_workload, simulate

    _check_gpt(model)
    n = _world_of(world)
    x = sample_inputs[0] if isinstance(sample_inputs, (tuple, list)) and sample_inputs else sample_inputs
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != 2:
        raise AutoParallelError(
            f"auto_parallel: sample_inputs must be the token ids of the global batch, (batch, seq); got shape {shape}"
        )
    batch, seq = int(shape[0]), int(shape[1])
    bad = [g for g in groups if g not in GROUPS]
    if bad or not groups:
        raise AutoParallelError(f"auto_parallel: groups must be a non-empty subset of {GROUPS}, got {groups!r}")
    bad_z = [z for z in zero_stages if z not in (0, 1, 2, 3)]
    if bad_z or not zero_stages:
        raise AutoParallelError(f"auto_parallel: zero_stages must hold stages 0-3, got {zero_stages!r}")
    if mode not in ("eager", "graph"):
        raise AutoParallelError(f"auto_parallel: mode must be 'eager' or 'graph', got {mode!r}")
    cluster = Cluster.local(n) if cluster is None else cluster
    if cluster.devices != n:
        raise AutoParallelError(f"auto_parallel: the cluster has {cluster.devices} devices but the world {n} ranks")
    cap = cluster.device.memory if memory_cap is None else float(memory_cap)
    if not cap > 0:
        raise ValueError(f"auto_parallel: memory_cap must be > 0 bytes, got {memory_cap!r}")
    cfg = model.config
    # eager steps run on global tensors: every op pays the SBP handler's dispatch
    work = dataclasses.replace(gpt_workload(cfg, seq=seq, name="gpt"), mode="global" if mode == "eager" else mode)
    counts = _group_params(model)
    cands: list = []
    for tp in _divisors(n):
        dp = n // tp
        if batch % dp:
            continue
        if tp > 1 and (cfg.n_head % tp or cfg.n_embd % tp or 4 * cfg.n_embd % tp):
            continue
        subsets = [()] if tp == 1 else [s for r in range(1, len(groups) + 1) for s in itertools.combinations(groups, r)]
        if tp > 1 and "vocab" in groups and cfg.vocab_size % tp:
            subsets = [s for s in subsets if "vocab" not in s]
        for sub, z in itertools.product(subsets, zero_stages):
            if z and dp == 1:
                continue  # ZeRO shards over the data-parallel ranks
            c = Candidate(dp, tp, tuple(sub), z)
            _score(work, cluster, c, batch, counts, simulate, Strategy)
            c.fits = c.memory <= cap
            why = _zero_unsupported(c, mode)
            if why:
                c.applicable, c.note = False, "scored only: " + why.split(";")[0]
            cands.append(c)
    if pipeline:
        from flow_dist.auto_parallel_pp import pipeline_candidates

        cands += pipeline_candidates(work, cluster, n, batch, cfg, counts, zero_stages, groups, cap)
    if not cands:
        raise AutoParallelError(
            f"auto_parallel: no layout of {n} ranks divides the batch {batch} and the {cfg.n_head} heads"
        )
    cands.sort(key=lambda c: (not (c.fits and c.applicable), c.step_time))
    best_i = 0 if cands[0].fits and cands[0].applicable else -1
    if flow.env.get_world_size() > 1:
        # the ranks must lay the model out alike: rank 0's choice wins
        t = flow.tensor(np.array([best_i], dtype=np.int64))
        flow.comm.broadcast(t, 0)
        best_i = int(t.numpy()[0])
    if best_i < 0:
        fit = [c for c in cands if c.fits]
        if fit:  # only plans apply() cannot lay out fit: say which, and why
            raise AutoParallelError(
                f"auto_parallel: no applicable layout fits the memory cap of {cap / 2**20:.3f} MiB per rank; "
                f"{fit[0].name} fits ({fit[0].memory / 2**20:.3f} MiB) but is {fit[0].note}"
            )
        lo = min(cands, key=lambda c: c.memory)
        raise AutoParallelError(
            f"auto_parallel: no layout fits the memory cap of {cap / 2**20:.3f} MiB per rank; the smallest, "
            f"{lo.name}, needs {lo.memory / 2**20:.3f} MiB (raise the cap, add ZeRO stages or ranks)"
        )
    return AutoPlan(cands[best_i], cands, n, batch, cap)


def _rebind(optimizers, before: dict, model) -> None:
    """Point optimizers built before :meth:`AutoPlan.apply` at the parameters that replaced old ones."""
    after = dict(model.named_parameters())
    swap = {id(p): after[k] for k, p in before.items() if k in after and after[k] is not p}
    if not swap:
        return
    for opt in optimizers:
        for g in opt.param_groups:
            for i, p in enumerate(g["params"]):
                if id(p) in swap:
                    if opt.state.get(p):
                        raise AutoParallelError(
                            "auto_parallel: the optimizer already holds state for parameters the plan replaces; "
                            "enable auto-parallel before the first step"
                        )
                    g["params"][i] = swap[id(p)]


def graph_prepare(graph, args: tuple, kwargs: dict):
    """The ``"graph.auto_parallel"`` hook ``nn.Graph`` calls before each run when
    ``graph.config.enable_auto_parallel(True)``: on the first call it plans the graph's model on the
    first input (the token ids), applies the plan (rebinding the graph's optimizers) and keeps it as
    ``graph.auto_plan``; every call lays the tensor inputs out with ``shard_batch`` (each is the
    whole batch on dim 0)."""
    ap = graph.__dict__.get("auto_plan")
    if ap is None:
        opts = graph.config.auto_parallel or {}
        mods = list(graph._modules().values())
        if len(mods) != 1:
            raise AutoParallelError(
                f"enable_auto_parallel: the graph must hold exactly one model (it holds {len(mods)} modules)"
            )
        tensors = [a for a in args if isinstance(a, flow.Tensor)]
        if not tensors:
            raise AutoParallelError("enable_auto_parallel: the graph's first call needs the token ids as a tensor")
        model = mods[0]
        ap = plan(
            model,
            tensors[0],
            flow.env.get_world_size(),
            memory_cap=opts.get("memory_cap"),
            cluster=opts.get("cluster"),
            zero_stages=tuple(opts.get("zero_stages", (0,))),
            mode="graph",
        )
        before = dict(model.named_parameters())
        ap.apply(model, graph=graph)
        _rebind([o for _, o in graph._optimizers()], before, model)
        graph.__dict__["auto_plan"] = ap

    def lay(v):
        return ap.shard_batch(v) if isinstance(v, flow.Tensor) else v

    return tuple(lay(a) for a in args), {k: lay(v) for k, v in kwargs.items()}
