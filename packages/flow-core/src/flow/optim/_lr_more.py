"""Warm restarts, cyclical and polynomial schedules, and chaining (``flow.optim.lr_scheduler``'s
``CosineAnnealingWarmRestarts``, ``CyclicLR``, ``PolynomialLR``, ``ChainedScheduler``)."""

from __future__ import annotations

import math
import types
from collections.abc import Callable

from flow.optim._hyper import Choice, Flag, Int, Real, as_real
from flow.optim._lr_base import LRScheduler, _lrs, check_args, check_optimizer, per_group
from flow.optim._lr_cycle import ReduceLROnPlateau
from flow.optim.errors import OptimizerError, OptimizerTypeError
from flow.optim.optimizer import Optimizer


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from the base lr to ``eta_min`` over ``T_i`` epochs, restarting at the base lr; the
    first period is ``T_0`` epochs and each next one ``T_mult`` times longer (SGDR, Loshchilov & Hutter).

    ``step(epoch)`` takes fractional epochs too (``sched.step(epoch + i / iters)`` within an epoch).
    """

    def __init__(
        self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1
    ) -> None:
        o = "CosineAnnealingWarmRestarts"
        check_optimizer(o, optimizer)
        check_args(
            o,
            {"T_0": Int("T_0", 1), "T_mult": Int("T_mult", 1), "eta_min": Real("eta_min", 0.0)},
            dict(T_0=T_0, T_mult=T_mult, eta_min=eta_min),
        )
        self.T_0 = T_0
        self.T_i = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        e = self.eta_min
        return [e + (base - e) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2 for base in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch, or go to ``epoch`` (a real number >= 0) given in closed form."""
        if epoch is not None:
            x = as_real(type(self).__name__, "epoch", epoch)
            if not (math.isfinite(x) and x >= 0):
                raise OptimizerError(
                    f"CosineAnnealingWarmRestarts: Invalid epoch: {epoch!r} (epoch must be a finite number >= 0)"
                )
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        elif epoch >= self.T_0:
            if self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:
                # the restart that epoch falls in: T_0 * (T_mult**n - 1) / (T_mult - 1) <= epoch
                n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult**n
        else:
            self.T_i = self.T_0
            self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)


