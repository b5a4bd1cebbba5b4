"""``flow.optim.RAdam`` (torch.optim.RAdam: rectified Adam), vectorised over flat buffers."""

from __future__ import annotations

import math

import numpy as np

from flow.optim._hyper import Flag
from flow.optim.adamax import lerp
from flow.optim.optimizer import Optimizer, _float


class RAdam(Optimizer):
    """torch.optim.RAdam (Liu et al., 2019): Adam whose adaptive step is switched on, and rectified, only
    once the variance of the adaptive learning rate is tractable (the length of the approximated simple
    moving average ``rho_t`` > 5); before that, SGD with (bias-corrected) momentum.

    ``decoupled_weight_decay=True`` decays the weights as AdamW does (``p *= 1 - lr * weight_decay``)
    instead of adding ``weight_decay * p`` to the gradient.

    >>> opt = flow.optim.RAdam(model.parameters(), lr=1e-3, weight_decay=1e-2, decoupled_weight_decay=True)
    """

    _hyper = {"decoupled_weight_decay": Flag()}

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        decoupled_weight_decay: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        return {"exp_avg": 0.0, "exp_avg_sq": 0.0}

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, eps, wd = _float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        if wd != 0:
            if group["decoupled_weight_decay"]:
                p *= 1 - lr * wd
            else:
                g += wd * p
        m, v = state["exp_avg"], state["exp_avg_sq"]
        lerp(m, g, 1 - b1)
        v *= b2
        v += (1 - b2) * g * g
        bc1, bc2 = 1 - b1**step, 1 - b2**step
        upd = m / bc1
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * step * (b2**step) / bc2
        upd *= lr
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            denom = np.sqrt(v)
            denom += eps
            np.divide(bc2**0.5, denom, out=denom)  # the adaptive learning rate
            upd *= denom
            upd *= rect
        p -= upd
