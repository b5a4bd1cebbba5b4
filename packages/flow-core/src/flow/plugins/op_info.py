"""``python -m flow op NAME``: every facet of one op, where it is defined and which plugin gave it.

:func:`describe_op` collects them as plain data (``--json`` prints that); :func:`format_op` writes
the text form. Facets: the schema (inputs with their dtype rules, attributes), the flags, the meta
rule, the gradient, the kernels per device type and dtype (with the ones they override, their
out-variants and what each device resolves to), the fusion lowering and every other rule table's
entry, queued rules, the opcheck samples, and the Python functions and Tensor methods bound to it.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import sys
from typing import Any, Callable, TextIO

FUSION_TABLE = "graph_fusion"  # device type -> FusionRule (flow.graph.pass_tables)


def where(obj: Any) -> str:
    """``file:line`` of a function or class (unwrapping partials and ``meta.rule``), or ``""``."""
    obj = getattr(obj, "func", obj)
    try:
        path = inspect.getsourcefile(obj)
        line = inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return ""
    return f"{_short(path)}:{line}" if path else ""


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _name(fn: Any) -> str:
    fn = getattr(fn, "func", fn)
    mod = getattr(fn, "__module__", None) or ""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{mod}.{qual}" if mod else qual


def _fn_facet(fn: Callable | None) -> dict | None:
    if fn is None:
        return None
    return {"function": _name(fn), "where": where(fn)}


def close_matches(name: str) -> list[str]:
    from flow.registry import REGISTRY

    return difflib.get_close_matches(name, list(REGISTRY.ops), n=5, cutoff=0.6)


def _handle_globals(op_name: str) -> list[tuple[Any, str]]:
    """(module, global name) of every OpHandle for the op held by a loaded flow module."""
    from flow._dispatch import OpHandle

    out = []
    for mname, mod in list(sys.modules.items()):
        if mod is None or not mname.startswith("flow"):
            continue
        for k, v in list(vars(mod).items()):
            if isinstance(v, OpHandle) and v.name == op_name:
                out.append((mod, k))
    return out


def _declared_at(op, handles: list) -> str:
    """Where the op is declared: the line assigning its handle in the module that defines it (core
    ops declare through ``defop``), else where ``register_op`` was called."""
    for mod, var in handles:
        try:
            src = inspect.getsource(mod)
        except (TypeError, OSError):
            continue
        m = re.search(rf"^[ \t]*(?:[\w, ]*,\s*)?{re.escape(var)}\b[\w, ]*=(?!=)", src, re.M)
        if m:
            return f"{_short(inspect.getsourcefile(mod))}:{src.count(chr(10), 0, m.start()) + 1}"
    if op.origin:
        return f"{_short(op.origin[0])}:{op.origin[1]}"
    return where(getattr(op.meta, "rule", op.meta))


def _callers(handles: list) -> list[dict]:
    """Functions of the defining modules that use the op's handle (its Python API)."""
    out = []
    for mod, var in handles:
        for k, v in vars(mod).items():
            code = getattr(v, "__code__", None)
            if code is not None and getattr(v, "__module__", None) == mod.__name__ and var in code.co_names:
                out.append({"function": f"{mod.__name__}.{k}", "where": where(v)})
    return out


def _callers_by_name(op_name: str, plugin: str) -> list[dict]:
    """Functions of the op's plugin package that run it by name (``flow.ops.call("name", ...)``).
    The core's own ops are called through their handles (:func:`_callers`) instead."""
    from flow.plugins import manager

    info = manager._infos.get(plugin)
    tops = {info.module.split(".")[0]} - {"flow"} if info is not None else set()
    out = []
    for mname, mod in list(sys.modules.items()):
        if mod is None or mname.split(".")[0] not in tops:
            continue
        for k, v in list(vars(mod).items()):
            code = getattr(v, "__code__", None)
            if (
                code is not None
                and getattr(v, "__module__", None) == mname
                and op_name in code.co_consts
                and "call" in code.co_names
            ):
                out.append({"function": f"{mname}.{k}", "where": where(v)})
    return out


