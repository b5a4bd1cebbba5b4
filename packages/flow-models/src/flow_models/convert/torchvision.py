"""torchvision ResNet state dicts (saved as safetensors) into the zoo's :class:`~flow_models.vision.resnet.ResNet`.

The zoo's ResNet has torchvision's module names, so the mapping is one to one; what this adds
is reading the file, checking every shape, a clear error on a mismatch, and building the right
model from the checkpoint alone (:func:`resnet_from_torchvision`).

Write such a file from PyTorch with
``safetensors.torch.save_file(torchvision.models.resnet50(weights=...).state_dict(), "resnet50.safetensors")``.
"""

from __future__ import annotations

import re

from flow_models.convert.common import ConversionError, LoadResult, Mapped, load_mapped, read_state_dict

__all__ = [
    "torchvision_resnet_state_dict",
    "load_torchvision_resnet",
    "resnet_config_from_state_dict",
    "resnet_from_torchvision",
]

_PREFIXES = ("module.", "model.")  # DataParallel / Lightning wrappers


def _strip(key: str) -> str:
    for p in _PREFIXES:
        if key.startswith(p):
            return key[len(p) :]
    return key


def torchvision_resnet_state_dict(source) -> dict[str, Mapped]:
    """The checkpoint's entries under the zoo's (= torchvision's) names."""
    sd = read_state_dict(source)
    return {_strip(k): Mapped(k, v, tuple(v.shape)) for k, v in sd.items()}


def load_torchvision_resnet(model, source, strict: bool = True) -> LoadResult:
    """Load a torchvision ResNet state dict (safetensors path or mapping) into ``model`` in place.

    With ``strict=False`` a classifier of another size (``fc``) is an error still (shapes are always
    checked); drop it from the source or build the model with the checkpoint's ``num_classes``.
    """
    return load_mapped(model, torchvision_resnet_state_dict(source), what="torchvision ResNet", strict=strict)


def resnet_config_from_state_dict(source):
    """A :class:`~flow_models.vision.resnet.ResNetConfig` matching a torchvision ResNet checkpoint."""
    from flow_models.vision.resnet import ResNetConfig

    sd = {_strip(k): v for k, v in read_state_dict(source).items()}
    if "conv1.weight" not in sd or "fc.weight" not in sd:
        raise ConversionError("not a torchvision ResNet state dict: 'conv1.weight' or 'fc.weight' is missing")
    blocks = [0, 0, 0, 0]
    for k in sd:
        m = re.match(r"layer([1-4])\.(\d+)\.", k)
        if m:
            i = int(m.group(1)) - 1
            blocks[i] = max(blocks[i], int(m.group(2)) + 1)
    conv1 = sd["conv1.weight"]
    return ResNetConfig(
        block="bottleneck" if "layer1.0.conv3.weight" in sd else "basic",
        layers=tuple(blocks),
        num_classes=int(sd["fc.weight"].shape[0]),
        in_channels=int(conv1.shape[1]),
        stem="imagenet" if conv1.shape[-1] == 7 else "cifar",
        width=int(conv1.shape[0]),
    )


def resnet_from_torchvision(source, **overrides):
    """A zoo ResNet built to the checkpoint's architecture, with its weights loaded."""
    import dataclasses

    from flow_models.vision.resnet import ResNet

    sd = read_state_dict(source)
    model = ResNet(dataclasses.replace(resnet_config_from_state_dict(sd), **overrides))
    load_torchvision_resnet(model, sd)
    return model