class PolynomialLR(LRScheduler):
    """Decay the lr to 0 over ``total_iters`` epochs as ``(1 - epoch / total_iters) ** power``."""

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1) -> None:
        check_optimizer("PolynomialLR", optimizer)
        # a negative power would divide by zero when the lr reaches 0
        check_args(
            "PolynomialLR",
            {"total_iters": Int("total_iters", 1), "power": Real("power", 0.0)},
            dict(total_iters=total_iters, power=power),
        )
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        decay = ((1.0 - self.last_epoch / self.total_iters) / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** (
            self.power
        )
        return [g["lr"] * decay for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        return [
            base * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
            for base in self.base_lrs
        ]


_MODES = ("triangular", "triangular2", "exp_range")


class CyclicLR(LRScheduler):
    """Cycle the lr between ``base_lr`` and ``max_lr`` (Smith, 2017), stepped after every batch.

    A cycle rises over ``step_size_up`` steps and falls over ``step_size_down`` (default: the same);
    ``mode`` scales the amplitude: ``"triangular"`` (constant), ``"triangular2"`` (halved every cycle),
    ``"exp_range"`` (``gamma ** step``), or ``scale_fn(x)`` of the cycle (``scale_mode="cycle"``) or of
    the step (``"iterations"``). ``cycle_momentum`` moves the momentum (or Adam's ``beta1``) the other
    way, between ``max_momentum`` and ``base_momentum``.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        base_lr,
        max_lr,
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn: Callable[[float], float] | None = None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum=0.8,
        max_momentum=0.9,
        last_epoch: int = -1,
    ) -> None:
        o = "CyclicLR"
        check_optimizer(o, optimizer)
        # every check before anything is written into the optimizer's groups
        base_lrs = per_group(o, "base_lr", optimizer, base_lr, Real("base_lr", 0.0))
        max_lrs = per_group(o, "max_lr", optimizer, max_lr, Real("max_lr", 0.0))
        check_args(
            o,
            {
                "step_size_up": Real("step_size_up", 0.0, lo_open=True),
                "gamma": Real("gamma", 0.0, lo_open=True),
                "scale_mode": Choice("scale_mode", ("cycle", "iterations")),
                "cycle_momentum": Flag(),
                "last_epoch": Int("last_epoch", -1),
            },
            dict(
                step_size_up=step_size_up,
                gamma=gamma,
                scale_mode=scale_mode,
                cycle_momentum=cycle_momentum,
                last_epoch=last_epoch,
            ),
        )
        if step_size_down is not None:
            Real("step_size_down", 0.0).check(o, "step_size_down", step_size_down)
        if scale_fn is None:
            Choice("mode", _MODES).check(o, "mode", mode)
        elif not callable(scale_fn):
            raise OptimizerTypeError(f"{o}: scale_fn must be a function of one number, got {type(scale_fn).__name__}")
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise OptimizerError(
                    f"{o}: optimizer must support momentum or beta1 with `cycle_momentum` option enabled "
                    f"({type(optimizer).__name__} has neither; pass cycle_momentum=False)"
                )
            use_beta1 = "betas" in optimizer.defaults
            mspec = Real("momentum", 0.0, 1.0, hi_open=use_beta1)  # as beta1 it must stay < 1
            base_ms = per_group(o, "base_momentum", optimizer, base_momentum, mspec)
            max_ms = per_group(o, "max_momentum", optimizer, max_momentum, mspec)
        self.optimizer = optimizer
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = max_lrs
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        self.mode = mode
        self.gamma = gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = use_beta1
            self.base_momentums = base_ms
            self.max_momentums = max_ms
            if last_epoch == -1:
                for m_max, m_base, group in zip(max_ms, base_ms, optimizer.param_groups):
                    if use_beta1:
                        group["betas"] = (m_max, *group["betas"][1:])
                    else:
                        group["momentum"] = m_max
                    group["max_momentum"] = m_max
                    group["base_momentum"] = m_base
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        # the built-in modes fix the scale mode, as in PyTorch
        if self._scale_fn_custom is None:
            self.scale_mode = "iterations" if self.mode == "exp_range" else "cycle"

    def scale_fn(self, x: float) -> float:
        """The amplitude's scale at cycle (or step) ``x``."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma**x

    def get_lr(self) -> list:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * scale_factor * scale for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, m_base, m_max in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                momentum = m_max - (m_max - m_base) * scale_factor * scale
                if self.use_beta1:
                    group["betas"] = (momentum, *group["betas"][1:])
                else:
                    group["momentum"] = momentum
        return lrs

    def state_dict(self) -> dict:
        """Every attribute but the optimizer; a ``scale_fn`` that is a plain function is not saved (an object
        with ``__call__`` saves its ``__dict__``), as in PyTorch."""
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_scale_fn_custom")}
        fn = self._scale_fn_custom
        sd["_scale_fn_custom"] = None if fn is None or isinstance(fn, types.FunctionType) else dict(fn.__dict__)
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        if not isinstance(state_dict, dict):
            raise OptimizerTypeError(
                f"CyclicLR: load_state_dict expects a dict (from state_dict()), got {type(state_dict).__name__}"
            )
        state_dict = dict(state_dict)
        fn = state_dict.pop("_scale_fn_custom", None)
        state_dict.pop("_scale_fn_ref", None)  # a state dict saved by PyTorch
        self.__dict__.update(state_dict)
        if fn is not None and self._scale_fn_custom is not None:
            self._scale_fn_custom.__dict__.update(fn)
        self._init_scale_fn()


class ChainedScheduler(LRScheduler):
    """Step several schedulers of one optimizer together: each ``step()`` calls every one's ``step()`` in
    order, so their (chainable) factors multiply."""

    def __init__(self, schedulers, optimizer: Optimizer | None = None) -> None:
        o = "ChainedScheduler"
        if not isinstance(schedulers, (list, tuple)):
            raise OptimizerTypeError(
                f"{o}: schedulers must be a list of LR schedulers, got {type(schedulers).__name__}"
                + (" (the optimizer comes second, or from the schedulers)" if isinstance(schedulers, Optimizer) else "")
            )
        if len(schedulers) < 1:
            raise OptimizerError(f"{o} expects at least one scheduler to be chained, but got no scheduler")
        if optimizer is not None:
            check_optimizer(o, optimizer)
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise OptimizerError(
                    f"{o} does not support ReduceLROnPlateau (its step() needs the metric), but got one at index {i}"
                )
            if not isinstance(s, LRScheduler):
                raise OptimizerTypeError(f"{o}: schedulers[{i}] must be an LR scheduler, got {type(s).__name__}")
        optimizer = optimizer or schedulers[0].optimizer
        for i, s in enumerate(schedulers):
            if s.optimizer is not optimizer:
                raise OptimizerError(
                    f"{o} expects all schedulers to belong to the same optimizer, but scheduler "
                    f"{type(s).__name__} at index {i} has a different one"
                )
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = _lrs(self._schedulers[-1].optimizer)

    def step(self) -> None:  # noqa: D102
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self._schedulers[-1].optimizer)

    def state_dict(self) -> dict:
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        if not isinstance(state_dict, dict):
            raise OptimizerTypeError(
                f"ChainedScheduler: load_state_dict expects a dict (from state_dict()), got {type(state_dict).__name__}"
            )
        state_dict = dict(state_dict)
        scheds = state_dict.pop("_schedulers", [])
        if len(scheds) != len(self._schedulers):
            raise OptimizerError(
                f"ChainedScheduler: loaded state dict has {len(scheds)} schedulers, this one chains "
                f"{len(self._schedulers)}"
            )
        self.__dict__.update(state_dict)
        for s, sd in zip(self._schedulers, scheds):
            s.load_state_dict(sd)
