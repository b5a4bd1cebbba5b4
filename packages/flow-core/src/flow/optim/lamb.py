"""``flow.optim.LAMB``: layer-wise adaptive moments (You et al., 2019), with a per-parameter trust ratio."""

from __future__ import annotations

import math

import numpy as np

from flow.optim._flat import segment_norms
from flow.optim._hyper import Flag
from flow.optim.optimizer import Optimizer, _float


class LAMB(Optimizer):
    """LAMB, the standard trust-ratio formulation.

    For each parameter ``w`` (a tensor, i.e. a "layer"), at step ``t``::

        m = b1*m + (1-b1)*g                 v = b2*v + (1-b2)*g*g
        m_hat = m / (1 - b1**t)             v_hat = v / (1 - b2**t)     (if bias_correction)
        u = m_hat / (sqrt(v_hat) + eps) + weight_decay * w
        r = ||w|| / ||u||   (1 when either norm is 0)
        w -= lr * r * u

    The norms are computed for every parameter of a group at once over the flat buffers.
    State: ``step``, ``exp_avg``, ``exp_avg_sq`` (as Adam's).
    """

    _hyper = {"bias_correction": Flag()}

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0,
        bias_correction: bool = True,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction, maximize=maximize
        )
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        return {"exp_avg": 0.0, "exp_avg_sq": 0.0}

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, eps, wd = _float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        if group["bias_correction"]:
            bc1, bc2_sqrt = 1 - b1**step, math.sqrt(1 - b2**step)
        else:
            bc1, bc2_sqrt = 1.0, 1.0
        u = np.sqrt(v)
        u /= bc2_sqrt
        u += eps
        np.divide(m, u, out=u)
        u /= bc1
        if wd != 0:
            u += wd * p
        starts, numels, _ = layout
        w_norm = segment_norms(p, starts, numels)
        u_norm = segment_norms(u, starts, numels)
        ok = (w_norm > 0) & (u_norm > 0)
        trust = np.where(ok, w_norm / np.where(ok, u_norm, 1.0), 1.0)
        scale = np.repeat((lr * trust).astype(p.dtype), numels)
        u *= scale
        p -= u
