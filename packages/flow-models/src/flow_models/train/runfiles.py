"""The files of a run folder other than the checkpoint: ``metrics.jsonl``, ``summary.json``, ``plot.png``.

Whole files are written atomically (a temporary ``<name>.<pid>.tmp`` next to them, then a rename),
so a run killed mid-write leaves the previous version, never half a file; the temporary is removed
when the write fails, and one left by a killed process is removed by the next run in that folder.
``metrics.jsonl`` grows a line at a time; a line cut short by a kill is dropped when a run resumes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

__all__ = ["atomic_write", "remove_stale_temps", "MetricsLog", "RUN_FILES"]

RUN_FILES = ("metrics.jsonl", "summary.json", "plot.png")
_TEMP = re.compile(r"(?P<name>.+)\.(?P<pid>[0-9]+)\.tmp")


def _temp_name(path: str) -> str:
    return f"{path}.{os.getpid()}.tmp"


def atomic_write(path: str, data: str | bytes) -> None:
    """Replace ``path`` by ``data`` all at once (readers see the old file or the new one)."""
    tmp = _temp_name(path)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process: leave its files alone
    return True


def remove_stale_temps(folder: str, names: tuple[str, ...] = RUN_FILES) -> list[str]:
    """Remove ``<name>.<pid>.tmp`` files of ``names`` whose process is gone; returns what was removed."""
    removed = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.fullmatch(entry)
        if m and m["name"] in names and not _alive(int(m["pid"])):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, entry))
                removed.append(entry)
    return removed


class MetricsLog:
    """``metrics.jsonl``: one JSON record per line (``kind`` is ``train`` or ``eval``).

    A resumed run keeps the records up to the checkpoint's step (dropping a last line cut short by a
    kill) and rewrites the file with them atomically; a fresh run starts it empty.
    """

    def __init__(self, path: str, resume_step: int | None, write: bool = True) -> None:
        self.path = path
        self.write = write  # False: keep the records in memory only (ranks other than 0)
        self.records: list[dict] = []
        if not write:
            return
        if resume_step is not None and os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and rec.get("step", 0) <= resume_step:
                        self.records.append(rec)
        atomic_write(path, "".join(json.dumps(r) + "\n" for r in self.records))

    def append(self, record: dict) -> None:
        self.records.append(record)
        if not self.write:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
