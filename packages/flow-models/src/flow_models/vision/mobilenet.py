"""MobileNetV2 (Sandler et al., 2018) with torchvision's module names.

Inverted residual blocks with linear bottlenecks and depthwise 3x3 convolutions: a small,
fast ImageNet classifier for mobile devices. ``width_mult`` scales every layer's channels.
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["MobileNetV2Config", "MobileNetV2", "InvertedResidual", "mobilenet_input"]

# expansion t, output channels c, repeats n, first stride s (the paper's Table 2)
_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


@dataclass
class MobileNetV2Config:
    """MobileNetV2 hyper-parameters."""

    num_classes: int = 1000
    in_channels: int = 3
    width_mult: float = 1.0
    round_nearest: int = 8
    dropout: float = 0.2


def _make_divisible(v: float, divisor: int) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn_act(cin: int, cout: int, kernel_size: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """torchvision's Conv2dNormActivation with BatchNorm2d and ReLU6: children ``0``, ``1``, ``2``."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    """1x1 expansion, depthwise 3x3, linear 1x1 projection; a residual connection when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_act(cin, hidden, kernel_size=1))
        layers += [
            _conv_bn_act(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, 1, 0, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = cout

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(ZooModel):
    """MobileNetV2 image classifier; input ``(N, C, H, W)`` (H, W >= 32), output logits."""

    def __init__(self, config: MobileNetV2Config | None = None) -> None:
        super().__init__()
        cfg = self.config = config or MobileNetV2Config()
        cin = _make_divisible(32 * cfg.width_mult, cfg.round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, cfg.width_mult), cfg.round_nearest)
        features: list[nn.Module] = [_conv_bn_act(cfg.in_channels, cin, stride=2)]
        for t, c, n, s in _SETTINGS:
            cout = _make_divisible(c * cfg.width_mult, cfg.round_nearest)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(_conv_bn_act(cin, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(self.last_channel, cfg.num_classes))
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1)).flatten(1)
        return self.classifier(x)


def mobilenet_input(config: MobileNetV2Config) -> DataSpec:
    """What MobileNetV2 takes: ``in_channels``-channel images of any size (the global average pooling adapts)."""
    return DataSpec("classification", "image", (config.in_channels, None, None))
