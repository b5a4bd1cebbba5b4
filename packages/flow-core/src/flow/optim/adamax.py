"""``flow.optim.Adamax`` (torch.optim.Adamax: Adam with the infinity norm), vectorised over flat buffers."""

from __future__ import annotations

import numpy as np

from flow.optim.optimizer import Optimizer, _float


class Adamax(Optimizer):
    """torch.optim.Adamax: ``exp_inf = max(beta2 * exp_inf, |g| + eps)``, ``p -= lr / (1 - beta1**t) * m / exp_inf``.

    ``m`` (``exp_avg``) is Adam's first moment; the second is replaced by the exponentially weighted
    infinity norm of the gradients.

    >>> opt = flow.optim.Adamax(model.parameters(), lr=2e-3, betas=(0.9, 0.999))
    """

    def __init__(
        self,
        params,
        lr=2e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        return {"exp_avg": 0.0, "exp_inf": 0.0}

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, eps, wd = _float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        if wd != 0:
            g += wd * p
        m, u = state["exp_avg"], state["exp_inf"]
        lerp(m, g, 1 - b1)
        u *= b2
        a = np.abs(g)
        a += eps
        np.maximum(u, a, out=u)
        clr = lr / (1 - b1**step)
        np.divide(m, u, out=a)
        a *= clr
        p -= a


def lerp(m, g, w: float) -> None:
    """``m.lerp_(g, w)`` in place, in the form torch's lerp uses for the weight (exact at ``w`` = 0 and 1)."""
    if abs(w) < 0.5:
        m += w * (g - m)
    else:
        m[...] = g - (g - m) * (1 - w)
