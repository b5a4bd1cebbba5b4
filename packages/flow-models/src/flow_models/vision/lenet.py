"""LeNet-5 (LeCun et al., 1998): two convolutions and three fully connected layers.

The classic network for small grey-scale digit images. ``input_size`` and
``in_channels`` are configurable: the zoo's ``lenet`` is set up for the 8x8 digits
of scikit-learn's ``load_digits`` (the default of ``flow-train lenet --dataset digits``),
``lenet-mnist`` for 28x28 MNIST-like images.
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["LeNetConfig", "LeNet5", "lenet_input"]


@dataclass
class LeNetConfig:
    """LeNet-5 hyper-parameters.

    ``conv2_padding=None`` picks 0 when the feature map after the first pooling is at least
    ``2 * kernel_size`` wide (the classic 28x28 -> 14x14 -> 10x10 layout) and ``kernel_size // 2``
    otherwise, so that small inputs (8x8 digits) keep a spatial extent.
    """

    in_channels: int = 1
    input_size: int = 8
    num_classes: int = 10
    channels: tuple = (6, 16)
    hidden: tuple = (120, 84)
    kernel_size: int = 5
    conv2_padding: int | None = None
    activation: str = "tanh"  # "tanh" (the original) or "relu"
    pool: str = "avg"  # "avg" (subsampling, as the original) or "max"


class LeNet5(ZooModel):
    """LeNet-5 for digit recognition: ``conv -> pool -> conv -> pool -> fc -> fc -> fc``.

    Input ``(N, in_channels, input_size, input_size)`` (also ``(N, H, W)`` grey-scale or
    ``(N, C*H*W)`` flattened images); output ``(N, num_classes)`` logits.
    """

    def __init__(self, config: LeNetConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or LeNetConfig()
        if cfg.activation not in ("tanh", "relu"):
            raise ValueError(f"LeNetConfig.activation must be 'tanh' or 'relu', got {cfg.activation!r}")
        if cfg.pool not in ("avg", "max"):
            raise ValueError(f"LeNetConfig.pool must be 'avg' or 'max', got {cfg.pool!r}")
        k = cfg.kernel_size
        c1, c2 = cfg.channels
        act = nn.Tanh if cfg.activation == "tanh" else nn.ReLU
        pool = nn.AvgPool2d if cfg.pool == "avg" else nn.MaxPool2d
        size = cfg.input_size // 2  # conv1 keeps the size ("same" padding), then 2x2 pooling
        pad2 = cfg.conv2_padding
        if pad2 is None:
            pad2 = 0 if size >= 2 * k else k // 2
        size = (size + 2 * pad2 - k + 1) // 2
        if size < 1:
            raise ValueError(
                f"LeNet-5 input_size={cfg.input_size} is too small for kernel_size={k} with conv2_padding={pad2}"
            )
        self.features = nn.Sequential(
            nn.Conv2d(cfg.in_channels, c1, k, padding=k // 2),
            act(),
            pool(2),
            nn.Conv2d(c1, c2, k, padding=pad2),
            act(),
            pool(2),
        )
        self.feature_size = c2 * size * size
        h1, h2 = cfg.hidden
        self.classifier = nn.Sequential(
            nn.Linear(self.feature_size, h1),
            act(),
            nn.Linear(h1, h2),
            act(),
            nn.Linear(h2, cfg.num_classes),
        )

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        cfg = self.config
        if x.ndim == 2:  # (N, C*H*W) flattened images, as scikit-learn's digits come
            x = x.reshape(x.shape[0], cfg.in_channels, cfg.input_size, cfg.input_size)
        elif x.ndim == 3:  # (N, H, W) grey-scale images
            x = x.unsqueeze(1)
        return self.classifier(self.features(x).flatten(1))


def lenet_input(config: LeNetConfig) -> DataSpec:
    """What LeNet-5 takes: images of exactly ``in_channels x input_size x input_size`` (its first linear
    layer is sized for that), to classify."""
    return DataSpec("classification", "image", (config.in_channels, config.input_size, config.input_size))
