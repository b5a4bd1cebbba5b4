"""``simulate(workload, cluster, strategy, batch) -> Report``: step time, memory and communication per rank.

Assumptions (see docs/scaling.md):

* compute: every op at its roofline time (FLOPs at the device's effective rate, or bytes at its
  effective bandwidth, whichever is longer), costs linear in the micro-batch;
* tensor parallelism as Megatron-LM: the layer's matmuls, attention and its elementwise work split
  ``tp`` ways, layer norms and residual adds replicated; 2 all-reduces of the block's activation
  (micro-batch x seq x hidden) in forward and 2 in backward, not overlapped; the LM head is
  vocabulary-parallel;
* pipeline parallelism as 1F1B: ``(m + p - 1)`` micro-batch slots per step, bubble
  ``(p-1)/(m+p-1)``, an activation send/recv forward and a gradient send/recv backward per
  micro-batch and stage boundary; embeddings and head on the last stage (the slowest);
* data parallelism: gradients all-reduced (ZeRO 1/2: reduce-scattered, parameters all-gathered after
  the update, the same volume) over the ``dp`` ranks ``tp`` apart, in ``dp_buckets`` collectives
  (1: bucketed; eager global tensors: one per parameter), plus ``loss_collectives`` small
  all-reduces of the loss (not overlapped); with ``overlap`` the reduction runs behind backward and
  only what exceeds the backward time is exposed;
* ZeRO-3 all-gathers the parameters before forward and again before backward (1.5x the all-reduce
  volume), overlapped the same way;
* memory (mixed precision when the device computes in 2-byte floats): parameters 2 bytes, gradients 2,
  optimizer 12 (fp32 master, Adam m and v), as in the ZeRO paper; full precision 4, 4, 8.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from flow_dist.plan.cost import OpCost

TP_REPLICATED = frozenset(["layer_norm", "layer_norm_backward", "rms_norm"])


@dataclass(frozen=True)
class Strategy:
    """``dp`` x ``tp`` x ``pp`` ranks, ``micro_batches`` per step, ZeRO stage 0-3, DP overlap with backward."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    micro_batches: int = 1
    zero_stage: int = 0
    overlap: bool = True
    tp_scopes: tuple | None = None  # None: Megatron (attention and MLP); else the scopes split by hand
    # all-reduces of a few bytes over the DP group per step besides the gradients: a global loss's
    # partial sums (a graph on global tensors boxes the mean cross-entropy's P->B inside the step,
    # plan.graph_collectives counts them) and the caller's read-back; each costs one latency, and
    # the forward waits for them (not overlapped)
    loss_collectives: int = 0
    # how many all-reduces the DP gradients take: 1 (bucketed, as a graph's gradient buckets or DDP),
    # or one per parameter tensor (eager global tensors: each gradient is boxed P->B on its own, so
    # every parameter pays a latency; 52 for the 4-block GPT)
    dp_buckets: int = 1

    @property
    def tp_collectives_per_layer(self) -> int:
        """All-reduces per layer and micro-batch: one forward and one backward per split sub-block."""
        return 4 if self.tp_scopes is None else 2 * len(self.tp_scopes)

    def __post_init__(self) -> None:
        for k in ("dp", "tp", "pp", "micro_batches"):
            if int(getattr(self, k)) < 1:
                raise ValueError(f"Strategy.{k} must be >= 1, got {getattr(self, k)}")
        if int(self.dp_buckets) < 1:
            raise ValueError(f"Strategy.dp_buckets must be >= 1, got {self.dp_buckets}")
        if int(self.loss_collectives) < 0:
            raise ValueError(f"Strategy.loss_collectives must be >= 0, got {self.loss_collectives}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"Strategy.zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")

    @property
    def ranks(self) -> int:
        return self.dp * self.tp * self.pp

    def __str__(self) -> str:
        return f"dp{self.dp} tp{self.tp} pp{self.pp} m{self.micro_batches} z{self.zero_stage}"


@dataclass
class Report:
    """What :func:`simulate` predicts for one step (seconds, bytes per rank)."""

    strategy: Strategy
    step_time: float
    compute_time: float
    comm_time: dict  # tp / pp / dp / zero -> exposed seconds
    memory: dict  # parameters / gradients / optimizer / activations / total -> bytes per rank
    comm_volume: dict  # tp / pp / dp / zero -> bytes each rank sends per step
    bubble: float  # fraction of the pipeline's slots idle
    critical_path: list = field(default_factory=list)  # (what, seconds per step), largest first
    tokens_per_s: float = 0.0
    mfu: float = 0.0

    def fits(self, cap: float) -> bool:
        return self.memory["total"] <= cap

    def summary(self) -> str:
        top = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in self.critical_path[:4])
        return (
            f"{self.strategy}: step {self.step_time * 1e3:.2f} ms, memory {self.memory['total'] / 2**30:.2f} GiB, "
            f"bubble {self.bubble:.1%}, MFU {self.mfu:.1%}; top: {top}"
        )


