"""``flow.optim.NAdam`` (torch.optim.NAdam: Adam with Nesterov momentum), vectorised over flat buffers."""

from __future__ import annotations

import numpy as np

from flow.optim._hyper import Flag, Real
from flow.optim._scalar_state import ScalarStates, as_dtype, f32, per_param
from flow.optim.adamax import lerp
from flow.optim.optimizer import _float


def _mu(beta1: float, momentum_decay: float, t: int) -> float:
    """The momentum coefficient ``mu_t`` of step ``t`` (Dozat, 2016, with torch's 0.96 schedule)."""
    return beta1 * (1.0 - 0.5 * (0.96 ** (t * momentum_decay)))


class NAdam(ScalarStates):
    """torch.optim.NAdam: Adam's moments, with the Nesterov look-ahead of a momentum that warms up
    (``mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))``).

    State: ``step``, ``mu_product`` (the product of the ``mu_t`` so far; a 0-d tensor in ``state_dict()``,
    as in PyTorch), ``exp_avg``, ``exp_avg_sq``. ``decoupled_weight_decay=True`` decays the weights as
    AdamW does (NAdamW) instead of adding ``weight_decay * p`` to the gradient.

    >>> opt = flow.optim.NAdam(model.parameters(), lr=2e-3, momentum_decay=4e-3)
    """

    _hyper = {"momentum_decay": Real("momentum_decay value", 0.0), "decoupled_weight_decay": Flag()}
    _scalar_states = ("mu_product",)

    def __init__(
        self,
        params,
        lr=2e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        return {"mu_product": 1.0, "exp_avg": 0.0, "exp_avg_sq": 0.0}

    def _scalar_default(self, group: dict, name: str, step: int) -> float:
        b1, md = float(group["betas"][0]), float(group["momentum_decay"])
        out = 1.0
        for t in range(1, step + 1):
            out = f32(out * f32(_mu(b1, md, t)))
        return out

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, eps, wd = _float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        md = float(group["momentum_decay"])
        mp, m, v = state["mu_product"], state["exp_avg"], state["exp_avg_sq"]
        if not layout[2]["mu_product"]:
            mp[...] = 1.0
        if wd != 0:
            if group["decoupled_weight_decay"]:
                p *= 1 - lr * wd
            else:
                g += wd * p
        mu, mu_next = _mu(b1, md, step), _mu(b1, md, step + 1)
        prod = per_param(mp, layout)
        if prod is None:  # only empty parameters
            return
        # mu_product *= mu on torch's float32 scalar
        if isinstance(prod, float):
            prod = f32(prod * f32(mu))
        else:
            prod = (prod.astype(np.float32) * np.float32(mu)).astype(np.float64)
        mp[...] = prod
        lerp(m, g, 1 - b1)
        v *= b2
        v += (1 - b2) * g * g
        denom = v / (1 - b2**step)
        np.sqrt(denom, out=denom)
        denom += eps
        c_grad = as_dtype(-lr * (1.0 - mu) / (1.0 - prod), p.dtype)
        c_avg = as_dtype((-lr * mu_next) / (1.0 - prod * mu_next), p.dtype)
        g /= denom
        g *= c_grad
        p += g
        np.divide(m, denom, out=denom)
        denom *= c_avg
        p += denom
