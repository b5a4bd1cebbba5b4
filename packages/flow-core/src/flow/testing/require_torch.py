"""A pytest plugin for runs that compare flow with PyTorch: a test skipped for want of torch fails.

Comparison tests call ``pytest.importorskip("torch")``, so that flow's own test sessions need no
PyTorch. In the session that installs torch to run them (``nox -s parity``), a skip because torch
or one of its parts could not be imported would quietly turn a comparison off; with this plugin
(``pytest -p flow.testing.require_torch``) such a skip is reported as a failure instead.
"""

from __future__ import annotations

import re

import pytest

# The module a skip could not import: pytest.importorskip says "could not import 'X'", an ImportError
# "No module named 'X'". Only torch itself (or one of its submodules) counts: a comparison with
# another library (torchvision, timm, transformers) is optional even in a parity run.
_MISSING_MODULE = re.compile(r"(?:could not import|No module named) '([\w.]+)'")


def _skipped_for_torch(report) -> bool:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return any(m.split(".")[0] == "torch" for m in _MISSING_MODULE.findall(reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _skipped_for_torch(report):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} was skipped because torch could not be imported, in a run that "
            f"compares flow with PyTorch: {report.longrepr}"
        )


def pytest_sessionstart(session) -> None:
    try:
        import torch  # noqa: F401
    except ImportError as e:  # the whole point of the run is missing
        raise pytest.UsageError(f"flow.testing.require_torch: PyTorch is not importable ({e})") from e
