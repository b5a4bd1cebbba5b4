"""The allow-list of classes and functions that checkpoints may name (PyTorch's ``add_safe_globals``).

flow's own checkpoints name no code, and PyTorch checkpoints are read by a restricted unpickler that
rebuilds only tensors and plain containers. A file that names anything else (a whole ``nn.Module``,
a custom class) loads only once that class is allow-listed here; flow then restores it as pickle
would (``cls.__new__`` and its ``__dict__`` / ``__setstate__``), so allow-list only plain-data
classes from code you trust. Globals are matched by their qualified name *before* anything is
imported, so a file cannot make flow import a module it names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flow.errors import OpTypeError

__all__ = ["add_safe_globals", "get_safe_globals", "clear_safe_globals", "safe_globals", "lookup", "qualified_name"]

# qualified name -> the object, and the entries as given (for get_safe_globals), in order
_BY_NAME: dict[str, object] = {}
_ENTRIES: list = []


def qualified_name(obj) -> str:
    """``module.QualName`` of a class or function, the name a pickle (and flow's structure) uses for it."""
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"


def _names(entry) -> tuple[object, str]:
    if isinstance(entry, tuple):
        if len(entry) != 2 or not isinstance(entry[1], str) or not callable(entry[0]):
            raise OpTypeError(
                "flow.serialization.add_safe_globals",
                f"a tuple entry is (class or function, 'module.name'), got {entry!r:.100}",
            )
        return entry[0], entry[1]
    if not callable(entry) or not hasattr(entry, "__module__") or not hasattr(entry, "__qualname__"):
        raise OpTypeError(
            "flow.serialization.add_safe_globals",
            f"expected classes or functions (or (object, 'module.name') tuples), got {type(entry).__name__}",
        )
    return entry, qualified_name(entry)


def add_safe_globals(safe_globals: list) -> None:
    """Allow checkpoints to name these classes / functions (each also as ``(obj, "module.name")``).

    >>> flow.serialization.add_safe_globals([MyConfig])
    >>> flow.load("ckpt.pt")  # may now hold MyConfig objects
    """
    if not isinstance(safe_globals, (list, tuple)):
        raise OpTypeError(
            "flow.serialization.add_safe_globals",
            f"expected a list of classes or functions, got {type(safe_globals).__name__}",
        )
    pairs = [_names(e) for e in safe_globals]  # all checked before any is added
    for entry, (obj, name) in zip(safe_globals, pairs):
        if _BY_NAME.get(name) is not obj:
            _BY_NAME[name] = obj
            _ENTRIES.append(entry)


def get_safe_globals() -> list:
    """The entries :func:`add_safe_globals` added, in order."""
    return list(_ENTRIES)


def clear_safe_globals() -> None:
    """Forget every allow-listed global."""
    _BY_NAME.clear()
    _ENTRIES.clear()


@contextlib.contextmanager
def safe_globals(entries: list) -> Iterator[None]:
    """Allow-list ``entries`` inside a ``with`` block only (PyTorch's ``torch.serialization.safe_globals``)."""
    saved_names, saved_entries = dict(_BY_NAME), list(_ENTRIES)
    add_safe_globals(entries)
    try:
        yield
    finally:
        _BY_NAME.clear()
        _BY_NAME.update(saved_names)
        _ENTRIES[:] = saved_entries


def lookup(name: str):
    """The allow-listed object called ``name`` (``module.QualName``), or None."""
    return _BY_NAME.get(name)


def is_allowed(obj) -> bool:
    """Whether ``obj`` itself (not just something of its name) is allow-listed."""
    return any(v is obj for v in _BY_NAME.values())
