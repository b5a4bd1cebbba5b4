"""Settable boolean flags for the ``flow.backends.*`` namespaces (PyTorch's ``torch.backends`` API)."""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any, Iterator


def _check_bool(where: str, value: Any) -> bool:
    # PyTorch's setters take bools only (``cudnn.benchmark = "yes"`` is a RuntimeError there too)
    if not isinstance(value, bool):
        raise TypeError(f"{where} expects a bool, got {type(value).__name__} {value!r}")
    return value


class FlagModule(types.ModuleType):
    """A module whose ``_FLAGS`` (name -> default) are attributes that only take bools."""

    _FLAGS: dict[str, bool] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._FLAGS:
            value = _check_bool(f"{self.__name__}.{name}", value)
        super().__setattr__(name, value)

    @contextlib.contextmanager
    def _with_flags(self, **values: Any) -> Iterator[None]:
        """Set flags for the duration of a ``with`` block (None leaves a flag as it is)."""
        unknown = sorted(set(values) - set(type(self)._FLAGS))
        if unknown:
            raise TypeError(f"{self.__name__}.flags() got unknown flags {unknown}")
        saved = {k: getattr(self, k) for k in values}
        try:
            for k, v in values.items():
                if v is not None:
                    setattr(self, k, v)
            yield
        finally:
            for k, v in saved.items():
                super().__setattr__(k, v)


def install(module_name: str, flags: dict[str, bool]) -> None:
    """Give module ``module_name`` the flags ``flags`` (checked on assignment), set to their defaults."""
    mod = sys.modules[module_name]
    cls = type(f"{mod.__name__}.module", (FlagModule,), {"_FLAGS": dict(flags)})
    mod.__class__ = cls
    for k, v in flags.items():
        setattr(mod, k, v)


class FlagObject:
    """An object (``flow.backends.cuda.matmul``) with boolean flags; other attributes are rejected."""

    def __init__(self, where: str, flags: dict[str, bool]) -> None:
        object.__setattr__(self, "_where", where)
        object.__setattr__(self, "_flags", dict(flags))

    def __getattr__(self, name: str) -> bool:
        flags = object.__getattribute__(self, "_flags")
        if name in flags:
            return flags[name]
        raise AttributeError(f"{self._where} has no attribute '{name}' (known: {sorted(flags)})")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._flags:
            raise AttributeError(f"{self._where} has no attribute '{name}' (known: {sorted(self._flags)})")
        self._flags[name] = _check_bool(f"{self._where}.{name}", value)

    def __repr__(self) -> str:
        return f"<{self._where} {self._flags}>"
