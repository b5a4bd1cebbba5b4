"""One rank's share of a tensor-parallel GPT step, traced: what the simulator costs TP from.

``flow_dist.parallel.tensor_parallel(model, mesh, "gpt")`` (Megatron's split) leaves every rank a
step of local kernels on its shards. Dividing the unsplit model's trace by the TP degree misses
the work that is not split: the layer norms, residual adds, position embedding and the
row-parallel biases run whole on every rank, the vocabulary-parallel embedding and cross-entropy
add masking and log-sum-exp ops of their own, and every op (split or not) pays its fixed dispatch
cost on every rank. :func:`tp_workload` builds the local model one rank of ``tp`` runs, as plain
single-process modules with the shards' shapes, and traces its training step like
:func:`~flow_dist.plan.workload.gpt_workload` does, so each of those ops is costed where it runs.

The local model mirrors the split: per block ``ln_1`` whole, ``c_attn`` ``C -> 3C/tp`` (the
rank's heads), attention on ``n_head/tp`` heads, ``c_proj`` ``C/tp -> C`` with the whole bias
(the all-reduce between is the identity in one process and is costed by the simulator), residual
add whole, ``ln_2`` whole, ``c_fc`` ``C -> 4C/tp``, GELU on ``4C/tp``, ``c_proj`` ``4C/tp -> C``;
the token embedding a table of ``vocab/tp`` rows looked up with the ids outside it masked (as
``flow_dist.rules.nn``'s vocabulary-parallel embedding), the tied output layer ``C -> vocab/tp``
and the cross-entropy as ``flow_dist.rules.vocab_loss`` computes it on a rank (the local
log-sum-exp, the target logit among the rank's columns, their combination per row). Not
mirrored: the layout hooks' conversions themselves (a broadcast-to-split is a local slice; the
all-reduces are the simulator's collectives) and the global handler's work per op, which the
device profile's ``global_overhead`` charges per traced op (mode ``"global"``).
"""

from __future__ import annotations

import dataclasses

__all__ = ["tp_workload", "tp_shard_model"]

LOCAL_SCOPE = "vocab_parallel"  # the scope of the ops flow_dist runs inside a global op's local function


