"""The graph as a picture: a detailed Graphviz DOT of the IR, drawn to SVG/PNG/PDF by Graphviz's ``dot``.

``graph.render("step.svg")`` (any :class:`~flow.graph.compiler.Runner`: ``nn.Graph``, ``flow.compile``)
draws the optimised IR of the last step:

* ops are boxes filled by phase (forward blue, backward orange, optimizer green; a legend says so);
* a ``fused_elementwise`` node is drawn as a dashed cluster titled with the ops it fused, so the
  picture still shows what ran inside one kernel;
* every edge is labelled with its value's dtype and shape and its per-value attributes (flow-dist's
  SBP and placement, flow-amp's colour), the same facts the text dump prints;
* graph inputs, states (parameters, optimizer states) and host values are ellipses; state updates
  are red dashed edges back into the state.

Only the ``dot`` program of Graphviz is needed (Debian/Ubuntu package ``graphviz``), not its Python
package; without it :func:`render` raises :class:`GraphvizNotFoundError` naming the package.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from flow.errors import FlowError
from flow.graph.debug import _PHASE_COLOR, _esc, _short, save
from flow.graph.ir import GraphIR, Value

__all__ = ["FORMATS", "GraphvizNotFoundError", "render", "to_dot_detailed"]

FORMATS = ("svg", "png", "pdf")
_FUSED = "fused_elementwise"
_KIND_COLOR = {"input": "#fff7c0", "state": "#eeeeee", "host": "#ffffff"}


class GraphvizNotFoundError(FlowError):
    """Graphviz's ``dot`` program is not on PATH."""


def _value_label(v: Value) -> str:
    """``f32[2,3]`` and, one per line, the value's attributes (``sbp=(S(0),)``, ``amp=lower``)."""
    lines = [v.type_str()] + [f"{k}={_short(x)}" for k, x in v.attrs.items()]
    return "\\n".join(_esc(s) for s in lines)


def _fused_members(n) -> list[str]:
    """The op names a fused node ran, from the fusion pass's tag (or its program when the tag is gone)."""
    names = n.tags.get("fused")
    if not names:
        prog = n.attrs.get("program")
        names = list(getattr(prog, "ops", []) or [])
    return [str(x) for x in names]


def to_dot_detailed(ir: GraphIR) -> str:
    """The IR as a Graphviz digraph with phases, fused groups and value annotations (see the module docstring)."""
    L = [
        f'digraph "{_esc(ir.name)}" {{',
        "  rankdir=TB;",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8];',
    ]
    src: dict[int, str] = {}
    for kind, values in (("input", ir.inputs), ("state", ir.states), ("host", ir.hosts)):
        for v in values:
            name = _esc(v.name or kind)
            spec = ir.state_specs.get(v.id) if kind == "state" else None
            what = f"{kind} ({spec.kind})" if spec is not None else kind
            L.append(
                f'  v{v.id} [shape=ellipse, style=filled, fillcolor="{_KIND_COLOR[kind]}", '
                f'label="{name}\\n{what}\\n{_value_label(v)}"];'
            )
            src[v.id] = f"v{v.id}"
    for n in ir.nodes:
        for v in n.input_values():
            if v.kind == "const" and v.id not in src:
                L.append(f'  v{v.id} [shape=box, style=rounded, fontsize=8, label="const\\n{_value_label(v)}"];')
                src[v.id] = f"v{v.id}"
    phases = []
    for n in ir.nodes:
        phase = n.tags.get("phase", "forward")
        if phase not in phases:
            phases.append(phase)
        color = _PHASE_COLOR.get(phase, "#ffffff")
        loc = f"\\n{_esc(n.loc.short())}" if n.loc is not None else ""
        scope = f"\\n[{_esc(n.scope)}]" if n.scope else ""
        box = f'shape=box, style=filled, fillcolor="{color}"'
        if n.name == _FUSED:
            members = _fused_members(n)
            # a cluster per fused kernel: its title lists the member ops in order, the node keeps the phase colour
            L.append(f"  subgraph cluster_fused{n.id} {{")
            L.append(f'    style=dashed; color="#555555"; fontsize=9; label="fused: {_esc(" + ".join(members))}";')
            L.append(f'    n{n.id} [{box}, label="{_FUSED}\\n{len(members)} ops{loc}{scope}"];')
            L.append("  }")
        else:
            L.append(f'  n{n.id} [{box}, label="{_esc(n.name)}{loc}{scope}"];')
        for o in n.outputs:
            src[o.id] = f"n{n.id}"
    for n in ir.nodes:
        for v in n.input_values():
            L.append(f'  {src.get(v.id, "v" + str(v.id))} -> n{n.id} [label="{_value_label(v)}"];')
    for k, v in enumerate(ir.outputs):
        if isinstance(v, Value):
            L.append(f'  out{k} [shape=doublecircle, label="out{k}"];')
            L.append(f'  {src.get(v.id, "v" + str(v.id))} -> out{k} [label="{_value_label(v)}"];')
    for s, new in ir.updates:
        L.append(f'  {src.get(new.id, "v" + str(new.id))} -> v{s.id} [style=dashed, color="#aa3333", label="update"];')
    if phases:  # the legend: one swatch per phase present, so the colours need no explanation elsewhere
        L.append('  subgraph cluster_legend { label="phases"; fontsize=9; style=dotted;')
        for p in phases:
            L.append(
                f'    legend_{_ident(p)} [shape=box, style=filled, fillcolor="{_PHASE_COLOR.get(p, "#ffffff")}", '
                f'label="{_esc(p)}"];'
            )
        L.append("  }")
    L.append("}")
    return "\n".join(L) + "\n"


def _ident(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)


def _format_of(path: str, format: str | None) -> str:
    fmt = format if format is not None else os.path.splitext(path)[1].lstrip(".")
    fmt = fmt.lower()
    if fmt not in FORMATS + ("dot",):
        where = f"format={format!r}" if format is not None else f"the extension of {path!r}"
        raise ValueError(
            f"render: {where} is not one of {', '.join(FORMATS)} or dot; pass format= or name the file .svg"
        )
    return fmt


def render(ir: GraphIR, path: str, format: str | None = None) -> str:
    """Draw ``ir`` into ``path`` (svg, png or pdf, from the extension unless ``format`` is given;
    ``dot`` writes the DOT text itself) and return ``path``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"render: path must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    fmt = _format_of(path, format)
    text = to_dot_detailed(ir)
    if fmt == "dot":
        save(text, path)
        return path
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFoundError(
            "render: Graphviz's 'dot' program is not on PATH; install it (Debian/Ubuntu: apt-get install graphviz, "
            "macOS: brew install graphviz), or write the DOT text with graph.render('g.dot')"
        )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    r = subprocess.run([exe, f"-T{fmt}", "-o", path], input=text.encode(), capture_output=True, check=False)
    if r.returncode != 0:
        raise FlowError(
            f"render: dot -T{fmt} failed (exit {r.returncode}): {r.stderr.decode(errors='replace').strip()}"
        )
    return path
