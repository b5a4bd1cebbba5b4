"""What ``python -m flow plugins`` prints: every plugin, what it registered, who won each
contested registration, and the rules still waiting for their table."""

from __future__ import annotations

import json
from typing import TextIO


def describe(infos: list, reg) -> list[dict]:
    """Every plugin (``PluginInfo``) as plain data, with the contests it took part in and its queued rules."""
    contests = reg.contested()
    pending = reg.pending_rules()
    out = []
    for i in infos:
        out.append(
            {
                "name": i.name,
                "distribution": i.distribution,
                "version": i.version,
                "module": i.module,
                "builtin": i.builtin,
                "loaded": i.loaded,
                "skipped_reason": i.skipped_reason,
                "registered": {k: list(v) for k, v in i.registered.items()},
                "contested": [
                    c for c in contests if c["winner"] == i.name or any(o["plugin"] == i.name for o in c["over"])
                ],
                "pending_rules": [f"{t}:{op}" for t, op, p in pending if p == i.name],
            }
        )
    return out


def _shorten(v: list[str], verbose: bool) -> str:
    if len(v) > 12 and not verbose:
        return ", ".join(v[:12]) + f", ... ({len(v)} in all)"
    return ", ".join(v)


def dump(data: list[dict], reg, out: TextIO, as_json: bool = False, verbose: bool = False) -> None:
    """Print ``data`` (from :func:`describe`).

    One line per plugin, ``name  [distribution version, kind, status]  module``, then one
    indented line per kind of registration (ops, kernels, device_types, tables, rules,
    passes; lists longer than 12 are cut unless ``verbose``). Then, when there are any, every
    contested registration with its winner first (``kernel add[cpu]: fast (priority 10) over
    flow.ops (priority 0)``) and the queued rules whose table no loaded plugin declares.
    """
    if as_json:
        json.dump(data, out, indent=2)
        out.write("\n")
        return
    for d in data:
        status = "loaded" if d["loaded"] else f"skipped: {d['skipped_reason']}"
        kind = "builtin" if d["builtin"] else ("runtime" if d["distribution"] == "<runtime>" else "entry point")
        print(f"{d['name']}  [{d['distribution']} {d['version'] or '-'}, {kind}, {status}]  {d['module']}", file=out)
        if d["loaded"] and not d["registered"]:
            print("    (registered nothing)", file=out)
        for k, v in d["registered"].items():
            print(f"    {k}: {_shorten(v, verbose)}", file=out)
    contests = reg.contested()
    if contests:
        print("\ncontested registrations (winner first):", file=out)
        for c in contests:
            over = ", ".join(f"{o['plugin']} (priority {o['priority']})" for o in c["over"])
            print(f"    {c['what']}: {c['winner']} (priority {c['priority']}) over {over}", file=out)
    pending = reg.pending_rules()
    if pending:
        print("\nqueued rules (no loaded plugin declares their table yet):", file=out)
        for t, op, p in pending:
            print(f"    {t}:{op}  from {p}", file=out)
