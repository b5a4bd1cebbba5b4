"""Learning-rate schedulers (``flow.optim.lr_scheduler``), value-for-value as torch.optim.lr_scheduler.

Each scheduler updates ``group["lr"]`` of its optimizer's param groups on :meth:`step` with
PyTorch's (chainable, recursive) formulas, so a run gives the same learning rates as PyTorch's.
``state_dict()`` holds every attribute but the optimizer (and, for lambda schedulers, the
functions), so it can be saved with :func:`flow.save`. Every argument is checked for type and
range when a scheduler is made (:class:`~flow.optim.OptimizerTypeError` /
:class:`~flow.optim.OptimizerError`, naming the scheduler, the argument and the value).

>>> sched = flow.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
>>> for epoch in range(30): train(); sched.step()
"""

from __future__ import annotations

import math
import types
from bisect import bisect_right
from collections import Counter

from flow.optim._hyper import Int, Real
from flow.optim._lr_base import LRScheduler, _lrs, check_args, check_int_list, check_optimizer
from flow.optim._lr_cycle import OneCycleLR, ReduceLROnPlateau
from flow.optim._lr_more import ChainedScheduler, CosineAnnealingWarmRestarts, CyclicLR, PolynomialLR
from flow.optim.errors import OptimizerError, OptimizerTypeError
from flow.optim.optimizer import Optimizer

__all__ = [
    "LRScheduler",
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "CosineAnnealingLR",
    "LinearLR",
    "ConstantLR",
    "OneCycleLR",
    "SequentialLR",
    "ReduceLROnPlateau",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "PolynomialLR",
    "ChainedScheduler",
]

_LRScheduler = LRScheduler
_GAMMA = Real("gamma", 0.0, lo_open=True)


