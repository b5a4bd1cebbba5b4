"""Wide & Deep (Cheng et al., 2016): a linear model and a deep network trained jointly for click prediction.

The wide part is a linear model over the dense features and the categorical ids (a 1-wide
EmbeddingBag per table is a weight per id, i.e. a linear layer over one-hot features); the deep
part concatenates the dense features with pooled embeddings of the categorical ids and runs an
MLP. The click logit is the sum of both.
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.recsys._common import bce_loss, lookup
from flow_models.registry import ZooModel

__all__ = ["WideDeepConfig", "WideDeep", "wide_deep_input"]


@dataclass
class WideDeepConfig:
    """Wide & Deep hyper-parameters."""

    num_dense: int = 13
    table_sizes: tuple = (10_000,) * 8
    embedding_dim: int = 16
    hidden: tuple = (256, 128)
    dropout: float = 0.0
    pooling: str = "sum"


class WideDeep(ZooModel):
    """Wide & Deep: ``(dense (B, num_dense) float, sparse ids)`` -> click logits ``(B, 1)``.

    ``sparse`` takes the same forms as DLRM's; ``loss`` is binary cross-entropy with logits.
    """

    def __init__(self, config: WideDeepConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or WideDeepConfig()
        self.wide_dense = nn.Linear(cfg.num_dense, 1)
        self.wide_sparse = nn.ModuleList([nn.EmbeddingBag(n, 1, mode="sum") for n in cfg.table_sizes])
        self.embeddings = nn.ModuleList(
            [nn.EmbeddingBag(n, cfg.embedding_dim, mode=cfg.pooling) for n in cfg.table_sizes]
        )
        d_in = cfg.num_dense + cfg.embedding_dim * len(cfg.table_sizes)
        layers: list[nn.Module] = []
        for a, b in zip((d_in, *cfg.hidden[:-1]), cfg.hidden):
            layers += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(cfg.dropout)]
        self.deep = nn.Sequential(*layers, nn.Linear(cfg.hidden[-1] if cfg.hidden else d_in, 1))
        for table in self.wide_sparse:
            nn.init.zeros_(table.weight)
        for table in self.embeddings:
            nn.init.normal_(table.weight, 0.0, 0.01)

    def forward(self, dense: flow.Tensor, sparse) -> flow.Tensor:
        wide = self.wide_dense(dense)
        for w in lookup(self.wide_sparse, sparse):
            wide = wide + w
        deep = self.deep(flow.cat([dense, *lookup(self.embeddings, sparse)], dim=1))
        return wide + deep

    def loss(self, logits, target):
        return bce_loss(logits, target)


def wide_deep_input(config: WideDeepConfig) -> DataSpec:
    """What Wide & Deep takes: ``num_dense`` dense features and one categorical id per embedding table."""
    return DataSpec("recsys", "tabular", (config.num_dense, len(config.table_sizes)))
