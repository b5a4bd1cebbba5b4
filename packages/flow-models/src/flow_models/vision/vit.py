"""Vision Transformer (Dosovitskiy et al., 2021) with timm's module names.

An image is cut into ``patch_size`` x ``patch_size`` patches, each embedded linearly, a class
token and learned position embeddings added, and a pre-norm Transformer encoder applied; the
class token's final state is classified. ``vit-tiny`` / ``vit-small`` are timm's
``vit_tiny_patch16_224`` / ``vit_small_patch16_224`` (same names: ``patch_embed.proj``,
``cls_token``, ``pos_embed``, ``blocks.0.attn.qkv``, ``blocks.0.mlp.fc1``, ``norm``, ``head``).
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
import flow.nn.functional as F
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["ViTConfig", "VisionTransformer", "vit_input"]


@dataclass
class ViTConfig:
    """ViT hyper-parameters (defaults: ViT-Tiny/16 at 224x224)."""

    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    embed_dim: int = 192
    depth: int = 12
    num_heads: int = 3
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    layer_norm_eps: float = 1e-6


class PatchEmbed(nn.Module):
    """A strided convolution that turns ``(N, C, H, W)`` into ``(N, num_patches, embed_dim)``."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        if cfg.image_size % cfg.patch_size:
            raise ValueError(f"ViT image_size {cfg.image_size} is not a multiple of patch_size {cfg.patch_size}")
        self.num_patches = (cfg.image_size // cfg.patch_size) ** 2
        self.proj = nn.Conv2d(cfg.in_channels, cfg.embed_dim, cfg.patch_size, stride=cfg.patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    """Multi-head self-attention with one fused ``qkv`` projection."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool, attn_dropout: float, dropout: float) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"embed_dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.attn_dropout = attn_dropout
        self.proj_drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout if self.training else 0.0)
        return self.proj_drop(self.proj(y.transpose(1, 2).reshape(B, T, C)))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Block(nn.Module):
    """Pre-norm Transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        d = cfg.embed_dim
        self.norm1 = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.attn = Attention(d, cfg.num_heads, cfg.qkv_bias, cfg.attn_dropout, cfg.dropout)
        self.norm2 = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.mlp = Mlp(d, int(d * cfg.mlp_ratio), cfg.dropout)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(ZooModel):
    """ViT image classifier; input ``(N, C, image_size, image_size)``, output logits."""

    def __init__(self, config: ViTConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or ViTConfig()
        self.patch_embed = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(flow.zeros(1, 1, cfg.embed_dim))
        self.pos_embed = nn.Parameter(flow.zeros(1, self.patch_embed.num_patches + 1, cfg.embed_dim))
        self.pos_drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.Sequential(*[Block(cfg) for _ in range(cfg.depth)])
        self.norm = nn.LayerNorm(cfg.embed_dim, eps=cfg.layer_norm_eps)
        self.head = nn.Linear(cfg.embed_dim, cfg.num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02, a=-0.04, b=0.04)
        nn.init.normal_(self.cls_token, std=1e-6)
        for m in self.modules():  # timm's initialisation
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02, a=-0.04, b=0.04)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward_features(self, x: flow.Tensor) -> flow.Tensor:
        """The final (normalised) token states ``(N, 1 + num_patches, embed_dim)``."""
        x = self.patch_embed(x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.pos_drop(flow.cat([cls, x], dim=1) + self.pos_embed)
        return self.norm(self.blocks(x))

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        return self.head(self.forward_features(x)[:, 0])


def vit_input(config: ViTConfig) -> DataSpec:
    """What a ViT takes: images of exactly ``in_channels x image_size x image_size`` (its position
    embeddings are one per patch); ``image_size`` must be a multiple of ``patch_size``."""
    if config.image_size % config.patch_size:
        raise ValueError(
            f"ViT image_size {config.image_size} is not a multiple of patch_size {config.patch_size} "
            "(set --model-arg patch_size=... to one that divides it)"
        )
    return DataSpec("classification", "image", (config.in_channels, config.image_size, config.image_size))
