"""The table of registered array kinds: array class -> handler (see :mod:`flow.array_kinds`).

A module of its own, below the dispatcher, autograd and flow.array_kinds, which all read this one dict,
so that none of them has to import another for it.
"""

from __future__ import annotations

KINDS: dict = {}
