"""``flow.optim.RMSprop`` (torch.optim.RMSprop: momentum, centered), vectorised over flat buffers."""

from __future__ import annotations

import numpy as np

from flow.optim._hyper import Flag, Real
from flow.optim.optimizer import Optimizer, _float


class RMSprop(Optimizer):
    """torch.optim.RMSprop: ``sq = alpha*sq + (1-alpha)*g*g``; divide the gradient by ``sqrt(sq) + eps``.

    ``centered`` subtracts the square of a running mean of the gradient; ``momentum`` keeps a
    buffer of the scaled steps.
    """

    _hyper = {"alpha": Real("alpha value", 0.0, 1.0), "centered": Flag()}

    def __init__(
        self,
        params,
        lr=1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        names = {"square_avg": 0.0}
        if group["momentum"] > 0:
            names["momentum_buffer"] = 0.0
        if group["centered"]:
            names["grad_avg"] = 0.0
        return names

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, alpha, eps = _float(group["lr"]), float(group["alpha"]), float(group["eps"])
        wd, momentum = float(group["weight_decay"]), float(group["momentum"])
        if wd != 0:
            g += wd * p
        sq = state["square_avg"]
        sq *= alpha
        sq += (1 - alpha) * g * g
        if group["centered"]:
            ga = state["grad_avg"]
            w = 1 - alpha  # grad_avg.lerp_(grad, 1 - alpha)
            if abs(w) < 0.5:
                ga += w * (g - ga)
            else:
                ga[...] = g - (g - ga) * (1 - w)
            avg = sq - ga * ga
            np.sqrt(avg, out=avg)
        else:
            avg = np.sqrt(sq)
        avg += eps
        if momentum > 0:
            buf = state["momentum_buffer"]
            buf *= momentum
            buf += g / avg
            p -= lr * buf
        else:
            p -= lr * (g / avg)
