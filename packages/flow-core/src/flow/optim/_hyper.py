"""Type and range checks of optimizer and LR-scheduler hyper-parameters.

Each optimizer declares a table ``{argument: spec}`` (:attr:`flow.optim.Optimizer._hyper`) and the
base class checks every group against it when the group is added, loaded from a state dict, or
changed before a step. A failed check raises :class:`~flow.optim.errors.OptimizerTypeError` for a
value of the wrong type and :class:`~flow.optim.errors.OptimizerError` (a ``ValueError``) for one
out of range, each naming the optimizer, the argument and the value, as in ``SGD: Invalid learning
rate: -1 (lr must be >= 0)``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from flow.optim.errors import OptimizerError, OptimizerTypeError


def _show(value) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def _tensor_scalar(value):
    """A one-element floating-point flow Tensor's value, else None."""
    from flow._tensor import Tensor

    if isinstance(value, Tensor):
        if value.dtype.is_floating_point and value.numel() == 1:
            return float(value.item())
        return None
    return None


def as_real(owner: str, name: str, value, tensor: bool = False) -> float:
    """``value`` as a float, or :class:`OptimizerTypeError` naming ``owner`` and ``name``.

    Accepts Python and NumPy reals (not bools); ``tensor``: also a one-element floating-point Tensor."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        t = _tensor_scalar(value) if tensor else None
        if t is not None:
            return t
        kinds = "a real number" + (" or a one-element floating-point Tensor" if tensor else "")
        raise OptimizerTypeError(f"{owner}: {name} must be {kinds}, got {type(value).__name__} {_show(value)}")
    return float(value)


class Real:
    """A finite real in ``[lo, hi]`` (``lo_open`` / ``hi_open`` exclude the bound)."""

    def __init__(
        self,
        desc: str,
        lo: float | None = None,
        hi: float | None = None,
        *,
        lo_open: bool = False,
        hi_open: bool = False,
        tensor: bool = False,
        finite: bool = True,
    ) -> None:
        self.desc, self.lo, self.hi, self.lo_open, self.hi_open = desc, lo, hi, lo_open, hi_open
        self.tensor, self.finite = tensor, finite

    def expect(self, name: str) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {self.hi:g}")
        cond = " and ".join(parts)
        if not self.finite:
            return f"{name} must be {cond}"
        return f"{name} must be a finite number{' ' + cond if cond else ''}"

    def check(self, owner: str, name: str, value) -> float:
        x = as_real(owner, name, value, self.tensor)
        ok = not math.isnan(x) and (not self.finite or math.isfinite(x))
        if ok and self.lo is not None:
            ok = x > self.lo if self.lo_open else x >= self.lo
        if ok and self.hi is not None:
            ok = x < self.hi if self.hi_open else x <= self.hi
        if not ok:
            raise OptimizerError(f"{owner}: Invalid {self.desc}: {_show(value)} ({self.expect(name)})")
        return x


class Int:
    """An integer (not a bool) ``>= lo``."""

    def __init__(self, desc: str, lo: int | None = None) -> None:
        self.desc, self.lo = desc, lo

    def check(self, owner: str, name: str, value) -> int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
            raise OptimizerTypeError(f"{owner}: {name} must be an int, got {type(value).__name__} {_show(value)}")
        if self.lo is not None and value < self.lo:
            raise OptimizerError(f"{owner}: Invalid {self.desc}: {_show(value)} ({name} must be >= {self.lo})")
        return int(value)


class Flag:
    """A bool."""

    def __init__(self, desc: str = "") -> None:
        self.desc = desc

    def check(self, owner: str, name: str, value) -> bool:
        if not isinstance(value, (bool, np.bool_)):
            raise OptimizerTypeError(f"{owner}: {name} must be a bool, got {type(value).__name__} {_show(value)}")
        return bool(value)


class Choice:
    """One of a few strings."""

    def __init__(self, desc: str, choices: tuple) -> None:
        self.desc, self.choices = desc, tuple(choices)

    def check(self, owner: str, name: str, value):
        if not isinstance(value, str):
            raise OptimizerTypeError(f"{owner}: {name} must be a str, got {type(value).__name__} {_show(value)}")
        if value not in self.choices:
            raise OptimizerError(
                f"{owner}: Invalid {self.desc}: {value!r} ({name} must be one of {', '.join(map(repr, self.choices))})"
            )
        return value


class Betas:
    """A pair of coefficients, each in ``[0, 1)``."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.items = [Real(f"beta parameter at index {i}", 0.0, 1.0, hi_open=True) for i in range(n)]

    def check(self, owner: str, name: str, value) -> tuple:
        if not isinstance(value, (tuple, list)) or len(value) != self.n:
            raise OptimizerTypeError(
                f"{owner}: {name} must be a tuple of {self.n} floats, got {type(value).__name__} {_show(value)}"
            )
        return tuple(spec.check(owner, f"{name}[{i}]", b) for i, (spec, b) in enumerate(zip(self.items, value)))


# The arguments most optimizers share; a subclass's own table adds to / overrides these.
COMMON = {
    "lr": Real("learning rate", 0.0, tensor=True),
    "weight_decay": Real("weight_decay value", 0.0),
    "eps": Real("epsilon value", 0.0),
    "momentum": Real("momentum value", 0.0),
    "betas": Betas(),
    "maximize": Flag(),
}


def check_group(owner: str, specs: dict, group: dict) -> None:
    """Check every argument of ``group`` that ``specs`` describes (other keys are the user's own)."""
    for name, spec in specs.items():
        if name in group:
            spec.check(owner, name, group[name])
