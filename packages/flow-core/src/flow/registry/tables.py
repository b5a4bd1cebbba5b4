"""Plugin-owned rule tables keyed by op name (SBP rules, AMP colours, fusion lowerings)."""

from __future__ import annotations

from typing import Any, Iterator

from flow.errors import RegistrationError


class RuleTable:
    """A table one plugin owns and any op author may fill, one entry per op name.

    Duplicate entries are an error unless ``override=True``; every entry
    remembers which plugin made it, so ``python -m flow plugins`` can show it.
    """

    def __init__(self, name: str, owner: str, doc: str = "") -> None:
        self.name = name
        self.owner = owner
        self.doc = doc
        self._rules: dict[str, Any] = {}
        self._by: dict[str, str] = {}

    def register(self, op: str, rule: Any, *, plugin: str = "", override: bool = False) -> None:
        if op in self._rules and not override:
            raise RegistrationError(
                f"rule table '{self.name}': op '{op}' already has a rule from plugin "
                f"'{self._by[op]}'; pass override=True to replace it"
            )
        self._rules[op] = rule
        self._by[op] = plugin

    def remove(self, op: str) -> None:
        """Drop the rule for ``op`` (used when the plugin that gave it is unregistered)."""
        self._rules.pop(op, None)
        self._by.pop(op, None)

    def items(self):
        return self._rules.items()

    def get(self, op: str, default: Any = None) -> Any:
        return self._rules.get(op, default)

    def __getitem__(self, op: str) -> Any:
        try:
            return self._rules[op]
        except KeyError:
            raise KeyError(f"rule table '{self.name}' has no rule for op '{op}'") from None

    def __contains__(self, op: str) -> bool:
        return op in self._rules

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def provider(self, op: str) -> str:
        return self._by.get(op, "")

    def __repr__(self) -> str:
        return f"<RuleTable {self.name!r} owned by {self.owner!r}, {len(self)} rules>"
