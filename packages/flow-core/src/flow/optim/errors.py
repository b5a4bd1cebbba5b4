"""The exceptions of ``flow.optim``: bad hyper-parameters, parameter groups and state dicts."""

from __future__ import annotations

from flow.errors import FlowError


class OptimizerError(FlowError, ValueError):
    """An optimizer or LR scheduler got a value out of range, an invalid parameter group or a state dict
    that does not fit (``except ValueError`` catches it); the message names the optimizer, the argument
    and the value."""


class OptimizerTypeError(OptimizerError, TypeError):
    """An optimizer or LR scheduler argument of the wrong type (``except TypeError`` catches it)."""
