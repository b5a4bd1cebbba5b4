"""GPT-2-style decoder-only Transformer language model (Radford et al., 2019).

The module tree is Hugging Face's ``GPT2LMHeadModel`` (``transformer.wte``, ``transformer.h.0.attn.c_attn``,
``transformer.ln_f``, ``lm_head``), with ``nn.Linear`` in place of HF's transposed ``Conv1D``, so HF
weights load through :func:`flow_models.convert.load_hf_gpt2`. ``gpt2`` is the 124M model (124,439,808
parameters with the output layer tied to the token embedding); ``gpt2-char`` a small character-level
model for CPU training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import flow
import flow.nn.functional as F
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["GPTConfig", "GPT", "gpt_input"]


@dataclass
class GPTConfig:
    """GPT-2 hyper-parameters (defaults: the 124M model)."""

    vocab_size: int = 50257
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    tie_weights: bool = True
    layer_norm_eps: float = 1e-5


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention with one fused ``c_attn`` (q, k, v) projection."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"GPTConfig.n_embd {cfg.n_embd} is not divisible by n_head {cfg.n_head}")
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.reshape(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, C)))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.act = nn.GELU(approximate="tanh")  # GPT-2's "gelu_new"
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm decoder block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(ZooModel):
    """GPT-2-style causal language model: token ids ``(B, T)`` -> next-token logits ``(B, T, vocab_size)``.

    ``loss(logits, targets)`` is the token-level cross-entropy (targets ``-100`` are ignored);
    ``generate(idx, max_new_tokens, temperature, top_k)`` samples a continuation.
    """

    def __init__(self, config: GPTConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or GPTConfig()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
                wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
                drop=nn.Dropout(cfg.dropout),
                h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
                ln_f=nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps, bias=cfg.bias),
            )
        )
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        # GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer)
        for name, m in self.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj") else 0.02
                if not (cfg.tie_weights and m is self.lm_head):
                    nn.init.normal_(m.weight, 0.0, std)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
        if cfg.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx: flow.Tensor) -> flow.Tensor:
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"GPT: sequence of length {T} is longer than block_size {self.config.block_size}")
        pos = flow.arange(T, dtype=flow.int64, device=idx.device)
        if idx.is_global:  # the same positions on every rank of a global batch
            pos = pos.to_global(idx.placement, tuple(flow.sbp.broadcast for _ in idx.sbp))
        tr = self.transformer
        x = tr.drop(tr.wte(idx) + tr.wpe(pos))
        for block in tr.h:
            x = block(x)
        return self.lm_head(tr.ln_f(x))

    def loss(self, logits: flow.Tensor, targets: flow.Tensor) -> flow.Tensor:
        """Mean next-token cross-entropy over every position whose target is not ``-100``."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)

    def generate(
        self,
        idx: flow.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: flow.Generator | None = None,
    ) -> flow.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``idx`` ``(B, T)`` and return ``(B, T + max_new_tokens)``.

        Logits are divided by ``temperature`` (``0`` picks the most likely token, greedily) and,
        with ``top_k``, all but the ``top_k`` most likely tokens are excluded. The context is
        cropped to the last ``block_size`` tokens. Runs in eval mode without autograd.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        was_training = self.training
        self.eval()
        try:
            with flow.no_grad():
                for _ in range(max_new_tokens):
                    ctx = idx if idx.shape[1] <= self.config.block_size else idx[:, -self.config.block_size :]
                    logits = self(ctx)[:, -1, :]
                    if temperature == 0:
                        nxt = logits.argmax(dim=-1, keepdim=True)
                    else:
                        logits = logits / temperature
                        if top_k is not None:
                            v, _ = flow.topk(logits, min(int(top_k), logits.shape[-1]))
                            logits = logits.masked_fill(logits < v[:, -1:], float("-inf"))
                        nxt = flow.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
                    idx = flow.cat([idx, nxt.to(idx.dtype)], dim=1)
        finally:
            self.train(was_training)
        return idx


def gpt_input(config: GPTConfig) -> DataSpec:
    """What a GPT takes: windows of token ids (at most ``block_size`` long), to predict each next token."""
    return DataSpec("lm", "tokens", (None,))
