"""Tensor methods for indexing (``t[...]``, ``t[...] = v``) and gather/scatter."""

from __future__ import annotations


class IndexingMethods:
    __slots__ = ()
