"""A workload: the traced costs of one training step, split into repeated layers and the rest.

:func:`trace_step` traces ``loss_fn(model(*inputs), target)``, backward and the optimizer update into
flow-core's graph IR (the compiled step of an ``nn.Graph``, not run). :func:`workload_from_ir`
groups its nodes by the layer their scope names (``layer_pattern``, e.g. ``.h.0`` of a GPT) so
that :mod:`.simulate` can give each pipeline stage its layers and scale to deeper models: a model
of ``n_layer`` layers costs ``rest + n_layer * (mean traced layer)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from flow_dist.plan.cost import OpCost, _tensor_bytes, op_cost

GPT_LAYER = r"\.h\.(\d+)(?:\.|$)"


@dataclass
class Workload:
    """Costs of one step on ``batch`` samples of ``seq`` tokens (``layer``: one mean layer's ops)."""

    name: str
    batch: int
    seq: int
    hidden: int
    n_layer: int
    layer: list = field(default_factory=list)  # OpCost of one layer, forward and backward
    rest: list = field(default_factory=list)  # OpCost outside the layers (embeddings, head, loss)
    optimizer: list = field(default_factory=list)  # OpCost of the update (independent of the batch)
    layer_params: int = 0
    rest_params: int = 0
    layer_activation_bytes: float = 0.0  # saved for backward per layer, for ``batch`` samples
    rest_activation_bytes: float = 0.0
    trace_dtype_bytes: int = 4
    n_head: int = 1
    mode: str = "graph"  # how the step runs: "graph" (nn.Graph), "eager", or "global" (eager global tensors)
    # > 1: the trace is already one rank's share of a ``tp``-way tensor-parallel split (plan.tp_trace);
    # simulate() then costs it as it is instead of dividing the unsplit model's ops
    tp: int = 1
    # of an unsplit trace: the fraction of the layer's and of the rest's parameters a Megatron split
    # divides (the rest stays whole on every TP rank: layer norms, row-parallel biases, positions)
    layer_tp_split: float = 1.0
    rest_tp_split: float = 1.0

    @property
    def params(self) -> int:
        return self.layer_params * self.n_layer + self.rest_params

    def flops(self) -> float:
        """FLOPs of a whole step (every layer) on ``batch`` samples."""
        return sum(c.flops for c in self.rest + self.optimizer) + self.n_layer * sum(c.flops for c in self.layer)


def trace_step(model, inputs: tuple, target, loss_fn, optimizer, fusion: bool = False):
    """The :class:`flow.graph.GraphIR` of one training step (forward, backward, optimizer), traced, not run.

    Fusion is off by default so that every op keeps its own formula."""
    import flow

    class _Step(flow.nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)

        def build(self, inputs, target):
            loss = loss_fn(self.model(*inputs), target)
            loss.backward()
            return loss

    g = _Step()
    g.config.enable_fusion(fusion)
    return g._compile((tuple(inputs), target), {}).ir


class _One:
    """A one-element stand-in value, to read a dtype's item size."""

    shape = ()

    def __init__(self, dtype) -> None:
        self.dtype = dtype


def _layer_of(scope: str, pattern) -> int | None:
    m = pattern.search(scope)
    return int(m.group(1)) if m else None


def workload_from_ir(
    ir,
    *,
    name: str,
    batch: int,
    seq: int,
    hidden: int,
    params: dict,
    n_layer: int | None = None,
    n_head: int = 1,
    layer_pattern: str = GPT_LAYER,
) -> Workload:
    """Split a traced step into layers (nodes whose scope matches ``layer_pattern``) and the rest.

    ``params``: parameter name -> element count (names matching the pattern are per-layer);
    ``n_layer``: the layers of the real model (default: those traced)."""
    pat = re.compile(layer_pattern)
    per_layer: dict = {}
    rest, opt = [], []
    node_layer: dict = {}
    for nd in ir.nodes:
        c = op_cost(nd)
        if c.phase == "optimizer" or c.rule == "optimizer":
            opt.append(c)
            continue
        li = _layer_of(nd.scope, pat)
        node_layer[nd.id] = li
        (per_layer.setdefault(li, []) if li is not None else rest).append(c)
    traced = len(per_layer)
    if batch < 1 or seq < 1:
        raise ValueError(f"workload_from_ir: batch and seq must be >= 1, got {batch}, {seq}")
    # activations: forward outputs that a backward node reads stay alive until backward
    saved: dict = {}
    for nd in ir.nodes:
        if nd.tags.get("phase") != "backward":
            continue
        for v in nd.input_values():
            p = v.producer
            if v.kind == "node" and p is not None and p.tags.get("phase") == "forward" and op_cost(p).rule != "view":
                saved[v.id] = (node_layer.get(p.id), _tensor_bytes(v))
    act_layer = sum(b for li, b in saved.values() if li is not None)
    act_rest = sum(b for li, b in saved.values() if li is None)
    layer = []
    if traced:
        # the mean layer: average each op position over the traced layers (they are identical blocks)
        ref = per_layer[min(per_layer)]
        for i, c in enumerate(ref):
            same = [per_layer[k][i] for k in per_layer if len(per_layer[k]) == len(ref)]
            layer.append(
                OpCost(
                    c.name,
                    sum(x.flops for x in same) / len(same),
                    sum(x.bytes for x in same) / len(same),
                    c.rule,
                    c.phase,
                    c.scope,
                    c.passes,
                    sum(x.elements for x in same) / len(same),
                    c.calls,
                    c.local,
                )
            )
    lp = sum(n for k, n in params.items() if pat.search("." + k)) / max(traced, 1)
    rp = sum(n for k, n in params.items() if not pat.search("." + k))
    n_layer = traced if n_layer is None else n_layer
    # the optimizer of the real model: scale the traced update by its parameter count
    scale = (rp + lp * n_layer) / max(rp + lp * traced, 1)
    opt = [
        OpCost(c.name, c.flops * scale, c.bytes * scale, c.rule, c.phase, c.scope, c.passes, c.elements * scale)
        for c in opt
    ]
    floats = [o.dtype for nd in ir.nodes for o in nd.outputs if nd.name == "matmul"]
    trace_bytes = _tensor_bytes(_One(floats[0])) if floats else 4
    return Workload(
        name,
        batch,
        seq,
        hidden,
        n_layer,
        layer,
        rest,
        opt,
        int(lp),
        int(rp),
        act_layer / max(traced, 1),
        act_rest,
        trace_bytes,
        n_head,
    )


def gpt_workload(config=None, seq: int | None = None, trace_layers: int = 1, name: str = "gpt") -> Workload:
    """A zoo GPT (:class:`flow_models.nlp.gpt.GPTConfig`) traced with ``trace_layers`` blocks on one sample
    of ``seq`` tokens under AdamW; the real depth is ``config.n_layer``."""
    import dataclasses

    import numpy as np

    import flow
    from flow_models.nlp.gpt import GPT, GPTConfig

    cfg = config or GPTConfig()
    seq = seq or cfg.block_size
    if seq > cfg.block_size:
        raise ValueError(f"gpt_workload: seq {seq} is longer than block_size {cfg.block_size}")
    small = dataclasses.replace(cfg, n_layer=min(trace_layers, cfg.n_layer), dropout=0.0)
    model = GPT(small)
    opt = flow.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    x = flow.tensor(np.zeros((1, seq), dtype=np.int64))
    y = flow.tensor(np.zeros((seq,), dtype=np.int64))

    def loss_fn(logits, target):
        return flow.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target)

    ir = trace_step(model, (x,), y, loss_fn, opt)
    seen, params = set(), {}
    for k, p in model.named_parameters():
        if id(p) not in seen:  # the tied lm_head weight counts once
            seen.add(id(p))
            params[k] = int(np.prod(p.shape))
    w = workload_from_ir(
        ir,
        name=name,
        batch=1,
        seq=seq,
        hidden=cfg.n_embd,
        params=params,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
    )
    layer_split = sum(n for k, n in params.items() if re.search(GPT_LAYER, "." + k) and _megatron_split(k))
    rest_split = sum(n for k, n in params.items() if not re.search(GPT_LAYER, "." + k) and _megatron_split(k))
    traced = max(1, min(trace_layers, cfg.n_layer))
    return dataclasses.replace(
        w,
        layer_tp_split=layer_split / traced / max(w.layer_params, 1),
        rest_tp_split=rest_split / max(w.rest_params, 1),
    )


def _megatron_split(name: str) -> bool:
    """Whether Megatron's plan of the zoo GPT (``flow_dist.parallel.gpt_plan``) splits parameter ``name``:
    the attention's ``c_attn`` and the MLP's ``c_fc`` (weights and biases), both ``c_proj`` weights and
    the token table (tied to the output layer)."""
    return (
        name.endswith(("c_attn.weight", "c_attn.bias", "c_fc.weight", "c_fc.bias", "c_proj.weight"))
        or name == "transformer.wte.weight"
    )
