"""M5 (Dai et al., 2017): a 1-D CNN over raw waveforms, here for keyword spotting.

Four convolution / BatchNorm / ReLU / max-pooling stages (the first with an 80-sample kernel and a
large stride, acting as a learned filter bank), global average pooling over time and a linear
classifier; the configuration of PyTorch's Speech Commands tutorial (35 keywords, 1 s at 16 kHz).
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
import flow.nn.functional as F
from flow import nn
from flow_models.registry import ZooModel

__all__ = ["M5Config", "M5"]


@dataclass
class M5Config:
    """M5 hyper-parameters: ``stride`` of the first convolution, ``channels`` of the first two stages
    (the last two have twice as many)."""

    in_channels: int = 1
    num_classes: int = 35
    channels: int = 32
    first_kernel: int = 80
    stride: int = 16
    pool: int = 4


class M5(ZooModel):
    """M5 keyword spotter: waveform ``(B, in_channels, samples)`` (or ``(B, samples)``) -> logits
    ``(B, num_classes)``."""

    def __init__(self, config: M5Config | None = None) -> None:
        super().__init__()
        cfg = self.config = config or M5Config()
        c = cfg.channels
        self.conv1 = nn.Conv1d(cfg.in_channels, c, cfg.first_kernel, stride=cfg.stride)
        self.bn1 = nn.BatchNorm1d(c)
        self.pool1 = nn.MaxPool1d(cfg.pool)
        self.conv2 = nn.Conv1d(c, c, 3)
        self.bn2 = nn.BatchNorm1d(c)
        self.pool2 = nn.MaxPool1d(cfg.pool)
        self.conv3 = nn.Conv1d(c, 2 * c, 3)
        self.bn3 = nn.BatchNorm1d(2 * c)
        self.pool3 = nn.MaxPool1d(cfg.pool)
        self.conv4 = nn.Conv1d(2 * c, 2 * c, 3)
        self.bn4 = nn.BatchNorm1d(2 * c)
        self.pool4 = nn.MaxPool1d(cfg.pool)
        self.fc1 = nn.Linear(2 * c, cfg.num_classes)

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        if x.ndim == 2:
            x = x.unsqueeze(1)
        for i in range(1, 5):
            conv, bn, pool = (getattr(self, f"{n}{i}") for n in ("conv", "bn", "pool"))
            x = pool(F.relu(bn(conv(x))))
        return self.fc1(x.mean(dim=-1))
