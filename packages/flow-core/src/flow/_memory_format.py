"""Memory formats (``flow.contiguous_format``, ``flow.preserve_format``, ``flow.channels_last``,
``flow.channels_last_3d``), PyTorch's ``torch.memory_format`` objects.

flow keeps tensors row-major, so every format gives a row-major (contiguous) result: ``channels_last``
is accepted where PyTorch accepts it (``.contiguous(memory_format=...)``, ``.to(memory_format=...)``,
``.clone(memory_format=...)``, ``nn.Module.to(memory_format=...)``) and checked as PyTorch checks it (a
4-d tensor, 5-d for ``channels_last_3d``), but does not reorder the data in memory.
"""

from __future__ import annotations

__all__ = ["memory_format", "contiguous_format", "preserve_format", "channels_last", "channels_last_3d"]


class memory_format:
    """A memory format; the four instances are ``flow.contiguous_format`` and friends."""

    __slots__ = ("name", "_rank")

    def __init__(self, name: str, rank: int | None) -> None:
        self.name = name
        self._rank = rank  # the tensor rank the format requires (channels_last: 4), None: any

    def __repr__(self) -> str:
        return f"flow.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


contiguous_format = memory_format("contiguous_format", None)
preserve_format = memory_format("preserve_format", None)
channels_last = memory_format("channels_last", 4)
channels_last_3d = memory_format("channels_last_3d", 5)

_ALL = {m.name: m for m in (contiguous_format, preserve_format, channels_last, channels_last_3d)}


def _by_name(name: str) -> memory_format:
    return _ALL[name]


def check(where: str, fmt: object, ndim: int | None = None) -> memory_format | None:
    """``fmt`` as a memory format (None stays None); TypeError for anything else, RuntimeError where
    ``ndim`` is given and the format needs another rank (as PyTorch)."""
    if fmt is None:
        return None
    if not isinstance(fmt, memory_format):
        raise TypeError(f"{where}: memory_format must be a flow.memory_format, got {type(fmt).__name__} {fmt!r}")
    if ndim is not None and fmt._rank is not None and ndim != fmt._rank:
        raise RuntimeError(f"{where}: required rank {fmt._rank} tensor to use {fmt.name} format, got rank {ndim}")
    return fmt
