"""docs/errors.md lists every exception class flow-models defines."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import flow_models

DOC = Path(__file__).resolve().parents[3] / "docs" / "errors.md"


@pytest.mark.skipif(not DOC.is_file(), reason="docs/ is not next to this checkout")
def test_every_exception_class_is_documented():
    found = set()
    for info in pkgutil.walk_packages(flow_models.__path__, "flow_models."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found |= {
            name
            for name, obj in vars(module).items()
            if inspect.isclass(obj)
            and issubclass(obj, BaseException)
            and obj.__module__ == module.__name__
            and not name.startswith("_")
        }
    assert {"TrainError", "DataError", "ZooError"} <= found
    text = DOC.read_text(encoding="utf-8")
    missing = sorted(n for n in found if f"`{n}`" not in text)
    assert not missing, f"docs/errors.md does not list {missing}"
