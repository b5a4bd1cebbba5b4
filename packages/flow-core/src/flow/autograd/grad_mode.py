"""Grad mode: whether ops record autograd nodes."""

from __future__ import annotations

import functools
import threading


class _State(threading.local):
    """Grad mode, per thread as in PyTorch: a ``no_grad()`` in one thread leaves every other thread
    recording, and each new thread starts with grad enabled. Read on every op that needs grad."""

    def __init__(self) -> None:
        self.grad_enabled = True


STATE = _State()


def is_grad_enabled() -> bool:
    return STATE.grad_enabled


class set_grad_enabled:
    """Turn gradient recording on or off: as a function (``flow.set_grad_enabled(False)``), a
    context manager (``with flow.set_grad_enabled(False):``) or a decorator, as in PyTorch."""

    def __init__(self, mode: bool) -> None:
        self.prev = STATE.grad_enabled
        self.mode = bool(mode)
        STATE.grad_enabled = self.mode

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        STATE.grad_enabled = self.prev

    def __call__(self, fn):
        STATE.grad_enabled = self.prev  # used as a decorator: the mode applies inside fn only
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = STATE.grad_enabled
            STATE.grad_enabled = mode
            try:
                return fn(*args, **kwargs)
            finally:
                STATE.grad_enabled = prev

        return wrapper


class _GradModeContext:
    mode = True

    def __enter__(self):
        self.prev = STATE.grad_enabled
        STATE.grad_enabled = self.mode
        return self

    def __exit__(self, *exc) -> None:
        STATE.grad_enabled = self.prev

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = STATE.grad_enabled
            STATE.grad_enabled = mode
            try:
                return fn(*args, **kwargs)
            finally:
                STATE.grad_enabled = prev

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
