"""tools/structure.py finds import-time cycles (not deferred ones) and long modules."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import structure  # noqa: E402


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "pkg"
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_an_import_time_cycle_is_found(tmp_path):
    pkg = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": "import pkg.a\n"})
    assert structure.cycles(structure.import_graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path):
    pkg = _package(tmp_path, {"__init__.py": "from pkg.a import f\n", "a.py": "import pkg\n"})
    assert structure.cycles(structure.import_graph(pkg)) == [["pkg", "pkg.a"]]


def test_deferred_and_type_checking_imports_are_not_cycles(tmp_path):
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
            "def f():\n    from pkg import a\n    return a\n",
        },
    )
    assert structure.cycles(structure.import_graph(pkg)) == []
    assert structure.cycles(structure.import_graph(pkg, deferred=True)) == [["pkg.a", "pkg.b"]]


def test_importing_a_submodule_of_a_running_package_is_not_a_cycle(tmp_path):
    pkg = _package(tmp_path, {"__init__.py": "from pkg import a\n", "a.py": "from pkg import b\n", "b.py": "x = 1\n"})
    assert structure.cycles(structure.import_graph(pkg)) == []
