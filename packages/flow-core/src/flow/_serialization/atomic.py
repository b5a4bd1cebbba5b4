"""Writing a checkpoint file atomically, and cleaning up after saves that were killed.

A save writes ``.<name>.flowtmp-<origin>-<pid>-<random>`` in the target's directory, fsyncs it,
renames it over the target and fsyncs the directory, so the target is always either the old file
or the complete new one. A save killed (SIGKILL, power loss) before the rename leaves its temp
file behind; the next save into that directory removes such files when they are provably stale.

Staleness is decided by the writer's pid, not by age alone: a checkpoint of many GB can take
minutes to write, and an age threshold short enough to be useful would delete a live writer's
file. ``<origin>`` is a hash of the host name, boot id and pid namespace, so the pid test is used
only where it means something (same machine, same boot, same pid namespace): there, a file whose
writer no longer exists is removed at once, and one whose pid is alive (the writer, or an
unrelated process that reused the pid) is kept. Files from another origin (a shared network
directory, a container, a reboot), and those of the older naming ``.<name>.<pid>.<random>.tmp``,
cannot be tested that way; they are removed only once they have not been modified for
:data:`STALE_AFTER_S`, far longer than any write takes between two modifications.
"""

from __future__ import annotations

import os
import re
import socket
import time
import zlib

from flow._serialization.errors import CheckpointIsADirectoryError, os_error

__all__ = ["STALE_AFTER_S", "temp_name", "remove_stale", "write_atomic"]

STALE_AFTER_S = 6 * 3600
_TEMP = re.compile(r"^\.(?P<base>.+)\.flowtmp-(?P<origin>[0-9a-f]{8})-(?P<pid>[0-9]{1,10})-[0-9a-f]{8}$")
_LEGACY = re.compile(r"^\.(?P<base>.+)\.(?P<pid>[0-9]{1,10})\.[0-9a-f]{8}\.tmp$")
_CHUNK = 1 << 30  # os.write takes at most ~2 GiB on Linux and INT_MAX bytes on macOS
_BASE_MAX = 180  # keeps the temp name under NAME_MAX (255) however long the target's name is


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _origin() -> str:
    ns = ""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except (OSError, AttributeError):
        pass
    key = "\0".join([socket.gethostname(), _read("/proc/sys/kernel/random/boot_id"), ns])
    return f"{zlib.crc32(key.encode('utf-8', 'surrogateescape')):08x}"


_ORIGIN = _origin()
# Windows' os.kill(pid, 0) would send CTRL_C_EVENT; there, stale files are found by age only.
_CAN_PROBE = os.name == "posix"


def temp_name(path: str) -> str:
    directory, base = os.path.split(path)
    return os.path.join(directory, f".{base[:_BASE_MAX]}.flowtmp-{_ORIGIN}-{os.getpid()}-{os.urandom(4).hex()}")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # EPERM: it exists but is another user's; anything else: unsure
        return True
    return True


def _is_stale(directory: str, name: str, target_base: str, now: float) -> bool:
    m = _TEMP.match(name)
    if m is not None and m["origin"] == _ORIGIN and _CAN_PROBE:
        return not _pid_alive(int(m["pid"]))
    if m is None:
        m = _LEGACY.match(name)
        if m is None or m["base"] != target_base:  # the old naming is less distinctive: only the target's own
            return False
    try:
        return now - os.stat(os.path.join(directory, name)).st_mtime > STALE_AFTER_S
    except OSError:
        return False


def remove_stale(directory: str, target_base: str) -> list[str]:
    """Remove the stale temp files of killed saves in ``directory``; returns their names. Never raises."""
    removed = []
    now = time.time()
    try:
        with os.scandir(directory) as it:
            names = [
                e.name for e in it if e.name.startswith(".") and (".flowtmp-" in e.name or e.name.endswith(".tmp"))
            ]
    except OSError:
        return removed
    for name in names:
        if _is_stale(directory, name, target_base, now):
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except OSError:  # removed by a concurrent save, or not ours to remove: either way not this save's problem
                pass
    return removed


def _write_all(fd: int, data) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view[:_CHUNK])
        view = view[n:]


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # some platforms cannot open a directory; the file itself was synced
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str, write_body) -> None:
    """Write a file at ``path`` by calling ``write_body(write)``; the old file stays until the new one is complete.

    OS failures (missing directory, permission, read-only file system, no space) raise a
    :class:`CheckpointOSError` naming ``path``; nothing is left under the target or temp name.
    """
    if os.path.isdir(path):
        raise CheckpointIsADirectoryError(21, "flow.save: the target is a directory, not a file", path)
    directory = os.path.dirname(os.path.abspath(path))
    remove_stale(directory, os.path.basename(path))
    tmp = temp_name(os.path.join(directory, os.path.basename(path)))
    step = "create a temporary file for"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0), 0o666
        )
    except FileNotFoundError as e:
        raise os_error(e, "flow.save: the directory to save into does not exist", path) from e
    except OSError as e:
        raise os_error(e, f"flow.save: cannot {step} the checkpoint", path) from e
    try:
        try:
            step = "write"
            write_body(lambda data: _write_all(fd, data))
            step = "flush (fsync)"
            os.fsync(fd)
        finally:
            os.close(fd)
        step = "move into place"
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise os_error(e, f"flow.save: cannot {step} the checkpoint", path) from e
        raise
    _fsync_directory(directory)