def _bindings(op_name: str, callers: list[dict]) -> list[dict]:
    """Public functions and Tensor methods named after the op, or calling a function that runs it."""
    import flow
    import flow.nn.functional as F

    names = {c["function"].rsplit(".", 1)[1] for c in callers} | {op_name}
    out = []
    for label, owner in (("flow", flow), ("flow.nn.functional", F), ("flow.Tensor", flow.Tensor)):
        for n in sorted(names):
            for attr in (n, n + "_"):
                obj = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
                if obj is None and isinstance(owner, type):
                    obj = getattr(owner, attr, None)
                if callable(obj):
                    kind = (
                        "in-place method"
                        if attr.endswith("_") and owner is flow.Tensor
                        else ("method" if owner is flow.Tensor else "function")
                    )
                    out.append({"name": f"{label}.{attr}", "kind": kind, "where": where(obj)})
    return out


def describe_op(op_name: str) -> dict:
    """Every facet of the op ``op_name`` as plain data (``KeyError`` if no such op)."""
    from flow.registry import REGISTRY

    op = REGISTRY.ops.get(op_name)
    if op is None:
        raise KeyError(op_name)
    handles = _handle_globals(op_name)
    callers = _callers(handles) + _callers_by_name(op_name, op.plugin)
    sch = op.schema
    kernels = []
    for (dev, dtype), entries in sorted(op.kernels.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        for e in entries:
            claims = REGISTRY._claims.claims(("kernel", op_name, dev, dtype, e.name))
            kernels.append(
                {
                    "device": dev,
                    "dtype": None if dtype is None else str(dtype),
                    "name": e.name,
                    "plugin": e.plugin,
                    "generic": e.generic,
                    **_fn_facet(e.fn),
                    "priority": claims[0].priority if claims else 0,
                    "overrides": [{"plugin": c.plugin, **_fn_facet(c.value.fn)} for c in claims[1:]],
                    "out_variant": _fn_facet(getattr(e, "out", None)),
                }
            )
    resolves = {}
    for dev_name, dev in sorted(REGISTRY.device_types.items()):
        # the dtypes some kernel is specific to, then every other dtype
        dts = sorted({dt for d, dt in op.kernels if dt is not None and d in (dev_name, "generic")}, key=str)
        parts = []
        for dt in [*dts, None]:
            entries = REGISTRY.kernel_entries(op, dev_name, dt)
            if entries:
                what = f"'{entries[0].name}' of plugin '{entries[0].plugin}'" + (
                    " (generic)" if entries[0].generic else ""
                )
            elif dev.kernel_fallback is not None:
                what = f"the device's fallback ({_name(dev.kernel_fallback)})"
            else:
                what = "no kernel"
            parts.append(f"{'other dtypes' if dts and dt is None else dt or 'every dtype'} -> {what}")
        resolves[dev_name] = "; ".join(parts)
    rules = {}
    for tname, t in sorted(REGISTRY.tables.items()):
        if op_name in t:
            rules[tname] = {"rule": repr(t[op_name]), "plugin": t.provider(op_name)}
    fusion = {}
    ft = REGISTRY.tables.get(FUSION_TABLE)
    for dev_name, rule in ft.items() if ft is not None else ():
        ops = getattr(rule, "ops", ())
        fusion[dev_name] = {
            "fusable": op_name in ops or op_name in getattr(rule, "reductions", ()),
            "plugin": ft.provider(dev_name),
            "lower": _fn_facet(getattr(rule, "lower", None)),
        }
    n_samples = None
    if op.samples is not None:
        try:
            n_samples = sum(1 for _ in op.samples())
        except Exception as e:  # the listing still shows everything else
            n_samples = f"samples() raised {type(e).__name__}: {e}"
    return {
        "name": op_name,
        "plugin": op.plugin,
        "declared_at": _declared_at(op, handles),
        "doc": op.doc,
        "schema": str(sch),
        "inputs": [
            {
                "name": i.name,
                "optional": i.optional,
                "variadic": i.variadic,
                "dtypes": None if i.dtypes is None else repr(i.dtypes),
            }
            for i in sch.inputs
        ],
        "attrs": [
            {
                "name": a.name,
                "type": getattr(a.type, "__name__", repr(a.type)),
                "default": None if a.required else repr(a.default),
                "choices": None if a.choices is None else list(map(repr, a.choices)),
            }
            for a in sch.attrs
        ],
        "outputs": list(sch.outputs),
        "flags": {
            k: getattr(op, k)
            for k in (
                "elementwise",
                "save",
                "composite",
                "dynamic_shape",
                "nondeterministic",
                "collective",
                "eager_meta",
            )
        },
        "meta": _fn_facet(getattr(op.meta, "rule", op.meta)),
        "grad": _fn_facet(op.grad),
        "kernels": kernels,
        "resolves": resolves,
        "fusion": fusion,
        "rules": rules,
        "pending_rules": [t for t, o, _ in REGISTRY.pending_rules() if o == op_name],
        "samples": {"count": n_samples, **(_fn_facet(op.samples) or {})} if op.samples else None,
        "python": callers,
        "bindings": _bindings(op_name, callers),
    }


def _at(f: dict | None) -> str:
    if f is None:
        return "none"
    return f"{f['function']}  {f['where']}".rstrip()


def format_op(d: dict, out: TextIO) -> None:
    """Write :func:`describe_op`'s data as text, one facet per line or block."""
    p = lambda s="": print(s, file=out)  # noqa: E731
    p(f"op {d['name']}  (plugin '{d['plugin']}', declared at {d['declared_at']})")
    if d["doc"]:
        p(f"  {d['doc']}")
    p(f"schema:     {d['schema']}")
    for i in d["inputs"]:
        p(
            f"  input {i['name']}: {i['dtypes'] or 'dtypes not declared'}"
            + (" (optional)" if i["optional"] else "")
            + (" (variadic)" if i["variadic"] else "")
        )
    for a in d["attrs"]:
        extra = (f" = {a['default']}" if a["default"] is not None else " (required)") + (
            f", one of {', '.join(a['choices'])}" if a["choices"] else ""
        )
        p(f"  attr {a['name']}: {a['type']}{extra}")
    p("flags:      " + ", ".join(f"{k}={v}" for k, v in d["flags"].items()))
    p(f"meta rule:  {_at(d['meta'])}")
    p(f"gradient:   {_at(d['grad']) if d['grad'] else 'none (not differentiable)'}")
    p("kernels:")
    for k in d["kernels"]:
        dt = "" if k["dtype"] is None else f" {k['dtype']}"
        pr = f", priority {k['priority']}" if k["priority"] else ""
        p(
            f"  {k['device']}{dt} '{k['name']}' [{k['plugin']}{pr}]{' (factory of xp)' if k['generic'] else ''}: "
            f"{_at(k)}"
        )
        if k["out_variant"]:
            p(f"      out-variant: {_at(k['out_variant'])}")
        for o in k["overrides"]:
            p(f"      overrides [{o['plugin']}]: {_at(o)}")
    if not d["kernels"]:
        p("  (none)")
    p("resolves to:")
    for dev, what in d["resolves"].items():
        p(f"  {dev}: {what}")
    p(
        "out-variant: "
        + (", ".join(f"{k['device']} '{k['name']}'" for k in d["kernels"] if k["out_variant"]) or "none declared")
    )
    p("fusion lowering:")
    for dev, f in d["fusion"].items():
        p(f"  {dev}: {'fusable' if f['fusable'] else 'not fused'} [{f['plugin']}], lowered by {_at(f['lower'])}")
    if not d["fusion"]:
        p("  (no device type fills the fusion table)")
    p("rules:")
    for t, r in d["rules"].items():
        p(f"  {t}: {r['rule']} [{r['plugin']}]")
    for t in d["pending_rules"]:
        p(f"  {t}: queued (no loaded plugin declares the table)")
    if not d["rules"] and not d["pending_rules"]:
        p("  (none)")
    s = d["samples"]
    p(f"samples:    {s['count']} from {_at(s)}" if s else "samples:    none")
    p("python:")
    for c in d["python"]:
        p(f"  {c['function']}  {c['where']}")
    for b in d["bindings"]:
        p(f"  {b['name']} ({b['kind']})  {b['where']}")
    if not d["python"] and not d["bindings"]:
        p(f"  (none: call it as flow.ops.call('{d['name']}', ...))")
