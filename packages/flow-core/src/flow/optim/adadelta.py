"""``flow.optim.Adadelta`` (torch.optim.Adadelta), vectorised over flat buffers."""

from __future__ import annotations

import numpy as np

from flow.optim._hyper import Real
from flow.optim.optimizer import Optimizer, _float


class Adadelta(Optimizer):
    """torch.optim.Adadelta (Zeiler, 2012): step ``sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g``.

    ``square_avg`` and ``acc_delta`` are running averages (weight ``rho``) of the squared gradient and
    of the squared steps; ``lr`` scales the step (1.0 as in the paper).

    >>> opt = flow.optim.Adadelta(model.parameters(), lr=1.0, rho=0.9)
    """

    _hyper = {"rho": Real("rho value", 0.0, 1.0)}

    def __init__(
        self,
        params,
        lr=1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        return {"square_avg": 0.0, "acc_delta": 0.0}

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, rho, eps = _float(group["lr"]), float(group["rho"]), float(group["eps"])
        wd = float(group["weight_decay"])
        if wd != 0:
            g += wd * p
        sq, acc = state["square_avg"], state["acc_delta"]
        sq *= rho
        sq += (1 - rho) * g * g
        std = sq + eps
        np.sqrt(std, out=std)
        delta = acc + eps
        np.sqrt(delta, out=delta)
        delta /= std
        delta *= g
        acc *= rho
        acc += (1 - rho) * delta * delta
        delta *= lr
        p -= delta
