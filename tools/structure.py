"""Structure checks of the monorepo's source: module size and import cycles.

``python tools/structure.py`` prints every Python file (sources, tests, benchmarks) over the line
budget and every import cycle among the modules of each package, and exits 1 when it found either.
An import counts when it runs at import time: module level, including ``try``/``if`` blocks, but
not inside a function (a deferred import is how a cycle is broken on purpose) and not under
``if TYPE_CHECKING:``.

Run by ``nox -s structure``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600


def source_roots() -> dict[str, Path]:
    """Top-level import package -> its folder, for every package under packages/*/src and examples/*/src."""
    roots = {}
    for src in sorted([*ROOT.glob("packages/*/src"), *ROOT.glob("examples/*/src")]):
        for pkg in sorted(src.iterdir()):
            if (pkg / "__init__.py").is_file():
                roots[pkg.name] = pkg
    return roots


def module_name(path: Path, pkg_dir: Path) -> str:
    rel = path.relative_to(pkg_dir.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body):
    """The import statements of a module body that run when it is imported."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_nodes(node.body)
            yield from _import_time_nodes(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _import_time_nodes(block)
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            yield from _import_time_nodes(node.body)


def imports_of(path: Path, name: str, is_package: bool, known: set[str], deferred: bool = False) -> set[str]:
    """The known modules that importing ``name`` (the file ``path``) imports; with ``deferred``, also
    the imports inside functions (which run later, at the first call)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if is_package else name.rpartition(".")[0]
    out = set()

    def add(mod: str) -> None:
        # importing a.b.c runs a and a.b first; the importer's own ancestors are already running
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):
            m = ".".join(parts[:i])
            if i < len(parts) and name.startswith(m + "."):
                continue
            if m in known and m != name:
                out.add(m)

    nodes = (
        [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        if deferred
        else _import_time_nodes(tree.body)
    )
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            mod = ".".join(base + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        subs = [f"{mod}.{alias.name}" for alias in node.names]
        # `from pkg import submodule` depends on the submodule; a name defined in pkg/__init__ on pkg itself
        if not all(s in known for s in subs):
            add(mod)
        for s in subs:
            if s in known:
                add(s)
    return out


def import_graph(pkg_dir: Path, deferred: bool = False) -> dict[str, set[str]]:
    files = {module_name(path, pkg_dir): path for path in sorted(pkg_dir.rglob("*.py"))}
    known = set(files)
    return {name: imports_of(path, name, path.name == "__init__.py", known, deferred) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def long_modules(max_lines: int) -> list[tuple[Path, int]]:
    """Python files of the packages (sources and tests), examples, benchmarks and tools over the budget."""
    folders = [*ROOT.glob("packages/*"), *ROOT.glob("examples/*"), ROOT / "benchmarks", ROOT / "tools"]
    out = []
    for folder in sorted(f for f in folders if f.is_dir()):
        for path in sorted(folder.rglob("*.py")):
            if any(part in ("build", "_skbuild") or part.startswith(".") for part in path.relative_to(ROOT).parts):
                continue
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > max_lines:
                out.append((path.relative_to(ROOT), n))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-lines", type=int, default=MAX_LINES)
    p.add_argument("--packages", nargs="*", help="import packages to check for cycles (default: all)")
    p.add_argument(
        "--deferred", action="store_true", help="also count imports inside functions (reported, not failed on)"
    )
    args = p.parse_args(argv)
    failed = False
    for path, n in long_modules(args.max_lines):
        print(f"{path}: {n} lines (budget {args.max_lines}): split it by concern")
        failed = True
    for name, pkg_dir in source_roots().items():
        if args.packages and name not in args.packages:
            continue
        for comp in cycles(import_graph(pkg_dir)):
            print(f"import cycle in {name} ({len(comp)} modules): {', '.join(comp)}")
            failed = True
        if args.deferred:
            for comp in cycles(import_graph(pkg_dir, deferred=True)):
                print(f"note: with deferred imports, {name} has a cycle of {len(comp)} modules: {', '.join(comp)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
