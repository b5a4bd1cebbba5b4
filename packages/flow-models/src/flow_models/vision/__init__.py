"""Vision models: LeNet-5, ResNet-18/34/50, VGG-11, MobileNetV2, ViT."""

from flow_models.vision.lenet import LeNet5, LeNetConfig
from flow_models.vision.mobilenet import MobileNetV2, MobileNetV2Config
from flow_models.vision.resnet import ResNet, ResNetConfig
from flow_models.vision.vgg import VGG, VGGConfig
from flow_models.vision.vit import VisionTransformer, ViTConfig

__all__ = [
    "LeNet5",
    "LeNetConfig",
    "MobileNetV2",
    "MobileNetV2Config",
    "ResNet",
    "ResNetConfig",
    "VGG",
    "VGGConfig",
    "VisionTransformer",
    "ViTConfig",
]
