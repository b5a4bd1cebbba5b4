"""``flow.optim.Adam`` and ``flow.optim.AdamW`` (with AMSGrad), as torch.optim's."""

from __future__ import annotations

import math

import numpy as np

from flow.ops import optim as _ops
from flow.optim._hyper import Flag
from flow.optim.optimizer import Optimizer, _float


class Adam(Optimizer):
    """torch.optim.Adam: L2 weight decay added to the gradient (``decoupled_weight_decay=False``).

    ``step()`` runs the op ``adam_update`` (:mod:`flow.ops.optim`) per run of parameters; its CPU
    kernel is one fused native multi-tensor call (``native.adam_update_multi``) per chunk, each
    parameter updated in its own memory; NumPy over a gathered copy when the extension is missing.
    float16/bfloat16 parameters are updated in float32 (float32 states).

    >>> opt = flow.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    """

    _decoupled = False
    _hyper = {"amsgrad": Flag(), "decoupled_weight_decay": Flag()}

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        decoupled_weight_decay: bool | None = None,
    ) -> None:
        if decoupled_weight_decay is None:
            decoupled_weight_decay = self._decoupled
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        names = {"exp_avg": 0.0, "exp_avg_sq": 0.0}
        if group["amsgrad"]:
            names["max_exp_avg_sq"] = 0.0
        return names

    def _args(self, group: dict) -> tuple:
        b1, b2 = (float(b) for b in group["betas"])
        return (
            _float(group["lr"]),
            b1,
            b2,
            float(group["eps"]),
            float(group["weight_decay"]),
            bool(group.get("decoupled_weight_decay", self._decoupled)),
            bool(group["amsgrad"]),
        )

    def _op_attributes(self, group: dict) -> dict:
        if type(self)._update is not Adam._update:  # a subclass with its own update: optimizer_update
            return super()._op_attributes(group)
        _, b1, b2, eps, wd, decoupled, amsgrad = self._args(group)
        return dict(
            beta1=b1,
            beta2=b2,
            eps=eps,
            weight_decay=wd,
            decoupled=decoupled,
            amsgrad=amsgrad,
            maximize=bool(group.get("maximize", False)),
            inplace=True,
        )

    def _feed_names(self) -> tuple:
        return ("step",) if type(self)._update is Adam._update else super()._feed_names()

    def _update_call(self, group, attrs, b, names, i0, i1, params, grads, states, lr) -> tuple:
        if type(self)._update is not Adam._update:
            return super()._update_call(group, attrs, b, names, i0, i1, params, grads, states, lr)
        step_arr, step = b.feed("step")
        step_arr[()] = int(b.steps[i0]) + 1
        n = len(params)
        return _ops.adam_update, (params, grads, states[:n], states[n : 2 * n], states[2 * n :], lr, step), attrs

    def _update(self, group, p, g, state, step, layout) -> None:
        adam_numpy(p, g, state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq"), step, *self._args(group))


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (``p *= 1 - lr * weight_decay``)."""

    _decoupled = True

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, decoupled_weight_decay=True)


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
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = math.sqrt(1 - beta2**step)
    if amsgrad:
        np.maximum(vmax, v, out=vmax)
        denom = np.sqrt(vmax)
    else:
        denom = np.sqrt(v)
    denom /= bias_correction2_sqrt
    denom += eps
    p -= (lr / bias_correction1) * (m / denom)
