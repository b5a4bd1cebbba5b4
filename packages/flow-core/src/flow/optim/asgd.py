"""``flow.optim.ASGD`` (torch.optim.ASGD: averaged stochastic gradient descent), vectorised over flat buffers."""

from __future__ import annotations

import math

import numpy as np

from flow.optim._hyper import Real, as_real
from flow.optim._scalar_state import ScalarStates, as_dtype, f32, per_param
from flow.optim.errors import OptimizerError
from flow.optim.optimizer import _float


class _T0:
    """A real number or infinity (``t0=float("inf")``: never start averaging), not NaN."""

    def check(self, owner: str, name: str, value) -> float:
        x = as_real(owner, name, value)
        if math.isnan(x):
            raise OptimizerError(f"{owner}: Invalid t0 value: {value!r} ({name} must be a number or inf, not NaN)")
        return x


class ASGD(ScalarStates):
    """torch.optim.ASGD (Polyak and Juditsky, 1992): SGD with a decaying step ``eta`` and a running
    average ``ax`` of the parameters, started at step ``t0``.

    Each step: ``p *= 1 - lambd * eta``, ``p -= eta * g``, ``ax += mu * (p - ax)`` (``ax = p`` while
    ``mu`` is 1); then ``eta = lr / (1 + lambd * lr * t) ** alpha`` and ``mu = 1 / max(1, t - t0)`` for
    the next step. State: ``step``, ``eta``, ``mu`` (0-d tensors in ``state_dict()``, as in PyTorch),
    ``ax``; the average is the optimizer's ``state[p]["ax"]``.

    >>> opt = flow.optim.ASGD(model.parameters(), lr=1e-2, t0=100)
    """

    _hyper = {
        "lambd": Real("lambd value"),
        "alpha": Real("alpha value"),
        "t0": _T0(),
    }
    _scalar_states = ("eta", "mu")

    def __init__(
        self,
        params,
        lr=1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        return {"eta": 0.0, "mu": 1.0, "ax": 0.0}

    def _scalar_default(self, group: dict, name: str, step: int) -> float:
        lr = _float(group["lr"])
        if name == "eta":
            return f32(lr if step == 0 else lr / ((1 + float(group["lambd"]) * lr * step) ** float(group["alpha"])))
        return f32(1.0 if step == 0 else 1 / max(1, step - float(group["t0"])))

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, wd = _float(group["lr"]), float(group["weight_decay"])
        lambd, alpha, t0 = float(group["lambd"]), float(group["alpha"]), float(group["t0"])
        eta, mu, ax = state["eta"], state["mu"], state["ax"]
        was = layout[2]
        if not was["eta"]:
            eta[...] = f32(lr)
        if not was["mu"]:
            mu[...] = 1.0
        if not was["ax"]:
            ax[...] = 0
        eta_v, mu_v = per_param(eta, layout), per_param(mu, layout)
        if eta_v is None:  # only empty parameters
            return
        if wd != 0:
            g += wd * p
        p *= as_dtype(1 - lambd * eta_v, p.dtype)
        g *= as_dtype(eta_v, p.dtype)
        p -= g
        if isinstance(mu_v, float):
            if mu_v != 1:
                ax += (p - ax) * mu_v
            else:
                ax[...] = p
        else:
            np.copyto(ax, np.where(mu_v != 1, ax + (p - ax) * mu_v.astype(p.dtype), p))
        # the values of the next step, from this step's lr (torch's float32 scalars)
        eta[...] = f32(lr / ((1 + lambd * lr * step) ** alpha))
        mu[...] = f32(1 / max(1, step - t0))
