"""VGG (Simonyan & Zisserman, 2015) with torchvision's module names (``features``, ``classifier``).

VGG-11 is configuration "A"; ``batch_norm=True`` inserts BatchNorm2d after every convolution
(torchvision's ``vgg11_bn``). ``hidden``, ``pool_size`` shrink the classifier for small inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["VGGConfig", "VGG", "VGG_CFGS", "vgg_input"]

# numbers are output channels of a 3x3 convolution, "M" a 2x2 max pooling
VGG_CFGS = {
    "A": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "B": (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "D": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
}


@dataclass
class VGGConfig:
    """VGG hyper-parameters: ``layout`` names a column of the paper's table ("A" = VGG-11)."""

    layout: str = "A"
    batch_norm: bool = False
    num_classes: int = 1000
    in_channels: int = 3
    hidden: int = 4096
    pool_size: int = 7
    dropout: float = 0.5


class VGG(ZooModel):
    """VGG image classifier: stacks of 3x3 convolutions and max pooling, then three linear layers."""

    def __init__(self, config: VGGConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or VGGConfig()
        if cfg.layout not in VGG_CFGS:
            raise ValueError(f"VGGConfig.layout must be one of {sorted(VGG_CFGS)}, got {cfg.layout!r}")
        layers: list[nn.Module] = []
        cin = cfg.in_channels
        for v in VGG_CFGS[cfg.layout]:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
                continue
            layers.append(nn.Conv2d(cin, v, 3, padding=1))
            if cfg.batch_norm:
                layers.append(nn.BatchNorm2d(v))
            layers.append(nn.ReLU(inplace=True))
            cin = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((cfg.pool_size, cfg.pool_size))
        self.classifier = nn.Sequential(
            nn.Linear(cin * cfg.pool_size * cfg.pool_size, cfg.hidden),
            nn.ReLU(True),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.hidden, cfg.hidden),
            nn.ReLU(True),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.hidden, cfg.num_classes),
        )
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def vgg_input(config: VGGConfig) -> DataSpec:
    """What a VGG takes: ``in_channels``-channel images at least 2^k pixels high and wide, k being its
    number of max poolings (32 for every layout), so that the last pooling has an output."""
    if config.layout not in VGG_CFGS:
        raise ValueError(f"VGGConfig.layout must be one of {sorted(VGG_CFGS)}, got {config.layout!r}")
    side = 2 ** VGG_CFGS[config.layout].count("M")
    return DataSpec("classification", "image", (config.in_channels, None, None), min_shape=(None, side, side))
