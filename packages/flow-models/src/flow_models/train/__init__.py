"""flow-train: the training command of flow-models (``flow-train MODEL --dataset NAME``).

:class:`Trainer` runs one training run from a :class:`TrainConfig`; :func:`main` is the console
script; :mod:`flow_models.train.generate` samples from language-model checkpoints (``flow-generate``).
"""

from flow_models.train.config import TrainConfig, TrainError
from flow_models.train.loop import Trainer

__all__ = ["TrainConfig", "TrainError", "Trainer", "main"]


def main(argv=None) -> int:
    """``flow-train`` (see :mod:`flow_models.train.cli`)."""
    from flow_models.train.cli import main as _main

    return _main(argv)
