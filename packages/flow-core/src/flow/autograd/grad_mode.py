"""Grad mode: whether ops record autograd nodes."""

from __future__ import annotations

import functools


class _State:
    """Process-wide dispatcher state, read on every op; kept in one slotted object."""

    __slots__ = ("grad_enabled",)

    def __init__(self) -> None:
        self.grad_enabled = True


STATE = _State()


def is_grad_enabled() -> bool:
    return STATE.grad_enabled


class set_grad_enabled:
    """Context manager and function that turns gradient recording on or off."""

    def __init__(self, mode: bool) -> None:
        self.prev = STATE.grad_enabled
        self.mode = bool(mode)
        STATE.grad_enabled = self.mode

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        STATE.grad_enabled = self.prev


class _GradModeContext:
    mode = True

    def __enter__(self):
        self.prev = STATE.grad_enabled
        STATE.grad_enabled = self.mode
        return self

    def __exit__(self, *exc) -> None:
        STATE.grad_enabled = self.prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradModeContext):
    """Disable gradient recording (context manager or decorator), as ``torch.no_grad``."""

    mode = False


class enable_grad(_GradModeContext):
    """Enable gradient recording inside a ``no_grad`` block."""

    mode = True


class inference_mode(no_grad):
    """Alias of :class:`no_grad` (flow has no separate inference tensors)."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = not mode
