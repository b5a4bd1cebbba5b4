"""DLRM (Naumov et al., 2019): the deep learning recommendation model for click-through prediction.

Dense features go through a bottom MLP; each categorical feature is pooled from its own
EmbeddingBag table; all these vectors interact through pairwise dot products, and the top MLP
turns the dense vector and the interactions into a click logit. Module names follow the
reference implementation (``emb_l``, ``bot_l``, ``top_l``). ``dlrm`` is the benchmark
configuration: 13 dense features, 8 tables of 100,000 x 64.
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.recsys._common import bce_loss, lookup, mlp
from flow_models.registry import ZooModel

__all__ = ["DLRMConfig", "DLRM", "dlrm_input"]


@dataclass
class DLRMConfig:
    """DLRM hyper-parameters. ``bottom_mlp[-1]`` must equal ``embedding_dim``; ``top_mlp[-1]`` is 1."""

    num_dense: int = 13
    table_sizes: tuple = (100_000,) * 8
    embedding_dim: int = 64
    bottom_mlp: tuple = (512, 256, 64)
    top_mlp: tuple = (512, 256, 1)
    interaction: str = "dot"  # "dot" or "cat"
    self_interaction: bool = False
    pooling: str = "sum"


class DLRM(ZooModel):
    """DLRM: ``(dense (B, num_dense) float, sparse ids)`` -> click logits ``(B, 1)``.

    ``sparse`` is ``(B, num_tables)`` ids, ``(B, num_tables, bag)`` bags or one entry per table
    (see :func:`flow_models.recsys._common.lookup`). ``loss`` is binary cross-entropy with logits.
    """

    def __init__(self, config: DLRMConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or DLRMConfig()
        d = cfg.embedding_dim
        if cfg.bottom_mlp[-1] != d:
            raise ValueError(f"DLRMConfig.bottom_mlp must end in embedding_dim={d}, got {cfg.bottom_mlp}")
        if cfg.interaction not in ("dot", "cat"):
            raise ValueError(f"DLRMConfig.interaction must be 'dot' or 'cat', got {cfg.interaction!r}")
        self.emb_l = nn.ModuleList([nn.EmbeddingBag(n, d, mode=cfg.pooling) for n in cfg.table_sizes])
        self.bot_l = mlp((cfg.num_dense, *cfg.bottom_mlp))
        f = len(cfg.table_sizes) + 1
        if cfg.interaction == "dot":
            # the lower triangle of the (F, F) dot-product matrix (with the diagonal if self_interaction)
            pairs = [(i, j) for i in range(f) for j in range(i + 1 if cfg.self_interaction else i)]
            self.register_buffer(
                "_pairs", flow.tensor([i * f + j for i, j in pairs], dtype=flow.int64), persistent=False
            )
            top_in = d + len(pairs)
        else:
            top_in = d * f
        self.top_l = mlp((top_in, *cfg.top_mlp), last_activation=False)
        for table in self.emb_l:  # the reference's uniform(-1/sqrt(n), 1/sqrt(n)) tables
            bound = table.num_embeddings**-0.5
            nn.init.uniform_(table.weight, -bound, bound)

    def interact(self, x: flow.Tensor, embs: list[flow.Tensor]) -> flow.Tensor:
        """The dense vector concatenated with the pairwise dot products of all feature vectors."""
        if self.config.interaction == "cat":
            return flow.cat([x, *embs], dim=1)
        t = flow.stack([x, *embs], dim=1)  # (B, F, d)
        z = flow.bmm(t, t.transpose(1, 2)).reshape(t.shape[0], -1)  # (B, F * F)
        return flow.cat([x, z.index_select(1, self._pairs)], dim=1)

    def forward(self, dense: flow.Tensor, sparse) -> flow.Tensor:
        x = self.bot_l(dense)
        return self.top_l(self.interact(x, lookup(self.emb_l, sparse)))

    def loss(self, logits, target):
        return bce_loss(logits, target)


def dlrm_input(config: DLRMConfig) -> DataSpec:
    """What DLRM takes: ``num_dense`` dense features and one categorical id per embedding table."""
    return DataSpec("recsys", "tabular", (config.num_dense, len(config.table_sizes)))
