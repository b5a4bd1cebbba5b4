"""The 1cycle policy and reduce-on-plateau (``flow.optim.lr_scheduler.OneCycleLR`` / ``ReduceLROnPlateau``)."""

from __future__ import annotations

import math

from flow.optim._hyper import Choice, Flag, Int, Real
from flow.optim._lr_base import LRScheduler, _lrs, as_metric, check_args, check_epoch, check_optimizer, per_group
from flow.optim.errors import OptimizerError
from flow.optim.optimizer import Optimizer


class OneCycleLR(LRScheduler):
    """The 1cycle policy: warm up to ``max_lr`` then anneal far below the initial lr (cycling momentum)."""

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum=0.85,
        max_momentum=0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        o = "OneCycleLR"
        check_optimizer(o, optimizer)
        if total_steps is not None:
            Int("total_steps", 1).check(o, "total_steps", total_steps)
            n = int(total_steps)
        elif epochs is not None and steps_per_epoch is not None:
            check_args(
                o,
                {"epochs": Int("epochs", 1), "steps_per_epoch": Int("steps_per_epoch", 1)},
                dict(epochs=epochs, steps_per_epoch=steps_per_epoch),
            )
            n = int(epochs) * int(steps_per_epoch)
        else:
            raise OptimizerError(f"{o}: You must define either total_steps OR (epochs AND steps_per_epoch)")
        check_args(
            o,
            {
                "pct_start": Real("pct_start", 0.0, 1.0),
                "anneal_strategy": Choice("anneal_strategy", ("cos", "linear")),
                "cycle_momentum": Flag(),
                "div_factor": Real("div_factor", 0.0, lo_open=True),
                "final_div_factor": Real("final_div_factor", 0.0, lo_open=True),
                "three_phase": Flag(),
                "last_epoch": Int("last_epoch", -1),
            },
            dict(
                pct_start=pct_start,
                anneal_strategy=anneal_strategy,
                cycle_momentum=cycle_momentum,
                div_factor=div_factor,
                final_div_factor=final_div_factor,
                three_phase=three_phase,
                last_epoch=last_epoch,
            ),
        )
        max_lrs = per_group(o, "max_lr", optimizer, max_lr, Real("max_lr", 0.0, lo_open=True))
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise OptimizerError(
                    f"{o}: optimizer must support momentum or beta1 with `cycle_momentum` option enabled"
                )
            use_beta1 = "betas" in optimizer.defaults
            mspec = Real("momentum", 0.0, 1.0, hi_open=use_beta1)  # as beta1 it must stay < 1
            max_ms = per_group(o, "max_momentum", optimizer, max_momentum, mspec)
            base_ms = per_group(o, "base_momentum", optimizer, base_momentum, mspec)
        self.optimizer = optimizer
        self.total_steps = n
        if three_phase:
            self._schedule_phases = [
                dict(
                    end_step=float(pct_start * n) - 1,
                    start_lr="initial_lr",
                    end_lr="max_lr",
                    start_momentum="max_momentum",
                    end_momentum="base_momentum",
                ),
                dict(
                    end_step=float(2 * pct_start * n) - 2,
                    start_lr="max_lr",
                    end_lr="initial_lr",
                    start_momentum="base_momentum",
                    end_momentum="max_momentum",
                ),
                dict(
                    end_step=n - 1,
                    start_lr="initial_lr",
                    end_lr="min_lr",
                    start_momentum="max_momentum",
                    end_momentum="max_momentum",
                ),
            ]
        else:
            self._schedule_phases = [
                dict(
                    end_step=float(pct_start * n) - 1,
                    start_lr="initial_lr",
                    end_lr="max_lr",
                    start_momentum="max_momentum",
                    end_momentum="base_momentum",
                ),
                dict(
                    end_step=n - 1,
                    start_lr="max_lr",
                    end_lr="min_lr",
                    start_momentum="base_momentum",
                    end_momentum="max_momentum",
                ),
            ]
        self._anneal_func_type = anneal_strategy
        if last_epoch == -1:
            for lr, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = lr / div_factor
                group["max_lr"] = lr
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = use_beta1
            if last_epoch == -1:
                for m_max, m_base, group in zip(max_ms, base_ms, optimizer.param_groups):
                    if self.use_beta1:
                        group["betas"] = (m_max, *group["betas"][1:])
                    else:
                        group["momentum"] = m_max
                    group["max_momentum"] = m_max
                    group["base_momentum"] = m_base
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list:
        lrs = []
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise OptimizerError(
                f"OneCycleLR: Tried to step {step_num} times. The specified number of total steps is {self.total_steps}"
            )
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step_num <= end_step or i == len(self._schedule_phases) - 1:
                    pct = (step_num - start_step) / (end_step - start_step)
                    lr = self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        mom = self._anneal(group[phase["start_momentum"]], group[phase["end_momentum"]], pct)
                    break
                start_step = phase["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    group["betas"] = (mom, *group["betas"][1:])
                else:
                    group["momentum"] = mom
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` when a metric has not improved for ``patience`` epochs."""

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr=0,
        eps: float = 1e-8,
    ) -> None:
        o = "ReduceLROnPlateau"
        check_optimizer(o, optimizer)
        check_args(
            o,
            {
                "mode": Choice("mode", ("min", "max")),
                "factor": Real("Factor", 0.0, 1.0, hi_open=True),
                "patience": Int("patience", 0),
                "threshold": Real("threshold", 0.0),
                "threshold_mode": Choice("threshold mode", ("rel", "abs")),
                "cooldown": Int("cooldown", 0),
                "eps": Real("eps", 0.0),
            },
            dict(
                mode=mode,
                factor=factor,
                patience=patience,
                threshold=threshold,
                threshold_mode=threshold_mode,
                cooldown=cooldown,
                eps=eps,
            ),
        )
        min_lrs = per_group(o, "min_lr", optimizer, min_lr, Real("min_lr", 0.0))
        self.factor = factor
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr = None
            self.min_lrs = min_lrs
        else:
            self.default_min_lr = min_lr
            self.min_lrs = min_lrs
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = _lrs(optimizer)
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics, epoch: int | None = None) -> None:  # noqa: D102
        current = as_metric("ReduceLROnPlateau", metrics)
        check_epoch("ReduceLROnPlateau", epoch)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self.optimizer)

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise OptimizerError(
                    f"ReduceLROnPlateau: The number of param groups in the optimizer ({len(groups)}) "
                    f"differs from when ReduceLROnPlateau was initialized ({len(self.min_lrs)})"
                )
            self.min_lrs = [self.default_min_lr] * len(groups)
        for i, group in enumerate(groups):
            old = float(group["lr"])
            new = max(old * self.factor, self.min_lrs[i])
            if old - new > self.eps:
                group["lr"] = new

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        Choice("mode", ("min", "max")).check("ReduceLROnPlateau", "mode", mode)
        Choice("threshold mode", ("rel", "abs")).check("ReduceLROnPlateau", "threshold_mode", threshold_mode)
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)
