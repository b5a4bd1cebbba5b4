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
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["M5Config", "M5", "m5_input"]


@dataclass
class M5Config:
    """M5 hyper-parameters. ``channels`` is the width of the first two stages (the last two have twice
    as many). The first convolution's kernel and stride default to 5 ms and 1 ms of audio at
    ``sample_rate`` (80 and 16 samples at 16 kHz)."""

    in_channels: int = 1
    num_classes: int = 35
    sample_rate: int = 16000
    channels: int = 32
    first_kernel: int | None = None
    stride: int | None = None
    pool: int = 4


class M5(ZooModel):
    """M5 keyword spotter: waveform ``(B, in_channels, samples)`` (or ``(B, samples)``) -> logits
    ``(B, num_classes)``. Waveforms shorter than ``min_samples`` are zero-padded at the end."""

    def __init__(self, config: M5Config | None = None) -> None:
        super().__init__()
        cfg = self.config = config or M5Config()
        c = cfg.channels
        kernel = cfg.first_kernel or max(1, round(cfg.sample_rate * 0.005))
        stride = cfg.stride or max(1, round(cfg.sample_rate * 0.001))
        self.conv1 = nn.Conv1d(cfg.in_channels, c, kernel, stride=stride)
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
        # the shortest waveform every stage has at least one output for; shorter ones are zero-padded
        n = 1
        for _ in range(3):
            n = n * cfg.pool + 2  # back through a pooling and a 3-tap convolution
        self.min_samples = (n * cfg.pool - 1) * stride + kernel

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        if x.ndim == 2:
            x = x.unsqueeze(1)
        if x.shape[-1] < self.min_samples:
            x = F.pad(x, (0, self.min_samples - x.shape[-1]))
        for i in range(1, 5):
            conv, bn, pool = (getattr(self, f"{n}{i}") for n in ("conv", "bn", "pool"))
            x = pool(F.relu(bn(conv(x))))
        return self.fc1(x.mean(dim=-1))


def m5_input(config: M5Config) -> DataSpec:
    """What M5 takes: ``in_channels``-channel waveforms of any length (short ones are zero-padded), to classify."""
    return DataSpec("classification", "waveform", (config.in_channels, None))
