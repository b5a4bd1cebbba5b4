"""``flow.device``: a device type name and an index, interned."""

from __future__ import annotations

__all__ = ["device"]

_CACHE: dict = {}


class device:
    """A device such as ``flow.device("cpu")`` or ``flow.device("cuda", 0)``.

    Devices are interned: ``flow.device("cpu") is flow.device("cpu")``.
    """

    __slots__ = ("type", "index", "_str")

    def __new__(cls, type_or_str="cpu", index: int | None = None):
        if isinstance(type_or_str, device):
            return type_or_str
        key = (type_or_str, index)
        d = _CACHE.get(key)
        if d is not None:
            return d
        if not isinstance(type_or_str, str):
            raise TypeError(f"flow.device: expected a string like 'cpu' or 'cuda:0', got {type_or_str!r}")
        name = type_or_str
        if ":" in name:
            if index is not None:
                raise ValueError(f"flow.device: index given twice in {name!r} and index={index}")
            name, _, idx = name.partition(":")
            try:
                index = int(idx)
            except ValueError:
                raise ValueError(f"flow.device: invalid device string {type_or_str!r}") from None
        if index is not None and index < 0:
            raise ValueError(f"flow.device: device index must be >= 0, got {index}")
        if name == "cpu":
            index = None  # one host device, as in PyTorch
        canon = (name, index)
        d = _CACHE.get(canon)
        if d is None:
            d = object.__new__(cls)
            d.type = name
            d.index = index
            d._str = name if index is None else f"{name}:{index}"
            _CACHE[canon] = d
        _CACHE[key] = d
        return d

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __str__(self) -> str:
        return self._str

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return self is other

    def __hash__(self) -> int:
        return hash(self._str)

    def __reduce__(self):
        return (device, (self._str,))


CPU = device("cpu")
