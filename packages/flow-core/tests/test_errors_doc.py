"""docs/errors.md lists every exception class flow-core defines (a new one without a line there fails)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import flow

DOC = Path(__file__).resolve().parents[3] / "docs" / "errors.md"
OPTIONAL = {"onnx", "onnxruntime", "tensorboard", "PIL"}  # flow-core's extras


def exception_classes(package) -> set[str]:
    names = set()
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as e:
            if e.name in OPTIONAL:  # a tool module of an extra that is not installed here (flow.onnx's rules)
                continue
            raise
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
            ):
                names.add(name)
    return names


@pytest.mark.skipif(not DOC.is_file(), reason="docs/ is not next to this checkout")
def test_every_exception_class_is_documented():
    text = DOC.read_text(encoding="utf-8")
    found = exception_classes(flow)
    assert {"FlowError", "OpError", "CheckpointError", "OptimizerError", "CollateError"} <= found
    missing = sorted(n for n in found if f"`{n}`" not in text)
    assert not missing, f"docs/errors.md does not list {missing}"