def _scaled(c: OpCost, s: float) -> OpCost:
    """``c`` on ``s`` times the work: a batched product gets more (or, split by TP, fewer) products of
    the same size; a single product (a linear over the flattened tokens) a larger one."""
    calls = c.calls * s if c.calls > 1 else c.calls
    return OpCost(c.name, c.flops * s, c.bytes * s, c.rule, c.phase, c.scope, c.passes, c.elements * s, calls, c.local)


def _split(c: OpCost, tp: int, block_scopes: bool, scopes: tuple | None = None) -> float:
    """The fraction of op ``c`` of the unsplit trace one of ``tp`` ranks runs. Megatron's split
    (``scopes`` None) divides the attention's and the MLP's work and, outside the blocks, the
    vocabulary-parallel embedding, output layer and loss; everything else runs whole on every rank:
    layer norms, residual adds (and their gradients' sums), the row-parallel biases' gradients, the
    position embedding."""
    if tp == 1 or c.name in TP_REPLICATED:
        return 1.0
    if c.name == "sum" and c.phase == "backward" and c.scope.endswith("c_proj"):
        return 1.0  # a row-parallel layer's bias is whole on every rank, and so is its gradient
    if scopes is not None:
        return 1.0 / tp if any(s in c.scope for s in scopes) else 1.0
    if block_scopes:
        if c.rule in ("elementwise", "per_element", "reduction") and not any(s in c.scope for s in ("attn", "mlp")):
            return 1.0  # residual adds at the block level
        return 1.0 / tp
    vocab = ("lm_head" in c.scope or "wte" in c.scope) or c.name.startswith("cross_entropy")
    return 1.0 / tp if vocab else 1.0


def _phase_times(ops, s: float, tp: int, device, block_scopes: bool = True, scopes=None, mode="graph") -> dict:
    out = {"forward": 0.0, "backward": 0.0}
    for c in ops:
        t = _scaled(c, s * _split(c, tp, block_scopes, scopes)).time(device, mode)
        out["backward" if c.phase == "backward" else "forward"] += t
    return out


def rank_ops(workload, tp: int, scopes: tuple | None = None) -> list:
    """The ops of one layer and of the rest as one of ``tp`` ranks runs them, each ``OpCost`` scaled by
    the share that rank does (a traced TP workload, ``workload.tp == tp``, as it is): ``(layer, rest)``."""
    share = 1 if workload.tp > 1 else tp
    layer = [_scaled(c, _split(c, share, True, scopes)) for c in workload.layer]
    rest = [_scaled(c, _split(c, share, False, scopes)) for c in workload.rest]
    return layer, rest


def _rank_params(w, tp: int, layers: int, scopes) -> float:
    """Parameters one rank of the largest stage holds: a traced TP workload's own; else the split
    fraction divided ``tp`` ways and the rest whole (a partial plan, ``scopes``: all divided, its
    caller corrects by group)."""
    if w.tp > 1 or tp == 1:
        return w.layer_params * layers + w.rest_params
    if scopes is not None:
        return (w.layer_params * layers + w.rest_params) / tp

    def share(f: float) -> float:
        return f / tp + (1.0 - f)

    return w.layer_params * layers * share(w.layer_tp_split) + w.rest_params * share(w.rest_tp_split)


