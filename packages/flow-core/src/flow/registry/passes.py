"""The pass registry: named IR -> IR functions with before/after ordering constraints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from flow.errors import RegistrationError


@dataclass
class PassEntry:
    name: str
    fn: Callable
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    plugin: str = ""
    enabled_by_default: bool = True
    doc: str = ""
    order: int = field(default=0)


class PassRegistry:
    """Holds named graph passes; :meth:`ordered` gives a pipeline respecting constraints.

    Constraints naming a pass that is not registered are ignored, so a plugin
    can say "before amp" without requiring flow-amp. Ties keep registration
    order, which makes the pipeline deterministic.
    """

    def __init__(self) -> None:
        self._passes: dict[str, PassEntry] = {}

    def register(
        self,
        name: str,
        fn: Callable,
        *,
        before=(),
        after=(),
        plugin: str = "",
        enabled_by_default: bool = True,
        override: bool = False,
        doc: str = "",
    ) -> None:
        if name in self._passes and not override:
            raise RegistrationError(
                f"pass '{name}' is already registered by plugin '{self._passes[name].plugin}'; "
                "pass override=True to replace it"
            )
        if isinstance(before, str):
            before = (before,)
        if isinstance(after, str):
            after = (after,)
        self._passes[name] = PassEntry(
            name,
            fn,
            tuple(before),
            tuple(after),
            plugin,
            enabled_by_default,
            doc or (fn.__doc__ or "").strip().split("\n")[0],
            len(self._passes),
        )

    def remove(self, name: str) -> None:
        """Drop a pass (used when the plugin that registered it is unregistered)."""
        self._passes.pop(name, None)

    def __len__(self) -> int:
        return len(self._passes)

    def __contains__(self, name: str) -> bool:
        return name in self._passes

    def __getitem__(self, name: str) -> PassEntry:
        try:
            return self._passes[name]
        except KeyError:
            raise KeyError(f"no pass named '{name}'; registered: {sorted(self._passes)}") from None

    def names(self) -> list[str]:
        return list(self._passes)

    def ordered(self) -> list[PassEntry]:
        """Topologically order passes by their constraints (Kahn's algorithm, stable)."""
        entries = self._passes
        succ: dict[str, set[str]] = {n: set() for n in entries}
        for e in entries.values():
            for b in e.before:
                if b in entries:
                    succ[e.name].add(b)
            for a in e.after:
                if a in entries:
                    succ[a].add(e.name)
        indeg = {n: 0 for n in entries}
        for ss in succ.values():
            for s in ss:
                indeg[s] += 1
        ready = sorted((n for n, d in indeg.items() if d == 0), key=lambda n: entries[n].order)
        out = []
        while ready:
            n = ready.pop(0)
            out.append(entries[n])
            for s in sorted(succ[n], key=lambda n: entries[n].order):
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready.append(s)
                    ready.sort(key=lambda n: entries[n].order)
        if len(out) != len(entries):
            cyc = sorted(n for n, d in indeg.items() if d > 0)
            raise RegistrationError(f"pass ordering constraints form a cycle among: {cyc}")
        return out
