"""ResNet-18/34/50 (He et al., 2016), with torchvision's module names.

The module tree (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer2.0.downsample.0``, ``fc``, ...)
is torchvision's, so a torchvision ResNet state dict loads as it is
(:func:`flow_models.convert.load_torchvision_resnet`). ``stem="imagenet"`` is the 7x7/2
convolution and 3x3/2 max pooling for 224x224 images; ``stem="cifar"`` a 3x3/1 convolution and
no pooling for 32x32 images (CIFAR-10/100).
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["ResNetConfig", "ResNet", "BasicBlock", "Bottleneck", "resnet_input"]


@dataclass
class ResNetConfig:
    """ResNet hyper-parameters: ``block`` is ``"basic"`` (ResNet-18/34) or ``"bottleneck"`` (ResNet-50+)."""

    block: str = "basic"
    layers: tuple = (2, 2, 2, 2)
    num_classes: int = 1000
    in_channels: int = 3
    stem: str = "imagenet"  # or "cifar"
    width: int = 64
    zero_init_residual: bool = False


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, as torchvision "v1.5"), 1x1 expand, with a residual connection (ResNet-50)."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv1x1(cin, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


_BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(ZooModel):
    """ResNet image classifier (ImageNet or CIFAR stem); input ``(N, C, H, W)``, output logits."""

    def __init__(self, config: ResNetConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or ResNetConfig()
        if cfg.block not in _BLOCKS:
            raise ValueError(f"ResNetConfig.block must be one of {sorted(_BLOCKS)}, got {cfg.block!r}")
        if cfg.stem not in ("imagenet", "cifar"):
            raise ValueError(f"ResNetConfig.stem must be 'imagenet' or 'cifar', got {cfg.stem!r}")
        block = _BLOCKS[cfg.block]
        w = cfg.width
        self.inplanes = w
        if cfg.stem == "imagenet":
            self.conv1 = nn.Conv2d(cfg.in_channels, w, 7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        else:
            self.conv1 = nn.Conv2d(cfg.in_channels, w, 3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(w)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, w, cfg.layers[0])
        self.layer2 = self._make_layer(block, 2 * w, cfg.layers[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * w, cfg.layers[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * w, cfg.layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * w * block.expansion, cfg.num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if cfg.zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.zeros_(m.bn3.weight)
                elif isinstance(m, BasicBlock):
                    nn.init.zeros_(m.bn2.weight)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, planes * block.expansion, stride), nn.BatchNorm2d(planes * block.expansion)
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward_features(self, x: flow.Tensor) -> flow.Tensor:
        """The pooled feature vector ``(N, 512 * expansion)`` before the classifier."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.avgpool(x).flatten(1)

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        return self.fc(self.forward_features(x))


def resnet_input(config: ResNetConfig) -> DataSpec:
    """What a ResNet takes: ``in_channels``-channel images of any size (the global average pooling adapts)."""
    return DataSpec("classification", "image", (config.in_channels, None, None))
