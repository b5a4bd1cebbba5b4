"""Removing a plugin's registrations, and listing contested ones (``Registry.remove_plugin``,
``Registry.contested``).

A plugin's entries are found through the registry's claim book (:mod:`flow.registry.claims`),
never by scanning the live tables, so that an entry it overrode is given back exactly as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flow.registry.claims import slot_text

if TYPE_CHECKING:
    from flow.registry import Registry


def remove_plugin(reg: Registry, name: str) -> None:
    """See :meth:`flow.registry.Registry.remove_plugin`."""
    book = reg._claims
    gone_ops = []
    for slot, win in book.remove_plugin(name):
        kind = slot[0]
        if kind == "device_type":
            reg._set_device_type(slot[1], None if win is None else win.value)
        elif kind == "op":
            reg._set_op(slot[1], None if win is None else win.value)
            if win is None:
                gone_ops.append(slot[1])
        elif kind == "kernel":
            op = reg._ops.get(slot[1])
            if op is not None:
                reg._set_kernel(op, (slot[2], slot[3]), slot[4], None if win is None else win.value)
        elif kind == "rule":
            t = reg._tables.get(slot[1])
            if t is not None:
                t.remove(slot[2])
                if win is not None:
                    t.register(slot[2], win.value, plugin=win.plugin)
        elif kind == "pass":
            reg._set_pass(slot[1], None if win is None else win.value)
        elif kind == "api":
            reg._set_api(slot[1], None if win is None else win.value)
    for op in gone_ops:  # kernels other plugins attached to an op that is gone go with it
        for slot in book.slots("kernel"):
            if slot[1] == op:
                book.drop(slot)
    for tname in [n for n, t in reg._tables.items() if t.owner == name]:
        del reg._tables[tname]  # other plugins' rules for it stay claimed: queued again
    for op in reg._ops.values():
        op._kcache.clear()
    reg.provenance.pop(name, None)


def contested(reg: Registry) -> list[dict]:
    """See :meth:`flow.registry.Registry.contested`."""
    out = []
    for slot, claims in reg._claims.contested():
        out.append(
            {
                "what": slot_text(slot),
                "winner": claims[0].plugin,
                "priority": claims[0].priority,
                "over": [{"plugin": c.plugin, "priority": c.priority} for c in claims[1:]],
            }
        )
    return out
