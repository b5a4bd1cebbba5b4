"""(being filled) core ops of this family."""

from __future__ import annotations

__all__: list[str] = []
