"""Cutting a model into pipeline stages: this rank's stage module.

Every rank builds the whole model (the same seed gives the same parameters) and keeps its
stage's part. Parameter names stay those of the whole model (``transformer.h.3.attn...``), so a
stage's ``state_dict`` is a piece of the model's.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import flow
from flow import nn
from flow_dist import env
from flow_dist.pipeline.stage import PipelineError

__all__ = ["split_sequential", "gpt_stages", "stage_bounds"]


def stage_bounds(n_items: int, num_stages: int) -> list:
    """``(start, stop)`` of each stage's items: contiguous, the earlier stages one longer where
    ``n_items`` does not divide (as ``numpy.array_split``)."""
    if not isinstance(num_stages, int) or num_stages < 1:
        raise PipelineError(f"num_stages must be a positive int, got {num_stages!r}")
    if n_items < num_stages:
        raise PipelineError(f"{n_items} layer(s) do not fill {num_stages} pipeline stages")
    q, r = divmod(n_items, num_stages)
    out, start = [], 0
    for s in range(num_stages):
        stop = start + q + (1 if s < r else 0)
        out.append((start, stop))
        start = stop
    return out


def _stage_index(stage_index: int | None, num_stages: int) -> int:
    # the default is pipeline_mesh's layout: consecutive ranks run consecutive stages
    s = env.get_rank() % num_stages if stage_index is None else stage_index
    if not isinstance(s, int) or not 0 <= s < num_stages:
        raise PipelineError(f"stage_index {s!r} is not in 0..{num_stages - 1}")
    return s


def split_sequential(
    modules: nn.Sequential | Sequence[nn.Module], num_stages: int, stage_index: int | None = None
) -> nn.Sequential:
    """Stage ``stage_index`` (default: this rank's, ``rank % num_stages``) of ``modules`` cut into
    ``num_stages`` contiguous runs of layers, as an ``nn.Sequential`` keeping the layers' names."""
    if isinstance(modules, nn.Sequential):
        items = list(modules.named_children())
    elif isinstance(modules, (list, tuple)):
        items = [(str(i), m) for i, m in enumerate(modules)]
    else:
        raise PipelineError(
            f"split_sequential: modules must be an nn.Sequential or a list, got {type(modules).__name__}"
        )
    for name, m in items:
        if not isinstance(m, nn.Module):
            raise PipelineError(f"split_sequential: layer {name} is a {type(m).__name__}, not an nn.Module")
    bounds = stage_bounds(len(items), num_stages)
    start, stop = bounds[_stage_index(stage_index, num_stages)]
    return nn.Sequential(OrderedDict(items[start:stop]))


class GPTStage(nn.Module):
    """A run of the zoo GPT's blocks, with the embeddings on the first stage and ``ln_f`` and the
    LM head on the last: token ids -> hidden states -> ... -> logits."""

    def __init__(self, gpt: nn.Module, first: bool, last: bool, blocks: range) -> None:
        super().__init__()
        tr = gpt.transformer
        self.first, self.last = first, last
        parts = {}
        if first:
            parts.update(wte=tr.wte, wpe=tr.wpe, drop=tr.drop)
        # a ModuleDict keyed by the blocks' indices in the whole model, so the names stay its names
        parts["h"] = nn.ModuleDict({str(i): tr.h[i] for i in blocks})
        if last:
            parts["ln_f"] = tr.ln_f
        self.transformer = nn.ModuleDict(parts)
        if last:
            self.lm_head = gpt.lm_head
        tied = gpt.lm_head.weight is tr.wte.weight
        # across stages the token embedding and the LM head are two copies of one parameter
        self.tied_parameters = [tr.wte.weight] if tied and (first != last) else []

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        tr = self.transformer
        if self.first:
            T = x.shape[1]
            pos = flow.arange(T, dtype=flow.int64, device=x.device)
            x = tr.drop(tr.wte(x) + tr.wpe(pos))
        for block in tr.h.values():
            x = block(x)
        if self.last:
            x = self.lm_head(tr.ln_f(x))
        return x


def gpt_stages(gpt: nn.Module, num_stages: int, stage_index: int | None = None) -> GPTStage:
    """Stage ``stage_index`` (default: this rank's, ``rank % num_stages``) of the zoo GPT
    (:class:`flow_models.nlp.gpt.GPT`) cut into ``num_stages``: the blocks split evenly, the
    embeddings before the first stage's blocks, ``ln_f`` and ``lm_head`` after the last's. With tied
    weights the first and the last stage each hold a copy of ``wte.weight`` (the module's
    ``tied_parameters``, which :class:`PipelineStage` keeps equal)."""
    tr = getattr(gpt, "transformer", None)
    if tr is None or not hasattr(gpt, "lm_head") or not all(k in tr for k in ("wte", "wpe", "h", "ln_f")):
        raise PipelineError(
            f"gpt_stages: {type(gpt).__name__} is not the zoo GPT (transformer.wte/wpe/h/ln_f, lm_head)"
        )
    s = _stage_index(stage_index, num_stages)
    start, stop = stage_bounds(len(tr.h), num_stages)[s]
    return GPTStage(gpt, s == 0, s == num_stages - 1, range(start, stop))