def simulate(workload, cluster, strategy: Strategy, batch: int | None = None) -> Report:
    """Predict one training step of ``workload`` on ``cluster`` under ``strategy`` for a global ``batch``
    (samples; default: the workload's traced batch times ``dp``)."""
    w, st, dev = workload, strategy, cluster.device
    if st.ranks != cluster.devices:
        raise ValueError(f"strategy {st} uses {st.ranks} ranks but the cluster has {cluster.devices}")
    batch = w.batch * st.dp if batch is None else batch
    if batch % (st.dp * st.micro_batches):
        raise ValueError(f"global batch {batch} does not split into dp {st.dp} x {st.micro_batches} micro-batches")
    if w.n_layer % st.pp:
        raise ValueError(f"{w.n_layer} layers do not split into {st.pp} pipeline stages")
    if st.tp > 1 and w.n_head % st.tp:
        raise ValueError(f"tensor parallelism {st.tp} does not divide the {w.n_head} attention heads")
    if w.tp > 1 and (st.tp != w.tp or st.tp_scopes is not None):
        raise ValueError(
            f"the workload is one rank of a {w.tp}-way tensor-parallel split (Megatron's plan); it simulates "
            f"Strategy(tp={w.tp}) without tp_scopes, not {st} (tp_scopes={st.tp_scopes})"
        )
    mb = batch // (st.dp * st.micro_batches)
    s = mb / w.batch  # costs scale with the micro-batch
    layers = w.n_layer // st.pp
    mode = w.mode
    split_tp = 1 if w.tp > 1 else st.tp  # a traced TP workload is one rank's work already
    lt = _phase_times(w.layer, s, split_tp, dev, scopes=st.tp_scopes, mode=mode)
    rt = _phase_times(w.rest, s, split_tp, dev, block_scopes=False, scopes=st.tp_scopes, mode=mode)
    fwd_mb = layers * lt["forward"] + rt["forward"]
    bwd_mb = layers * lt["backward"] + rt["backward"]
    act_dtype = dev.dtype_bytes
    act_msg = mb * w.seq * w.hidden * act_dtype  # one block activation of a micro-batch
    # Megatron: 2 all-reduces per block in forward, 2 in backward, over tp adjacent ranks
    k = st.tp_collectives_per_layer
    tp_mb = k * layers * cluster.collective("all_reduce", act_msg, st.tp, 1) if st.tp > 1 else 0.0
    tp_vol_mb = k * layers * 2 * (st.tp - 1) / st.tp * act_msg if st.tp > 1 else 0.0
    if st.tp > 1 and st.tp_scopes is None:
        # the vocabulary-parallel embedding and head: the embedding's partial sums all-reduced
        # forward, the head's input gradient backward, and the cross-entropy's 3 all-reduces of one
        # value per token (row max, sum of exponentials, target logit); the stages holding them pay
        # them (with 2 blocks: 8 + 5 = 13 a step, what flow_dist.parallel's GPT plan issues)
        row_msg = mb * w.seq * act_dtype
        tp_mb += 2 * cluster.collective("all_reduce", act_msg, st.tp, 1)
        tp_mb += 3 * cluster.collective("all_reduce", row_msg, st.tp, 1)
        tp_vol_mb += 2 * (st.tp - 1) / st.tp * (2 * act_msg + 3 * row_msg)
    pp_mb = 2 * cluster.collective("send_recv", act_msg, 2, st.tp * st.dp) if st.pp > 1 else 0.0
    slot = fwd_mb + bwd_mb + tp_mb + pp_mb
    slots = st.micro_batches + st.pp - 1
    pipeline = slots * slot
    bubble = (st.pp - 1) / slots
    backward_total = st.micro_batches * bwd_mb
    forward_total = st.micro_batches * fwd_mb
    # parameters of the largest stage, per rank
    p_rank = _rank_params(w, st.tp, layers, st.tp_scopes)
    mixed = dev.dtype_bytes == 2
    pb, gb, ob = (2, 2, 12) if mixed else (4, 4, 8)
    grad_bytes = p_rank * gb
    dp_t = dp_vol = z_t = z_vol = 0.0
    if st.dp > 1:
        k = st.dp_buckets  # the gradients in k collectives of (about) equal size
        if st.zero_stage == 0:
            dp_t = k * cluster.collective("all_reduce", grad_bytes / k, st.dp, st.tp)
        else:  # reduce-scatter the gradients, all-gather the updated parameters
            dp_t = k * (
                cluster.collective("reduce_scatter", grad_bytes / k, st.dp, st.tp)
                + cluster.collective("all_gather", p_rank * pb / k, st.dp, st.tp)
            )
        dp_vol = 2 * (st.dp - 1) / st.dp * grad_bytes
        if st.zero_stage == 3:
            # the all-gather after the update becomes one before forward and one before backward
            z_t = cluster.collective("all_gather", p_rank * pb, st.dp, st.tp)
            z_vol = (st.dp - 1) / st.dp * p_rank * pb
    dp_exposed = max(0.0, dp_t - backward_total) if st.overlap else dp_t
    if st.dp > 1 and st.loss_collectives:
        dp_exposed += st.loss_collectives * cluster.collective("all_reduce", 8.0, st.dp, st.tp)
    z_exposed = max(0.0, z_t - forward_total) if st.overlap else z_t
    # the traced update covers the whole model's (or, traced per TP rank, one rank's) parameters: this
    # rank updates its stage's share of them, replicated ones whole, and a 1/dp shard under ZeRO
    whole = _rank_params(w, 1, w.n_layer, None)
    opt_share = _rank_params(w, st.tp, w.n_layer, st.tp_scopes) / max(whole, 1) / st.pp
    opt_share /= st.dp if st.zero_stage >= 1 else 1
    opt_t = sum(_scaled(c, opt_share).time(dev, mode) for c in w.optimizer)  # fp32 states either way
    step = pipeline + dp_exposed + z_exposed + opt_t
    compute = st.micro_batches * (fwd_mb + bwd_mb) + opt_t
    # memory per rank
    shard_p = st.dp if st.zero_stage >= 3 else 1
    shard_g = st.dp if st.zero_stage >= 2 else 1
    shard_o = st.dp if st.zero_stage >= 1 else 1
    in_flight = min(st.micro_batches, st.pp)  # 1F1B: the first stage holds p micro-batches
    act_scale = s * act_dtype / w.trace_dtype_bytes
    act_tp = split_tp  # saved activations of the unsplit trace divided as Megatron's (no sequence parallelism)
    acts = in_flight * act_scale * (layers * w.layer_activation_bytes / act_tp + w.rest_activation_bytes / act_tp)
    memory = {
        "parameters": p_rank * pb / shard_p,
        "gradients": grad_bytes / shard_g,
        "optimizer": p_rank * ob / shard_o,
        "activations": acts,
    }
    memory["total"] = sum(memory.values())
    comm = {"tp": st.micro_batches * tp_mb, "pp": st.micro_batches * pp_mb, "dp": dp_exposed, "zero": z_exposed}
    volume = {
        "tp": st.micro_batches * tp_vol_mb,
        "pp": st.micro_batches * 2 * act_msg if st.pp > 1 else 0.0,
        "dp": dp_vol,
        "zero": 2 * z_vol,
    }
    # the critical path: the largest op kinds of the slowest stage, the collectives, the bubble
    by: dict = {}
    for ops, mult in ((w.layer, layers), (w.rest, 1)):
        for c in ops:
            t = _scaled(c, s * _split(c, split_tp, ops is w.layer, st.tp_scopes)).time(dev, mode)
            t *= mult * st.micro_batches
            by[c.name] = by.get(c.name, 0.0) + t
    by["optimizer update"] = opt_t
    for k, v in comm.items():
        if v:
            by[f"{k} collectives"] = v
    if st.pp > 1:
        by["pipeline bubble"] = (st.pp - 1) * slot
    crit = sorted(((k, v) for k, v in by.items() if v > 0), key=lambda kv: -kv[1])
    flops = w.flops() * batch / w.batch
    return Report(
        st,
        step,
        compute,
        comm,
        memory,
        volume,
        bubble,
        crit,
        batch * w.seq / step,
        flops / (step * cluster.devices * dev.flops),
    )


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def search(workload, cluster, batch: int, memory_cap: float | None = None, zero_stages=(0, 1, 2, 3)):
    """The fastest :class:`Report` over (dp, tp, pp, micro_batches, zero) whose memory fits ``memory_cap``
    (default: the device's memory); tp stays within a node. Micro-batches are a pipeline's, or
    gradient accumulation without one (it only saves memory, so it wins only where the step would
    not fit without it). ``None`` when nothing fits."""
    cap = cluster.device.memory if memory_cap is None else memory_cap
    rows = explore(workload, cluster, batch, cap, zero_stages)
    return rows[0] if rows and rows[0].fits(cap) else None


