"""Multi-class margin losses: MultiMarginLoss and MultiLabelMarginLoss."""

from __future__ import annotations

import flow.nn.functional as F
from flow.nn.modules.loss import _Loss, _WeightedLoss

__all__ = ["MultiMarginLoss", "MultiLabelMarginLoss"]


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss (see :func:`flow.nn.functional.multi_margin_loss`)."""

    def __init__(
        self,
        p: int = 1,
        margin: float = 1.0,
        weight=None,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        self.p = p
        self.margin = margin

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, self.p, self.margin, self.weight, reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """Multi-label hinge loss (see :func:`flow.nn.functional.multilabel_margin_loss`)."""

    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)
