"""``flow.optim.Adam`` and ``flow.optim.AdamW`` (with AMSGrad), as torch.optim's."""

from __future__ import annotations

import math

import numpy as np

from flow.optim._flat import use_native
from flow.optim.optimizer import Optimizer, _float


class Adam(Optimizer):
    """torch.optim.Adam: L2 weight decay added to the gradient (``decoupled_weight_decay=False``).

    One fused native kernel call (``native.adam_update``) per parameter group and dtype; NumPy
    over the flat buffers when the extension is missing or for float16/bfloat16 (float32 states).
    """

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 amsgrad: bool = False, *, maximize: bool = False, decoupled_weight_decay: bool | None = None) -> None:
        if decoupled_weight_decay is None:
            decoupled_weight_decay = self._decoupled
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, decoupled_weight_decay=bool(decoupled_weight_decay))
        super().__init__(params, defaults)

    def _validate_group(self, group: dict) -> None:
        if _float(group["lr"]) < 0.0:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if group["eps"] < 0.0:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")
        b1, b2 = group["betas"]
        if not 0.0 <= b1 < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {b1}")
        if not 0.0 <= b2 < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {b2}")
        if group["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def _state_names(self, group: dict) -> dict:
        names = {"exp_avg": 0.0, "exp_avg_sq": 0.0}
        if group["amsgrad"]:
            names["max_exp_avg_sq"] = 0.0
        return names

    def _reads_grad_only(self, group, b) -> bool:
        return not b.low and use_native(b.flat)  # the native kernel takes the gradient read-only

    def _update(self, group, p, g, state, step, layout) -> None:
        b1, b2 = (float(b) for b in group["betas"])
        args = (_float(group["lr"]), b1, b2, float(group["eps"]), float(group["weight_decay"]),
                bool(group.get("decoupled_weight_decay", self._decoupled)), bool(group["amsgrad"]))
        m, v, vmax = state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq")
        if use_native(p):
            from flow.backends.cpu import native

            native.adam_update(p, g, m, v, vmax, step, *args)
            return
        adam_numpy(p, g, m, v, vmax, step, *args)


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (``p *= 1 - lr * weight_decay``)."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)


def adam_numpy(p, g, m, v, vmax, step, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad) -> None:
    """One Adam/AdamW step in vectorised NumPy, in torch's order of operations (``g`` is scratch)."""
    if weight_decay != 0:
        if decoupled:
            p *= 1 - lr * weight_decay
        else:
            g += weight_decay * p
    # exp_avg.lerp_(grad, 1 - beta1); torch's lerp uses this form for weights < 0.5
    w = 1 - beta1
    if abs(w) < 0.5:
        m += w * (g - m)
    else:
        m[...] = g - (g - m) * (1 - w)
    v *= beta2
    v += (1 - beta2) * g * g
    bias_correction1 = 1 - beta1 ** step
    bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
    if amsgrad:
        np.maximum(vmax, v, out=vmax)
        denom = np.sqrt(vmax)
    else:
        denom = np.sqrt(v)
    denom /= bias_correction2_sqrt
    denom += eps
    p -= (lr / bias_correction1) * (m / denom)
