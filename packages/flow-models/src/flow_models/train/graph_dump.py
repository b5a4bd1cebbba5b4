"""``--graph --dump-graph DIR``: the compiled training step, as a picture and as text, after its first step.

The folder gets ``graph.dot`` (the detailed Graphviz DOT of :mod:`flow.graph.render`: phases coloured,
fused groups as clusters, values annotated with dtype, shape and SBP), ``graph.txt`` (the IR as text)
and ``graph.svg`` drawn by Graphviz's ``dot``. Without ``dot`` on PATH the run goes on and a note says
which package draws the SVG: a missing drawing tool is no reason to lose a training run.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from flow.graph.debug import format_ir, save
from flow.graph.render import GraphvizNotFoundError, render, to_dot_detailed

__all__ = ["GraphDumper"]


class GraphDumper:
    """Writes the graph of the first compiled step into ``folder`` (nothing when ``folder`` is None,
    or on ranks other than the main one)."""

    def __init__(self, folder: str | None, log: Callable[[str], None], main: bool = True) -> None:
        self.folder = folder if main else None
        self.log = log
        self.done = False

    def after(self, graph) -> list[str]:
        """Call after each graph step: the first call writes the files and returns their paths."""
        if self.folder is None or self.done or graph is None:
            return []
        self.done = True  # once: later recompilations (a smaller last batch) would only overwrite it
        ir = graph.ir
        paths = [os.path.join(self.folder, "graph.dot"), os.path.join(self.folder, "graph.txt")]
        save(to_dot_detailed(ir), paths[0])
        save(format_ir(ir) + "\n", paths[1])
        svg = os.path.join(self.folder, "graph.svg")
        try:
            paths.append(render(ir, svg))
        except GraphvizNotFoundError:
            self.log(
                f"flow-train: note: wrote {paths[0]} but not graph.svg: Graphviz's dot is not installed "
                "(apt-get install graphviz; or draw it later with: dot -Tsvg graph.dot -o graph.svg)"
            )
        self.log(f"graph of the training step ({len(ir.nodes)} nodes): {', '.join(paths)}")
        return paths
