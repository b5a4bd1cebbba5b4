"""``flow.mock_torch``: run unmodified PyTorch scripts on flow.

Three ways in::

    python -m flow.mock_torch [--report] script.py args...   # one script (and its child processes)
    eval $(python -m flow.mock_torch [--report])               # this shell: every python it starts
    eval $(python -m flow.mock_torch disable)                  # ... and back

    with flow.mock_torch.enable():                              # in Python, this process
        import torch.nn as nn                                   # flow.nn's classes

While mocked, ``import torch`` / ``import torch.X.Y`` give modules that stand for ``flow`` /
``flow.X.Y`` (see :mod:`flow.mock_torch._finder`; ``MODULE_TABLE`` lists where the paths differ).
A name flow lacks raises :class:`UnsupportedTorchAPIError` ("torch.X.name is not supported by
flow yet"), an ``AttributeError``, so ``hasattr`` still answers False. With ``--report`` (or
``FLOW_MOCK_TORCH_REPORT``) every missing name the run touched is printed when it ends, also when
the script fails.

Child processes: the shell form and the script form put a directory holding a ``torch`` package
first on ``PYTHONPATH``; that package turns the mock on in any Python process that imports
``torch``, so spawned DataLoader workers and ``subprocess`` children see flow too (forked ones
inherit it anyway).
"""

from __future__ import annotations

import atexit
import os
import sys
from types import ModuleType

from flow.mock_torch import _finder
from flow.mock_torch._finder import MODULE_TABLE, UnsupportedTorchAPIError, clear_missing, missing_names

__all__ = [
    "enable",
    "disable",
    "is_enabled",
    "missing_names",
    "clear_missing",
    "format_report",
    "UnsupportedTorchAPIError",
    "MODULE_TABLE",
    "SHIM_DIR",
    "REPORT_ENV",
]

#: the directory whose ``torch`` package turns the mock on in processes started with it on PYTHONPATH
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")
#: "1" (or "stderr"): each process prints its report to stderr at exit; else a file each process appends to
REPORT_ENV = "FLOW_MOCK_TORCH_REPORT"

_INSERTED = "sys.path"  # the key of an enable()'s env change that says it added SHIM_DIR to sys.path
# one entry per enable() not yet undone: (the torch modules it took out of sys.modules, its env change)
_saved: list[tuple[dict[str, ModuleType], dict[str, str | None]]] = []


def is_enabled() -> bool:
    """True while ``import torch`` answers with flow in this process."""
    return _finder.is_installed()


def _with_shim(pythonpath: str | None) -> str:
    parts = [p for p in (pythonpath or "").split(os.pathsep) if p and p != SHIM_DIR]
    return os.pathsep.join([SHIM_DIR, *parts])


def _without_shim(pythonpath: str | None) -> str:
    return os.pathsep.join(p for p in (pythonpath or "").split(os.pathsep) if p and p != SHIM_DIR)


class _Enabled:
    """What :func:`enable` returns: the mock is on already; ``with`` turns it off again on exit."""

    def __enter__(self) -> _Enabled:
        return self

    def __exit__(self, *exc: object) -> None:
        disable()


def enable(subprocesses: bool = False) -> _Enabled:
    """Turn the mock on: ``import torch...`` gives flow's modules until :func:`disable`.

    Usable as a call or as ``with flow.mock_torch.enable():``. Modules of a real torch imported
    before are taken out of ``sys.modules`` and put back by :func:`disable` (code that already holds
    them keeps using them). With ``subprocesses=True`` the mock also reaches Python processes
    started meanwhile (``PYTHONPATH`` gets the shim directory; ``disable`` restores it). Calls nest.
    """
    if not isinstance(subprocesses, bool):
        raise TypeError(f"flow.mock_torch.enable: subprocesses must be a bool, got {type(subprocesses).__name__}")
    real = {n: m for n, m in sys.modules.items() if (n == "torch" or n.startswith("torch.")) and _is_real(m)}
    env: dict[str, str | None] = {}
    if subprocesses:
        env["PYTHONPATH"] = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = _with_shim(env["PYTHONPATH"])
        if SHIM_DIR not in sys.path:
            # a spawned child takes its sys.path from this process (multiprocessing's preparation data):
            # first, ahead of site-packages, or an installed torch would win there
            sys.path.insert(0, SHIM_DIR)
            env[_INSERTED] = SHIM_DIR  # this enable() put it there, so its disable() takes it out
    _saved.append((real, env))
    _finder.install()
    return _Enabled()


def _is_real(m: object) -> bool:
    return not isinstance(m, _finder.TorchModule)


def disable() -> None:
    """Undo the latest :func:`enable`: ``sys.modules`` and ``PYTHONPATH`` as they were before it.

    Once every ``enable`` is undone the finder leaves ``sys.meta_path``; a nested ``disable`` keeps
    the mock on for the enclosing ``enable``. Calling it while the mock is off does nothing.
    """
    if not _saved:
        _finder.uninstall()  # a finder installed by hand: off too
        return
    real, env = _saved.pop()
    if "PYTHONPATH" in env:
        old = env["PYTHONPATH"]
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    if _INSERTED in env and SHIM_DIR in sys.path:
        sys.path.remove(SHIM_DIR)
    if _saved:
        return
    _finder.uninstall()
    sys.modules.update(real)


def format_report(missing: dict[str, str] | None = None) -> str:
    """The ``--report`` text: every missing torch name with where it was first used."""
    missing = missing_names() if missing is None else missing
    if not missing:
        return "flow.mock_torch: every torch name this run used exists in flow\n"
    lines = [f"flow.mock_torch: {len(missing)} torch name(s) this run used are not supported by flow yet:"]
    width = max(len(n) for n in missing)
    lines += [f"  {name:<{width}}  first used at {missing[name]}" for name in sorted(missing)]
    return "\n".join(lines) + "\n"


def _write_report(dest: str) -> None:
    missing = missing_names()
    if dest in ("1", "stderr"):
        sys.stderr.write(format_report(missing))
        return
    # several processes append to one file: one write per process, each line "name<TAB>where"
    text = "".join(f"{name}\t{where}\n" for name, where in missing.items())
    if text:
        with open(dest, "a", encoding="utf-8") as f:
            f.write(text)


def read_report_file(path: str) -> dict[str, str]:
    """The names the processes of a run appended to ``path`` (see :data:`REPORT_ENV`), first use kept."""
    out: dict[str, str] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, _, where = line.rstrip("\n").partition("\t")
                out.setdefault(name, where)
    return out


_reporting: list[str] = []


def _report_at_exit() -> None:
    """If :data:`REPORT_ENV` asks for it, write this process's report when it ends (forked children too)."""
    dest = os.environ.get(REPORT_ENV)
    if not dest or _reporting:
        return
    _reporting.append(dest)
    atexit.register(_write_report, dest)
    _report_from_forks(dest)


def _report_from_forks(dest: str) -> None:
    """Make every process forked from this one write its report to ``dest`` when it ends."""
    import multiprocessing.util as mpu

    def after_fork(_: object) -> None:
        # a forked child (a DataLoader worker) leaves by os._exit, so no atexit, but it runs
        # multiprocessing's finalizers first
        mpu.Finalize(None, _write_report, args=(dest,), exitpriority=0)

    mpu.register_after_fork(_report_from_forks, after_fork)


def _activate_from_shim() -> None:
    """What the shim's ``torch`` package runs: the mock on for this whole process."""
    if not is_enabled():
        _saved.append(({}, {}))
        _finder.install()
    _report_at_exit()
