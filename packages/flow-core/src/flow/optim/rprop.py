"""``flow.optim.Rprop`` (torch.optim.Rprop: resilient backpropagation), vectorised over flat buffers."""

from __future__ import annotations

import math

import numpy as np

from flow.optim._hyper import _show, as_real
from flow.optim.errors import OptimizerError, OptimizerTypeError
from flow.optim.optimizer import Optimizer, _float


class _Etas:
    """``(etaminus, etaplus)`` with ``0 < etaminus < 1 < etaplus``."""

    def check(self, owner: str, name: str, value) -> tuple:
        a, b = _pair(owner, name, value)
        if not (0.0 < a < 1.0 < b):
            raise OptimizerError(
                f"{owner}: Invalid eta values: {a}, {b} ({name} must be (etaminus, etaplus) with "
                "0 < etaminus < 1 < etaplus)"
            )
        return a, b


class _StepSizes:
    """``(min, max)`` step sizes with ``0 <= min <= max`` (``max`` may be infinite)."""

    def check(self, owner: str, name: str, value) -> tuple:
        a, b = _pair(owner, name, value)
        if not (math.isfinite(a) and 0.0 <= a <= b):
            raise OptimizerError(
                f"{owner}: Invalid step_sizes: {a}, {b} ({name} must be (min, max) with 0 <= min <= max, min finite)"
            )
        return a, b


def _pair(owner: str, name: str, value) -> tuple:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise OptimizerTypeError(
            f"{owner}: {name} must be a tuple of 2 floats, got {type(value).__name__} {_show(value)}"
        )
    return as_real(owner, f"{name}[0]", value[0]), as_real(owner, f"{name}[1]", value[1])


class Rprop(Optimizer):
    """torch.optim.Rprop: each element moves by its own step size against the sign of its gradient.

    A step size grows by ``etaplus`` while the gradient keeps its sign and shrinks by ``etaminus`` when
    it flips (that step is then skipped and the gradient remembered as 0), clamped to ``step_sizes``.
    The step sizes start at the group's ``lr`` of the parameter's first step; later changes of ``lr``
    have no effect, as in PyTorch. State: ``step``, ``prev``, ``step_size``.

    >>> opt = flow.optim.Rprop(model.parameters(), lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50))
    """

    _hyper = {"etas": _Etas(), "step_sizes": _StepSizes()}

    def __init__(
        self,
        params,
        lr=1e-2,
        etas=(0.5, 1.2),
        step_sizes=(1e-6, 50),
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, maximize=maximize)
        super().__init__(params, defaults)

    def _state_names(self, group: dict) -> dict:
        return {"prev": 0.0, "step_size": 0.0}

    def _update(self, group, p, g, state, step, layout) -> None:
        etaminus, etaplus = (float(e) for e in group["etas"])
        smin, smax = (float(s) for s in group["step_sizes"])
        prev, size = state["prev"], state["step_size"]
        was = layout[2]
        if not was["prev"]:
            prev[...] = 0
        if not was["step_size"]:
            size[...] = _float(group["lr"])
        prod = g * prev
        factor = np.where(prod > 0, etaplus, np.where(prod < 0, etaminus, 1.0)).astype(size.dtype)
        size *= factor
        np.clip(size, smin, smax, out=size)
        g[prod < 0] = 0  # a sign change: no step this time, and no direction to compare with next time
        np.sign(g, out=prod)
        prod *= size
        p -= prod
        prev[...] = g
