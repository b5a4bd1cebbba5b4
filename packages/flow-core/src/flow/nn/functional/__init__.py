"""``flow.nn.functional``: stateless neural-network functions, as ``torch.nn.functional``.

Each submodule owns one family; this package re-exports their public names.
"""

from __future__ import annotations

import importlib

from flow.ops.padding import pad
from flow.ops.shape_ops import one_hot
from flow.ops.unary import gelu, relu, sigmoid, silu, softplus, tanh

_FAMILIES = (
    "activation",
    "conv",
    "pooling",
    "interpolate",
    "normalization",
    "dropout",
    "sparse",
    "loss",
    "attention",
    "linear",
    "fold",
    "volumetric",
    "grid",
    "margin",
)

__all__ = ["gelu", "relu", "sigmoid", "silu", "softplus", "tanh", "pad", "one_hot"]


def _export() -> None:
    g = globals()
    for fam in _FAMILIES:
        try:
            mod = importlib.import_module(f"flow.nn.functional.{fam}")
        except ModuleNotFoundError as e:
            if e.name != f"flow.nn.functional.{fam}":
                raise
            continue
        for name in getattr(mod, "__all__", ()):
            g[name] = getattr(mod, name)
            if name not in __all__:
                __all__.append(name)


_export()