class _LambdaBase(LRScheduler):
    def __init__(self, optimizer: Optimizer, lr_lambda, last_epoch: int = -1) -> None:
        owner = type(self).__name__
        check_optimizer(owner, optimizer)
        n = len(optimizer.param_groups)
        if not isinstance(lr_lambda, (list, tuple)):
            fns = [lr_lambda] * n
        else:
            if len(lr_lambda) != n:
                raise OptimizerError(
                    f"{owner}: Expected {n} lr_lambdas (one per parameter group), but got {len(lr_lambda)}"
                )
            fns = list(lr_lambda)
        for i, fn in enumerate(fns):
            if not callable(fn):
                what = "lr_lambda" if not isinstance(lr_lambda, (list, tuple)) else f"lr_lambda[{i}]"
                raise OptimizerTypeError(
                    f"{owner}: {what} must be a function of the epoch, got {type(fn).__name__} {fn!r}"
                )
        self.optimizer = optimizer
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict:
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        sd["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else dict(fn.__dict__) for fn in self.lr_lambdas]
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        fns = state_dict.pop("lr_lambdas", [])
        self.__dict__.update(state_dict)
        for idx, fn in enumerate(fns):
            if fn is not None:
                self.lr_lambdas[idx].__dict__.update(fn)


class LambdaLR(_LambdaBase):
    """``lr = base_lr * lr_lambda(epoch)`` (one function, or one per group)."""

    def get_lr(self) -> list:
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(_LambdaBase):
    """``lr *= lr_lambda(epoch)`` at each step after the first."""

    def get_lr(self) -> list:
        if self._is_initial:
            return _lrs(self.optimizer)
        return [g["lr"] * fn(self.last_epoch) for fn, g in zip(self.lr_lambdas, self.optimizer.param_groups)]


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        check_optimizer("StepLR", optimizer)
        check_args(
            "StepLR", {"step_size": Int("step_size", 1), "gamma": _GAMMA}, dict(step_size=step_size, gamma=gamma)
        )
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each milestone epoch."""

    def __init__(self, optimizer: Optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1) -> None:
        check_optimizer("MultiStepLR", optimizer)
        milestones = check_int_list("MultiStepLR", "milestones", milestones, 0)
        check_args("MultiStepLR", {"gamma": _GAMMA}, dict(gamma=gamma))
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.milestones = Counter(self.milestones)  # a plain dict after a save/load round trip

    def get_lr(self) -> list:
        if self.last_epoch not in self.milestones:
            return _lrs(self.optimizer)
        return [g["lr"] * self.gamma ** self.milestones[self.last_epoch] for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        ms = sorted(Counter(self.milestones).elements())
        return [base * self.gamma ** bisect_right(ms, self.last_epoch) for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """Multiply the lr by ``factor`` until epoch ``total_iters``."""

    def __init__(
        self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1
    ) -> None:
        check_optimizer("ConstantLR", optimizer)
        # factor 0 would divide by zero when the lr is restored at total_iters
        check_args(
            "ConstantLR",
            {
                "factor": Real("Constant multiplicative factor", 0.0, 1.0, lo_open=True),
                "total_iters": Int("total_iters", 0),
            },
            dict(factor=factor, total_iters=total_iters),
        )
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch == 0:
            return [g["lr"] * self.factor for g in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return _lrs(self.optimizer)
        return [g["lr"] * (1.0 / self.factor) for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        return [
            base * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)) for base in self.base_lrs
        ]


class LinearLR(LRScheduler):
    """Scale the lr linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` epochs."""

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        check_optimizer("LinearLR", optimizer)
        check_args(
            "LinearLR",
            {
                "start_factor": Real("Starting multiplicative factor", 0.0, 1.0, lo_open=True),
                "end_factor": Real("Ending multiplicative factor", 0.0, 1.0),
                "total_iters": Int("total_iters", 1),
            },
            dict(start_factor=start_factor, end_factor=end_factor, total_iters=total_iters),
        )
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch == 0:
            return [g["lr"] * self.start_factor for g in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        d = self.end_factor - self.start_factor
        return [
            g["lr"] * (1.0 + d / (self.total_iters * self.start_factor + (self.last_epoch - 1) * d))
            for g in self.optimizer.param_groups
        ]

    def _get_closed_form_lr(self) -> list:
        return [
            base
            * (
                self.start_factor
                + (self.end_factor - self.start_factor) * min(self.total_iters, self.last_epoch) / self.total_iters
            )
            for base in self.base_lrs
        ]


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        check_optimizer("ExponentialLR", optimizer)
        check_args("ExponentialLR", {"gamma": _GAMMA}, dict(gamma=gamma))
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self._is_initial:
            return _lrs(self.optimizer)
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        return [base * self.gamma**self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the base lr to ``eta_min`` over ``T_max`` epochs (PyTorch's recursive form)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        check_optimizer("CosineAnnealingLR", optimizer)
        check_args(
            "CosineAnnealingLR",
            {"T_max": Int("T_max", 1), "eta_min": Real("eta_min", 0.0)},
            dict(T_max=T_max, eta_min=eta_min),
        )
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        groups, T, e = self.optimizer.param_groups, self.T_max, self.eta_min
        if self._is_initial:
            return _lrs(self.optimizer)
        if self._step_count == 1 and self.last_epoch > 0:
            return [e + (base - e) * (1 + math.cos(self.last_epoch * math.pi / T)) / 2 for base in self.base_lrs]
        if (self.last_epoch - 1 - T) % (2 * T) == 0:
            return [g["lr"] + (base - e) * (1 - math.cos(math.pi / T)) / 2 for base, g in zip(self.base_lrs, groups)]
        return [
            (1 + math.cos(math.pi * self.last_epoch / T))
            / (1 + math.cos(math.pi * (self.last_epoch - 1) / T))
            * (g["lr"] - e)
            + e
            for g in groups
        ]

    def _get_closed_form_lr(self) -> list:
        return [
            self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
            for base in self.base_lrs
        ]


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after the other, switching at each of ``milestones``."""

    def __init__(self, optimizer: Optimizer, schedulers: list, milestones: list, last_epoch: int = -1) -> None:
        check_optimizer("SequentialLR", optimizer)
        if not isinstance(schedulers, (list, tuple)) or len(schedulers) < 1:
            raise OptimizerError(f"SequentialLR expects a list of at least one scheduler, got {schedulers!r}")
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise OptimizerError(f"SequentialLR does not support ReduceLROnPlateau (scheduler at index {i})")
            if not isinstance(s, LRScheduler):
                raise OptimizerTypeError(
                    f"SequentialLR: schedulers[{i}] must be an LR scheduler, got {type(s).__name__}"
                )
            if getattr(s, "optimizer", None) is not optimizer:
                raise OptimizerError(
                    f"SequentialLR expects all schedulers to belong to the same optimizer, but "
                    f"scheduler {type(s).__name__} at index {i} has a different one"
                )
        milestones = check_int_list("SequentialLR", "milestones", milestones, 1, increasing=True)
        Int("last_epoch", -1).check("SequentialLR", "last_epoch", last_epoch)
        if len(milestones) != len(schedulers) - 1:
            raise OptimizerError(
                "SequentialLR expects one milestone fewer than schedulers, got "
                f"{len(schedulers)} schedulers and {len(milestones)} milestones"
            )
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self._recursive_undo()
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = self._schedulers[idx].get_last_lr()

    def _recursive_undo(self, sched=None) -> None:
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self._recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:  # noqa: D102
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict:
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        scheds = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        for s, sd in zip(self._schedulers, scheds):
            s.load_state_dict(sd)
