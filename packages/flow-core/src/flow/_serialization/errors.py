"""Checkpoint exceptions: :class:`CheckpointError` for bad content, and OS failures that are both
``CheckpointError`` and ``OSError`` (with the OS's ``errno`` and the path kept)."""

from __future__ import annotations

import os

from flow.errors import FlowError

__all__ = [
    "CheckpointError",
    "CheckpointOSError",
    "CheckpointFileNotFoundError",
    "CheckpointPermissionError",
    "CheckpointIsADirectoryError",
    "CheckpointNotADirectoryError",
    "os_error",
]


class CheckpointError(FlowError):
    """A checkpoint could not be written or read: an unsupported object, or a corrupt, truncated or foreign file."""


class CheckpointOSError(CheckpointError, OSError):
    """The operating system refused to read or write a checkpoint (permission, no space, missing directory ...).

    ``errno``, ``strerror`` and ``filename`` are set as on any ``OSError``, so both ``except OSError`` and
    ``except CheckpointError`` catch it.
    """

    def __init__(self, *args) -> None:
        # RuntimeError precedes OSError in the MRO, so OSError's own argument parsing (errno, strerror,
        # filename) has to be asked for explicitly.
        OSError.__init__(self, *args)


class CheckpointFileNotFoundError(CheckpointOSError, FileNotFoundError):
    """A checkpoint, or the directory to save one into, does not exist."""


class CheckpointPermissionError(CheckpointOSError, PermissionError):
    """The OS denied access to a checkpoint or its directory."""


class CheckpointIsADirectoryError(CheckpointOSError, IsADirectoryError):
    """A directory was given where a checkpoint file was expected."""


class CheckpointNotADirectoryError(CheckpointOSError, NotADirectoryError):
    """A component of a checkpoint's path is a file, not a directory."""


_CLASSES = (
    (FileNotFoundError, CheckpointFileNotFoundError),
    (PermissionError, CheckpointPermissionError),
    (IsADirectoryError, CheckpointIsADirectoryError),
    (NotADirectoryError, CheckpointNotADirectoryError),
)


def os_error(e: OSError, message: str, path) -> CheckpointOSError:
    """``e`` as a :class:`CheckpointOSError` (of the matching builtin subclass) saying ``message`` about ``path``."""
    cls = next((c for base, c in _CLASSES if isinstance(e, base)), CheckpointOSError)
    reason = e.strerror or str(e) or type(e).__name__
    return cls(e.errno, f"{message}: {reason}", os.fsdecode(path) if path is not None else None)
