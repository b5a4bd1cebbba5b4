"""Forward-hook handles and the global module hooks (``register_module_forward_*_hook``)."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Callable

__all__ = ["RemovableHandle", "register_module_forward_pre_hook", "register_module_forward_hook"]

# Hooks that run around every module's forward (``register_module_forward_*_hook``).
_GLOBAL_PRE_HOOKS: OrderedDict = OrderedDict()
_GLOBAL_HOOKS: OrderedDict = OrderedDict()


class RemovableHandle:
    """Returned by the ``register_*_hook`` methods; ``handle.remove()`` takes the hook off again."""

    _next_id = itertools.count()

    def __init__(self, hooks: dict, *extra: dict) -> None:
        self.id = next(RemovableHandle._next_id)
        self._dicts = (hooks,) + extra

    def remove(self) -> None:
        for d in self._dicts:
            d.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def register_module_forward_pre_hook(hook: Callable) -> RemovableHandle:
    """Run ``hook(module, args)`` before the forward of every module (a global pre-hook)."""
    h = RemovableHandle(_GLOBAL_PRE_HOOKS)
    _GLOBAL_PRE_HOOKS[h.id] = hook
    return h


def register_module_forward_hook(hook: Callable) -> RemovableHandle:
    """Run ``hook(module, args, output)`` after the forward of every module (a global hook)."""
    h = RemovableHandle(_GLOBAL_HOOKS)
    _GLOBAL_HOOKS[h.id] = hook
    return h