def explore(workload, cluster, batch: int, memory_cap: float | None = None, zero_stages=(0, 1, 2, 3)) -> list:
    """The best :class:`Report` of every mesh shape ``(tp, pp)`` (over dp = the rest, micro-batches and
    ZeRO stages; the fastest that fits the cap, else the one needing the least memory), fastest
    first: what :func:`search` chose among, to explain its choice. A shape no strategy fits is
    listed with ``Report.fits(cap)`` false."""
    cap = cluster.device.memory if memory_cap is None else memory_cap
    n, rows = cluster.devices, []
    for tp in _divisors(min(n, cluster.gpus_per_node)):
        if workload.n_head % tp:
            continue
        for pp in _divisors(n // tp):
            dp = n // tp // pp
            if workload.n_layer % pp or batch % dp:
                continue
            best = None
            for m, z in itertools.product(_divisors(batch // dp), zero_stages):
                if z and dp == 1:
                    continue
                r = simulate(workload, cluster, Strategy(dp, tp, pp, m, z), batch)
                key = (r.fits(cap), -r.step_time if r.fits(cap) else -r.memory["total"])
                if best is None or key > best[0]:
                    best = (key, r)
            if best is not None:
                rows.append(best[1])
    return sorted(rows, key=lambda r: (not r.fits(cap), r.step_time))
