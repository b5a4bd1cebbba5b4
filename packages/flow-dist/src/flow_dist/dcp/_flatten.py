"""Nested state dicts as flat ``key -> leaf`` lists, torch.distributed.checkpoint style.

Dict keys join with ``.`` (``optimizer.state.0.exp_avg``); lists and tuples are walked (by index)
only when they hold a tensor or a dict somewhere inside, so ``param_groups`` becomes
``optimizer.param_groups.0.lr`` while a list of plain numbers such as ``params`` stays one value.
"""

from __future__ import annotations

from typing import Any, Iterator

from flow.errors import FlowError

__all__ = ["Leaf", "flatten", "is_tensor"]


def is_tensor(v: Any) -> bool:
    import flow

    return isinstance(v, flow.Tensor)


def _holds_structure(v: Any) -> bool:
    if is_tensor(v) or isinstance(v, dict):
        return True
    if isinstance(v, (list, tuple)):
        return any(_holds_structure(x) for x in v)
    return False


class Leaf:
    """One flat entry: its value and where it sits (to put a loaded value back)."""

    __slots__ = ("key", "value", "container", "index")

    def __init__(self, key: str, value: Any, container: Any, index: Any) -> None:
        self.key = key
        self.value = value
        self.container = container
        self.index = index

    def assign(self, value: Any) -> None:
        if isinstance(self.container, tuple):
            raise FlowError(f"checkpoint: cannot load the value of {self.key!r} into a tuple; use a list")
        self.container[self.index] = value


def _walk(obj: Any, prefix: str, container: Any, index: Any) -> Iterator[Leaf]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{prefix}.{k}" if prefix else str(k), obj, k)
    elif isinstance(obj, (list, tuple)) and _holds_structure(obj):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{prefix}.{i}" if prefix else str(i), obj, i)
    else:
        yield Leaf(prefix, obj, container, index)


def flatten(state_dict: Any, what: str) -> list:
    """The leaves of ``state_dict`` in order; two paths that print alike (``{"a.b": x}`` and
    ``{"a": {"b": y}}``) are an error, since their keys would collide in the checkpoint."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"{what}: state_dict must be a dict, got {type(state_dict).__name__}")
    leaves = list(_walk(state_dict, "", None, None))
    seen: set = set()
    for leaf in leaves:
        if leaf.key in seen:
            raise ValueError(f"{what}: two entries of the state dict flatten to the same key {leaf.key!r}")
        seen.add(leaf.key)
    return leaves
