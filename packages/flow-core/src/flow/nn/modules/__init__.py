"""The layers of ``flow.nn``, one family per module."""

from flow.nn.modules import (
    activation,
    container,
    conv,
    dropout,
    flatten,
    linear,
    loss,
    module,
    normalization,
    pooling,
    rnn,
    sparse,
    transformer,
)
from flow.nn.modules.activation import *  # noqa: F401,F403
from flow.nn.modules.container import *  # noqa: F401,F403
from flow.nn.modules.conv import *  # noqa: F401,F403
from flow.nn.modules.dropout import *  # noqa: F401,F403
from flow.nn.modules.flatten import *  # noqa: F401,F403
from flow.nn.modules.linear import *  # noqa: F401,F403
from flow.nn.modules.loss import *  # noqa: F401,F403
from flow.nn.modules.module import *  # noqa: F401,F403
from flow.nn.modules.normalization import *  # noqa: F401,F403
from flow.nn.modules.pooling import *  # noqa: F401,F403
from flow.nn.modules.rnn import *  # noqa: F401,F403
from flow.nn.modules.sparse import *  # noqa: F401,F403
from flow.nn.modules.transformer import *  # noqa: F401,F403

__all__ = [
    name
    for m in (
        activation,
        container,
        conv,
        dropout,
        flatten,
        linear,
        loss,
        module,
        normalization,
        pooling,
        rnn,
        sparse,
        transformer,
    )
    for name in m.__all__
]

# 3-d, padding, resizing, fold, distance, lazy and margin-loss layers (PyTorch-compatibility additions)
from flow.nn.modules import conv3d, distance, fold, lazy, margin_loss, padding, upsampling  # noqa: E402
from flow.nn.modules.conv3d import *  # noqa: E402,F401,F403
from flow.nn.modules.distance import *  # noqa: E402,F401,F403
from flow.nn.modules.fold import *  # noqa: E402,F401,F403
from flow.nn.modules.lazy import *  # noqa: E402,F401,F403
from flow.nn.modules.margin_loss import *  # noqa: E402,F401,F403
from flow.nn.modules.padding import *  # noqa: E402,F401,F403
from flow.nn.modules.upsampling import *  # noqa: E402,F401,F403

__all__ += [n for m in (conv3d, distance, fold, lazy, margin_loss, padding, upsampling) for n in m.__all__]