def _shard_classes():
    """The local modules (built lazily: flow imports only when a TP workload is asked for)."""
    import flow
    import flow.nn.functional as F
    from flow import nn

    class ShardAttention(nn.Module):
        """One rank's heads: q, k, v of ``n_head / tp`` heads, then the row-parallel ``c_proj``."""

        def __init__(self, cfg, tp: int) -> None:
            super().__init__()
            self.n_head = cfg.n_head // tp
            self.local = cfg.n_embd // tp
            self.c_attn = nn.Linear(cfg.n_embd, 3 * self.local, bias=cfg.bias)
            self.c_proj = nn.Linear(self.local, cfg.n_embd, bias=cfg.bias)

        def forward(self, x):
            B, T, _ = x.shape
            C = self.local
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.reshape(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    class ShardMLP(nn.Module):
        def __init__(self, cfg, tp: int) -> None:
            super().__init__()
            self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd // tp, bias=cfg.bias)
            self.act = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * cfg.n_embd // tp, cfg.n_embd, bias=cfg.bias)

        def forward(self, x):
            return self.c_proj(self.act(self.c_fc(x)))

    class ShardBlock(nn.Module):
        def __init__(self, cfg, tp: int) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias)
            self.attn = ShardAttention(cfg, tp)
            self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias)
            self.mlp = ShardMLP(cfg, tp)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class VocabEmbedding(nn.Module):
        """The local function of flow_dist's vocabulary-parallel embedding (``rules.nn``)."""

        def forward(self, ids, weight):
            inside = (ids >= 0) & (ids < weight.shape[0])
            local = flow.where(inside, ids, flow.zeros_like(ids))
            out = F.embedding(local, weight)
            return out * inside.unsqueeze(-1).to(out.dtype)

    class VocabLoss(nn.Module):
        """The local function of flow_dist's vocabulary-parallel cross-entropy (``rules.vocab_loss``)."""

        def forward(self, logits, target):
            return vocab_parallel_loss(logits, target)

    class ShardEmbedding(nn.Module):
        """The rank's ``vocab / tp`` rows of the token table (rank 0's: rows ``0 .. vocab/tp``)."""

        def __init__(self, rows: int, dim: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(flow.randn(rows, dim) * 0.02)
            self.vocab_parallel = VocabEmbedding()

        def forward(self, ids):
            return self.vocab_parallel(ids, self.weight)

    class ShardGPT(nn.Module):
        """The local model of one of ``tp`` ranks; module names as the zoo GPT's (``transformer.h.<i>``),
        so :func:`~flow_dist.plan.workload.workload_from_ir` groups its ops by block."""

        def __init__(self, cfg, tp: int) -> None:
            super().__init__()
            self.config, self.tp = cfg, tp
            self.transformer = nn.ModuleDict(
                dict(
                    wte=ShardEmbedding(cfg.vocab_size // tp, cfg.n_embd),
                    wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
                    h=nn.ModuleList([ShardBlock(cfg, tp) for _ in range(cfg.n_layer)]),
                    ln_f=nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias),
                )
            )
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size // tp, bias=False)
            self.lm_head.weight = self.transformer.wte.weight  # tied, as the zoo GPT
            self.vocab_parallel = VocabLoss()  # called by tp_workload's loss, for its scope

        def forward(self, idx):
            _, T = idx.shape
            tr = self.transformer
            x = tr.wte(idx) + tr.wpe(flow.arange(T, dtype=flow.int64))
            for block in tr.h:
                x = block(x)
            return self.lm_head(tr.ln_f(x))

    return ShardGPT


def vocab_parallel_loss(logits, target):
    """The mean cross-entropy of a rank's columns ``logits`` ``(N, vocab/tp)`` as
    ``flow_dist.rules.vocab_loss`` computes it on one rank (its all-sums are the identity here)."""
    import flow

    lse = logits.logsumexp(dim=1)  # the rank's log-sum-exp; the all-sum of the one-hot rows follows
    every = (lse.unsqueeze(1) * flow.ones(1, 1, dtype=logits.dtype)).logsumexp(dim=1)
    cols = logits.shape[1]
    inside = (target >= 0) & (target < cols)
    lt = flow.where(inside, target, flow.zeros_like(target))
    picked = logits.gather(1, lt.unsqueeze(1)).squeeze(1) * inside.to(logits.dtype)
    valid = (target != -100).to(logits.dtype)
    rows = (every - picked) * valid
    return rows.sum() / valid.sum()


def tp_shard_model(config, tp: int):
    """One rank's local model of the zoo GPT ``config`` split ``tp`` ways (Megatron's plan)."""
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise ValueError(f"tp_shard_model: tp must be an int >= 1, got {tp!r}")
    for what, n in (("n_head", config.n_head), ("n_embd", config.n_embd), ("vocab_size", config.vocab_size)):
        if n % tp:
            raise ValueError(f"tp_shard_model: tensor parallelism {tp} does not divide the GPT's {what} {n}")
    return _shard_classes()(config, tp)


def tp_workload(config, tp: int, seq: int | None = None, trace_layers: int = 1, name: str = "gpt", mode="global"):
    """The :class:`~flow_dist.plan.workload.Workload` of one rank of a ``tp``-way tensor-parallel zoo GPT
    (``config``), traced from :func:`tp_shard_model` on one sample of ``seq`` tokens under AdamW.

    Its costs, parameters and activations are per rank already (``Workload.tp == tp``), so
    :func:`~flow_dist.plan.simulate.simulate` does not divide them again; ``n_head`` is the whole
    model's. ``mode``: ``"global"`` (eager global tensors, how ``tensor_parallel`` runs) or ``"graph"``."""
    import numpy as np

    import flow
    from flow_dist.plan.workload import trace_step, workload_from_ir

    seq = seq or config.block_size
    if seq > config.block_size:
        raise ValueError(f"tp_workload: seq {seq} is longer than block_size {config.block_size}")
    small = dataclasses.replace(config, n_layer=min(trace_layers, config.n_layer), dropout=0.0)
    model = tp_shard_model(small, tp)
    opt = flow.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    x = flow.tensor(np.zeros((1, seq), dtype=np.int64))
    y = flow.tensor(np.zeros((seq,), dtype=np.int64))

    def loss_fn(logits, target):
        return model.vocab_parallel(logits.reshape(-1, logits.shape[-1]), target)

    ir = trace_step(model, (x,), y, loss_fn, opt)
    seen, params = set(), {}
    for k, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params[k] = int(np.prod(p.shape))
    w = workload_from_ir(
        ir,
        name=name,
        batch=1,
        seq=seq,
        hidden=config.n_embd,
        params=params,
        n_layer=config.n_layer,
        n_head=config.n_head,
    )
    # the ops of the local functions run inside one global op each: a local op's dispatch cost
    rest = [dataclasses.replace(c, local=True) if LOCAL_SCOPE in c.scope else c for c in w.rest]
    return dataclasses.replace(w, rest=rest, tp=tp, mode=mode)
