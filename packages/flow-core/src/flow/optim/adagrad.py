"""``flow.optim.Adagrad`` (torch.optim.Adagrad), vectorised over flat buffers."""

from __future__ import annotations

import numpy as np

from flow.optim._hyper import Real
from flow.optim._sparse_grad import RowState, as_float, no_weight_decay, sparse_step
from flow.optim.optimizer import Optimizer, _float


class Adagrad(Optimizer):
    """torch.optim.Adagrad: ``sum += g*g; p -= clr * g / (sqrt(sum) + eps)``, ``clr = lr / (1 + (t-1) lr_decay)``.

    As in PyTorch the state (``step`` = 0, ``sum`` = ``initial_accumulator_value``) is created
    when the optimizer is built, not at the first step. A sparse gradient (``nn.Embedding(sparse=True)``)
    updates ``sum`` and the parameter at its rows only (PyTorch's sparse path; no weight decay).
    """

    _hyper = {
        "lr_decay": Real("lr_decay value", 0.0),
        "initial_accumulator_value": Real("initial_accumulator_value value", 0.0),
    }

    def __init__(
        self,
        params,
        lr=1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            eps=eps,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def step(self, closure=None):
        """One Adagrad step (see :meth:`flow.optim.Optimizer.step`); sparse gradients update their rows only."""
        return sparse_step(self, closure, no_weight_decay("Adagrad"), _sparse_rows)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        self._buckets(len(self.param_groups) - 1)  # the state exists from the start, as in PyTorch

    def _init_bucket(self, group: dict, bucket) -> None:
        bucket.state("sum", float(group["initial_accumulator_value"]))
        bucket.present["sum"][:] = True

    def _state_names(self, group: dict) -> dict:
        return {"sum": float(group["initial_accumulator_value"])}

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, wd, eps = _float(group["lr"]), float(group["weight_decay"]), float(group["eps"])
        if wd != 0:
            g += wd * p
        clr = lr / (1 + (step - 1) * float(group["lr_decay"]))
        s = state["sum"]
        s += g * g
        std = np.sqrt(s)
        std += eps
        g /= std
        g *= clr
        p -= g


def _sparse_rows(group: dict, rs: RowState) -> tuple:
    """PyTorch's sparse Adagrad on a coalesced gradient: ``sum`` grows and the parameter moves at its rows."""
    clr = as_float(group["lr"]) / (1 + (rs.step - 1) * float(group["lr_decay"]))
    s = rs.state("sum", float(group["initial_accumulator_value"]))
    r, g = rs.rows, rs.values
    s[r] = s[r] + g * g
    std = np.sqrt(s[r]) + float(group["eps"])
    rs.p[r] = rs.p[r] + (-clr) * (g / std)
    return ("sum",)
