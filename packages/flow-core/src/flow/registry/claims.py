"""Who registered what, and who won: the claims behind every registry entry.

Every registration (a device type, an op, a kernel, a rule, a pass) is a *claim* on a slot
(``("kernel", op, device, dtype, name)``, ``("rule", table, op)``, ...). The registry holds the
winning claim's value where the dispatcher reads it; the book keeps every claim, so that

- a second claim on a taken slot is an error unless it says so: ``override=True`` (it wins at
  the same priority, being later) or a different ``priority`` (the higher one wins, whatever the
  order of loading);
- removing a plugin gives each slot it won back to the best remaining claim (what it overrode);
- ``python -m flow plugins`` can show every contested slot and who won it.

Nothing here is on the hot path: claims are made while plugins load.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from flow.errors import RegistrationError


@dataclass
class Claim:
    """One registration: its value, the plugin that made it, its priority and its order."""

    value: Any
    plugin: str
    priority: int
    seq: int

    @property
    def rank(self) -> tuple[int, int]:
        # higher priority first; at equal priority the later claim (an override) wins
        return (self.priority, self.seq)


class ClaimBook:
    """Every claim on every slot; the winner of a slot is its claim of highest ``rank``."""

    def __init__(self) -> None:
        self._slots: dict[Hashable, list[Claim]] = {}
        self._seq = itertools.count()

    def claim(
        self,
        slot: Hashable,
        value: Any,
        plugin: str,
        *,
        priority: int | None,
        override: bool,
        duplicate: Callable[[Claim], str],
    ) -> Claim:
        """Add a claim and return the slot's winner after it.

        A claim on a taken slot at the same priority (``priority=None`` is 0, or the current
        winner's priority with ``override=True``) must say ``override=True``; otherwise
        ``RegistrationError(duplicate(winner))`` is raised and nothing changes.
        """
        claims = self._slots.get(slot)
        winner = max(claims, key=lambda c: c.rank) if claims else None
        if priority is None:
            priority = winner.priority if (override and winner is not None) else 0
        if winner is not None and priority == winner.priority and not override:
            raise RegistrationError(duplicate(winner))
        c = Claim(value, plugin, priority, next(self._seq))
        self._slots.setdefault(slot, []).append(c)
        return c if winner is None or c.rank > winner.rank else winner

    def winner(self, slot: Hashable) -> Claim | None:
        claims = self._slots.get(slot)
        return max(claims, key=lambda c: c.rank) if claims else None

    def claims(self, slot: Hashable) -> list[Claim]:
        """The claims on ``slot``, winner first."""
        return sorted(self._slots.get(slot, ()), key=lambda c: c.rank, reverse=True)

    def slots(self, kind: str | None = None) -> list[Hashable]:
        return [s for s in self._slots if kind is None or s[0] == kind]

    def drop(self, slot: Hashable) -> None:
        """Forget a slot and all its claims (its entry was removed with what it belonged to)."""
        self._slots.pop(slot, None)

    def remove_plugin(self, plugin: str) -> list[tuple[Hashable, Claim | None]]:
        """Drop every claim of ``plugin``; for each slot it had won, the new winner (or None)."""
        changed = []
        for slot in list(self._slots):
            claims = self._slots[slot]
            if not any(c.plugin == plugin for c in claims):
                continue
            was = max(claims, key=lambda c: c.rank)
            rest = [c for c in claims if c.plugin != plugin]
            if rest:
                self._slots[slot] = rest
            else:
                del self._slots[slot]
            if was.plugin == plugin:
                changed.append((slot, max(rest, key=lambda c: c.rank) if rest else None))
        return changed

    def contested(self) -> list[tuple[Hashable, list[Claim]]]:
        """Every slot claimed more than once, with its claims, winner first."""
        return [(s, self.claims(s)) for s, cs in self._slots.items() if len(cs) > 1]


def slot_text(slot: tuple) -> str:
    """How listings name a slot: ``kernel add[cpu]``, ``kernel add[cpu, float32] 'blocked'``, ``rule sbp:add``."""
    kind = slot[0]
    if kind == "kernel":
        _, op, dev, dtype, name = slot
        where = dev if dtype is None else f"{dev}, {dtype}"
        return f"kernel {op}[{where}]" + ("" if name == "default" else f" '{name}'")
    if kind == "rule":
        return f"rule {slot[1]}:{slot[2]}"
    return f"{kind} {slot[1]}"
