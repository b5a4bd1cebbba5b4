"""Exceptions flow raises for user errors; each names what was wrong."""

from __future__ import annotations


class FlowError(RuntimeError):
    """Base class of flow's own errors."""


class OpError(FlowError, ValueError):
    """An op was called with arguments it cannot take (shape, dtype, device, range)."""

    def __init__(self, op: str, message: str) -> None:
        self.op = op
        super().__init__(f"{op}: {message}")


class OpTypeError(OpError, TypeError):
    """An op got an argument of the wrong type or dtype."""


class OpIndexError(OpError, IndexError):
    """An op got an index or dim out of range."""


class OpMemoryError(FlowError, MemoryError):
    """An op ran out of memory; ``except MemoryError`` catches it, and ``op`` names the op."""

    def __init__(self, op: str, message: str) -> None:
        self.op = op
        super().__init__(f"{op}: {message}")


class AutogradError(FlowError):
    """Autograd was asked for something it cannot do (a gradient for an integer tensor, changing
    ``requires_grad`` of a computed tensor, backward through a freed graph)."""


class KernelNotFoundError(FlowError, NotImplementedError):
    """No kernel is registered for an (op, device type, dtype)."""


class PluginError(FlowError, ImportError):
    """A plugin failed to load or to register."""


class RegistrationError(FlowError, ValueError):
    """A duplicate or malformed registration."""


class FeatureNotInstalledError(FlowError, AttributeError):
    """An API that a plugin provides (``flow.placement``, ``Tensor.to_global``, ...) was used
    without the package that provides it (see :mod:`flow.provided`)."""
