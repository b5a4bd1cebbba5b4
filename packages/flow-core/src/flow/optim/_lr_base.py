"""The base of flow's LR schedulers (:class:`LRScheduler`) and the checks of their arguments."""

from __future__ import annotations

import warnings

from flow.optim._hyper import Int, Real, as_real
from flow.optim.errors import OptimizerError, OptimizerTypeError
from flow.optim.optimizer import Optimizer


def _lrs(optimizer: Optimizer, key: str = "lr") -> list:
    return [group[key] for group in optimizer.param_groups]


def check_optimizer(owner: str, optimizer) -> None:
    if not isinstance(optimizer, Optimizer):
        raise OptimizerTypeError(
            f"{owner}: {type(optimizer).__name__} is not an Optimizer (the first argument "
            "must be the flow.optim optimizer to schedule)"
        )


def check_args(owner: str, specs: dict, values: dict) -> None:
    """Check each ``values[name]`` against ``specs[name]`` (a :mod:`flow.optim._hyper` spec)."""
    for name, spec in specs.items():
        spec.check(owner, name, values[name])


def per_group(owner: str, name: str, optimizer: Optimizer, value, spec) -> list:
    """``value`` (one for all groups, or a list/tuple with one per group) as a list, each checked with ``spec``."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise OptimizerError(f"{owner}: expected {n} values for {name} (one per parameter group), got {len(value)}")
        vals = list(value)
    else:
        vals = [value] * n
    for i, v in enumerate(vals):
        spec.check(owner, name if not isinstance(value, (list, tuple)) else f"{name}[{i}]", v)
    return vals


def check_int_list(owner: str, name: str, values, lo: int = 0, increasing: bool = False) -> list:
    """``values`` as a list of ints ``>= lo`` (strictly increasing if asked)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise OptimizerTypeError(f"{owner}: {name} must be a list of ints, got {type(values).__name__} {values!r}")
    out = list(values)
    spec = Int(f"{name} entry", lo)
    for i, v in enumerate(out):
        spec.check(owner, f"{name}[{i}]", v)
    if increasing and any(b <= a for a, b in zip(out, out[1:])):
        raise OptimizerError(f"{owner}: {name} must be strictly increasing, got {out}")
    return [int(v) for v in out]


def check_epoch(owner: str, epoch) -> None:
    if epoch is not None:
        Int("epoch", 0).check(owner, "epoch", epoch)


class LRScheduler:
    """Base class: ``step()`` advances ``last_epoch`` and sets each group's lr to :meth:`get_lr`."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        owner = type(self).__name__
        check_optimizer(owner, optimizer)
        Int("last_epoch", -1).check(owner, "last_epoch", last_epoch)
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                        "a scheduler with last_epoch >= 0 (load the optimizer's state first)"
                    )
        for i, group in enumerate(optimizer.param_groups):
            Real("initial learning rate", 0.0, tensor=True).check(
                owner, f"param_groups[{i}]['initial_lr']", group["initial_lr"]
            )
        self.base_lrs = _lrs(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        self._is_initial = False
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def state_dict(self) -> dict:
        """Every attribute except the optimizer."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        if not isinstance(state_dict, dict):
            raise OptimizerTypeError(
                f"{type(self).__name__}: load_state_dict expects a dict (from state_dict()), "
                f"got {type(state_dict).__name__}"
            )
        self.__dict__.update(state_dict)

    def get_last_lr(self) -> list:
        """The learning rates set by the last :meth:`step`."""
        return self._last_lr

    def get_lr(self) -> list:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        check_epoch(type(self).__name__, epoch)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(
                "passing an epoch to step() is deprecated; it uses the closed form when there is one",
                UserWarning,
                stacklevel=2,
            )
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)


def as_metric(owner: str, metrics) -> float:
    """A scheduler's metric (a real number or a one-element floating-point Tensor) as a float."""
    return as_real(owner, "metrics", metrics, tensor=True)
