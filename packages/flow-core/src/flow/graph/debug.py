"""Looking at graphs: the IR as text, the pass log, Graphviz DOT and JSON."""

from __future__ import annotations

import json
import os

import numpy as np

from flow.graph.ir import GraphIR, Lit, Value

_PHASE_COLOR = {"forward": "#dbe8ff", "backward": "#ffe2cc", "optimizer": "#d9f2d9"}


def _arg(a) -> str:
    if a.__class__ is Value:
        return f"%{a.id}"
    if a.__class__ is list:
        return "[" + ", ".join(f"%{v.id}" for v in a) + "]"
    return repr(a.value if isinstance(a, Lit) else a)


def _attr(v) -> str:
    s = _short(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _short(x) -> str:
    """An attribute's compact form: ``format(x, "ir")`` where its class gives one (flow-dist's
    placements and SBPs), each element of a tuple alike, else its repr."""
    if x.__class__ is tuple:
        return "(" + ", ".join(_short(e) for e in x) + ("," if len(x) == 1 else "") + ")"
    try:
        return format(x, "ir")
    except (TypeError, ValueError):
        return repr(x)


def _vattrs(v: Value) -> str:
    """A value's per-value attributes (SBP, AMP dtype, ...) as `` {k=v, ...}``, or nothing."""
    if not v.attrs:
        return ""
    return " {" + ", ".join(f"{k}={_short(x)}" for k, x in v.attrs.items()) + "}"


def format_ir(ir: GraphIR, max_nodes: int | None = None) -> str:
    """The IR as text: inputs, states, host values, one line per node (with its source line), updates."""
    L = [
        f"graph {ir.name} ({len(ir.inputs)} inputs, {len(ir.states)} states, {len(ir.hosts)} host values, "
        f"{len(ir.constants)} constants, {len(ir.nodes)} nodes)"
    ]
    for v in ir.inputs:
        L.append(f"  %{v.id}: {v.type_str()}{_vattrs(v)} = input {v.name}")
    for v in ir.states:
        spec = ir.state_specs.get(v.id)
        L.append(f"  %{v.id}: {v.type_str()}{_vattrs(v)} = state {v.name} ({spec.kind if spec else '?'})")
    for v in ir.hosts:
        L.append(f"  %{v.id}: {v.type_str()}{_vattrs(v)} = host {v.name}")
    shown = set()
    for n in ir.nodes:
        for v in n.input_values():
            if v.kind == "const" and v.id not in shown:
                shown.add(v.id)
                arr = ir.constants.get(v.id)
                val = ""
                if isinstance(arr, np.ndarray) and arr.size <= 4:
                    val = " " + np.array2string(arr, precision=4, separator=",").replace("\n", "")
                L.append(f"  %{v.id}: {v.type_str()}{_vattrs(v)} = const{val}")
    nodes = ir.nodes if max_nodes is None else ir.nodes[:max_nodes]
    for n in nodes:
        outs = ", ".join(f"%{o.id}: {o.type_str()}{_vattrs(o)}" for o in n.outputs)
        args = ", ".join(_arg(a) for a in n.inputs)
        attrs = ", ".join(f"{k}={_attr(v)}" for k, v in n.attrs.items())
        extra = []
        if n.loc is not None:
            extra.append(n.loc.short())
        if n.scope:
            extra.append(f"[{n.scope}]")
        phase = n.tags.get("phase")
        if phase and phase != "forward":
            extra.append(phase)
        if n.inplace:
            extra.append("in-place")
        tail = f"  # {' '.join(extra)}" if extra else ""
        L.append(f"  {outs} = {n.name}({args}{', ' if args and attrs else ''}{attrs}){tail}")
    if max_nodes is not None and len(ir.nodes) > max_nodes:
        L.append(f"  ... {len(ir.nodes) - max_nodes} more nodes")
    for s, new in ir.updates:
        L.append(f"  state {s.name} (%{s.id}) <- %{new.id}")
    for e in ir.effects:
        L.append(f"  effect: {e.name}")
    L.append("  return (" + ", ".join(_arg(v) for v in ir.outputs) + ")")
    L.append("  op counts: " + ", ".join(f"{k} {c}" for k, c in ir.op_counts().items()))
    return "\n".join(L)


def format_log(name: str, log: list, step=None, verbose: bool = False) -> str:
    """The pass log: op counts after each pass (and the IR after each one when ``verbose``)."""
    L = [f"graph {name}: passes"]
    prev = None
    for r in log:
        if not r.ran:
            L.append(f"  {r.name:<24} (disabled)")
            continue
        delta = "" if prev is None else f" ({r.nodes - prev:+d})"
        top = ", ".join(f"{k} {c}" for k, c in list(r.op_counts.items())[:8])
        L.append(f"  {r.name:<24} {r.nodes:5d} nodes{delta}  {r.seconds * 1e3:7.2f} ms  {top}")
        prev = r.nodes
        if verbose and r.text:
            L.append("    " + r.text.replace("\n", "\n    "))
    if step is not None:
        L.append(
            f"  trace {step.trace_seconds * 1e3:.1f} ms, compile total {step.compile_seconds * 1e3:.1f} ms, "
            f"{len(step.plan.steps)} kernel calls"
        )
        for name, note in step.ir.meta.get("pass_notes", {}).items():  # what passes want to say (fusion, memory)
            L.append(f"  {name}: {note}")
        from flow.graph.passes.memory import format_report, memory_report

        L.append("  " + format_report(memory_report(step.plan)))
    return "\n".join(L)


def _jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def _value_json(v: Value, ir: GraphIR) -> dict:
    d = {
        "id": v.id,
        "shape": list(v.shape),
        "dtype": getattr(v.dtype, "name", str(v.dtype)),
        "device": str(v.device),
        "kind": v.kind,
    }
    if v.name:
        d["name"] = v.name
    if v.attrs:
        d["attrs"] = _jsonable(v.attrs)
    if v.kind == "state":
        spec = ir.state_specs.get(v.id)
        if spec is not None:
            d["state_kind"] = spec.kind
    return d


def to_json(ir: GraphIR, indent: int | None = 1) -> str:
    """The IR as JSON: values, nodes (op, attrs, inputs, outputs, source line, scope, tags), updates."""
    consts = []
    for vid, arr in ir.constants.items():
        c = {"id": vid, "shape": list(getattr(arr, "shape", ())), "dtype": str(getattr(arr, "dtype", ""))}
        if getattr(arr, "size", 0) <= 16 and isinstance(arr, np.ndarray):
            c["value"] = arr.tolist()
        consts.append(c)

    def arg(a):
        if a.__class__ is Value:
            return {"value": a.id}
        if a.__class__ is list:
            return {"values": [v.id for v in a]}
        return {"literal": _jsonable(a.value if isinstance(a, Lit) else a)}

    nodes = []
    for n in ir.nodes:
        d = {
            "id": n.id,
            "op": n.name,
            "attrs": _jsonable(n.attrs),
            "inputs": [arg(a) for a in n.inputs],
            "outputs": [_value_json(o, ir) for o in n.outputs],
            "scope": n.scope,
            "tags": _jsonable(n.tags),
        }
        if n.loc is not None:
            d["loc"] = {"file": n.loc.file, "line": n.loc.line, "function": n.loc.function}
            if n.loc.inner_file:
                d["loc"]["inner"] = {
                    "file": n.loc.inner_file,
                    "line": n.loc.inner_line,
                    "function": n.loc.inner_function,
                }
        if n.inplace:
            d["inplace"] = {str(k): v for k, v in n.inplace.items()}
        nodes.append(d)
    doc = {
        "name": ir.name,
        "inputs": [_value_json(v, ir) for v in ir.inputs],
        "states": [_value_json(v, ir) for v in ir.states],
        "hosts": [_value_json(v, ir) for v in ir.hosts],
        "constants": consts,
        "nodes": nodes,
        "outputs": [arg(v) for v in ir.outputs],
        "updates": [{"state": s.id, "value": new.id} for s, new in ir.updates],
        "effects": [e.name for e in ir.effects],
        "op_counts": ir.op_counts(),
    }
    return json.dumps(doc, indent=indent)


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def to_dot(ir: GraphIR) -> str:
    """The IR as a Graphviz digraph: ops as boxes coloured by phase, inputs/states as ellipses."""
    L = [f'digraph "{_esc(ir.name)}" {{', "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']
    for v in ir.inputs:
        L.append(
            f'  v{v.id} [shape=ellipse, style=filled, fillcolor="#fff7c0", '
            f'label="{_esc(v.name or "input")}\\n{v.type_str()}"];'
        )
    for v in ir.states:
        L.append(
            f'  v{v.id} [shape=ellipse, style=filled, fillcolor="#eeeeee", label="{_esc(v.name)}\\n{v.type_str()}"];'
        )
    for v in ir.hosts:
        L.append(f'  v{v.id} [shape=ellipse, label="{_esc(v.name)}"];')
    used_consts = {v.id for n in ir.nodes for v in n.input_values() if v.kind == "const"}
    for vid in used_consts:
        L.append(f"  v{vid} [shape=point];")
    for n in ir.nodes:
        color = _PHASE_COLOR.get(n.tags.get("phase", "forward"), "#ffffff")
        loc = f"\\n{_esc(n.loc.short())}" if n.loc is not None else ""
        L.append(f'  n{n.id} [shape=box, style=filled, fillcolor="{color}", label="{_esc(n.name)}{loc}"];')
    src = {}
    for v in ir.inputs + ir.states + ir.hosts:
        src[v.id] = f"v{v.id}"
    for vid in used_consts:
        src[vid] = f"v{vid}"
    for n in ir.nodes:
        for o in n.outputs:
            src[o.id] = f"n{n.id}"
    for n in ir.nodes:
        for v in n.input_values():
            L.append(f'  {src.get(v.id, "v" + str(v.id))} -> n{n.id} [label="{v.type_str()}"];')
    for k, v in enumerate(ir.outputs):
        if isinstance(v, Value):
            L.append(f'  out{k} [shape=doublecircle, label="out{k}"];')
            L.append(f"  {src.get(v.id, 'v' + str(v.id))} -> out{k};")
    for s, new in ir.updates:
        L.append(f'  {src.get(new.id, "v" + str(new.id))} -> v{s.id} [style=dashed, color="#aa3333", label="update"];')
    L.append("}")
    return "\n".join(L) + "\n"


def save(text: str, path: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
