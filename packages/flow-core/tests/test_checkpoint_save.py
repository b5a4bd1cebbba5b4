"""flow.save failures: OS errors (no space, read-only, permission, missing directory), atomicity,
temp files of killed saves, structures nested too deeply, bad arguments."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import flow
from flow._serialization import atomic
from flow.errors import OpError, OpTypeError
from flow.serialization import MAX_DEPTH, CheckpointError, CheckpointOSError, load, save

LINUX_PROC = os.path.isdir("/proc/self/fd")


def assert_os_error(err: BaseException, code: int, path) -> None:
    assert isinstance(err, CheckpointOSError) and isinstance(err, OSError) and isinstance(err, CheckpointError)
    assert err.errno == code and err.filename == str(path), (err.errno, err.filename)
    assert str(path) in str(err) and "flow.save" in str(err)


def assert_untouched(directory, target, epoch: int) -> None:
    assert load(target)["epoch"] == epoch
    assert sorted(os.listdir(directory)) == [os.path.basename(target)]  # no temporary file left behind


def run_python(script: str, **kw) -> dict:
    """Run ``script`` in a fresh interpreter; it prints one JSON line, which is returned."""
    out = subprocess.run(
        [sys.executable, "-c", REPORT + textwrap.dedent(script)], capture_output=True, text=True, timeout=120, **kw
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


REPORT = """
import errno, json, os, flow
from flow.serialization import CheckpointError, load
def report(fn):
    try:
        fn()
    except BaseException as e:
        print(json.dumps({"types": [c.__name__ for c in type(e).__mro__], "errno": getattr(e, "errno", None),
                          "filename": getattr(e, "filename", None), "message": str(e)}))
    else:
        print(json.dumps({"types": []}))
"""


# -- no space -----------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not LINUX_PROC, reason="tells the temp file's descriptor by /proc/self/fd")
def test_no_space_mid_write(tmp_path, monkeypatch):
    """A full disk, simulated at the lowest level flow writes through: os.write fails with ENOSPC after 4 KiB."""
    target = tmp_path / "ck.flow"
    save({"w": flow.ones(1000), "epoch": 1}, target)
    real_write = os.write
    written = []

    def write(fd, data):
        if ".flowtmp-" not in os.readlink(f"/proc/self/fd/{fd}"):
            return real_write(fd, data)
        if sum(written) >= 4096:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(real_write(fd, memoryview(data)[:4096]))
        return written[-1]

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError) as ei:
        save({"w": flow.zeros(100_000), "epoch": 2}, target)
    monkeypatch.undo()
    assert 4096 <= sum(written) < 400_000  # the failure came part way through the file
    assert_os_error(ei.value, errno.ENOSPC, target)
    assert "No space left on device" in str(ei.value)
    assert_untouched(tmp_path, target, 1)


@pytest.fixture
def small_tmpfs():
    """A 1 MiB tmpfs (a real file system that fills up), where this process may mount one."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root on Linux")
    where = tempfile.mkdtemp(prefix="flow-tmpfs-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", where], capture_output=True).returncode:
        os.rmdir(where)
        pytest.skip("this machine does not allow mounting a tmpfs")
    try:
        yield where
    finally:
        subprocess.run(["umount", where], check=True)
        os.rmdir(where)


def test_a_real_full_disk_and_a_read_only_file_system(small_tmpfs):
    target = os.path.join(small_tmpfs, "ck.flow")
    save({"w": flow.ones(1000), "epoch": 1}, target)
    with pytest.raises(OSError) as ei:
        save({"w": flow.zeros(1_000_000), "epoch": 2}, target)  # 4 MB into 1 MiB
    assert_os_error(ei.value, errno.ENOSPC, target)
    assert_untouched(small_tmpfs, target, 1)
    save({"w": flow.zeros(1000), "epoch": 3}, target)  # the space the failed save took was given back
    assert_untouched(small_tmpfs, target, 3)
    subprocess.run(["mount", "-o", "remount,ro", small_tmpfs], check=True)
    with pytest.raises(OSError) as ei:
        save({"epoch": 4}, target)
    assert_os_error(ei.value, errno.EROFS, target)
    assert load(target)["epoch"] == 3


def test_file_size_limit_is_a_real_write_failure(tmp_path):
    """RLIMIT_FSIZE makes the kernel fail a write (EFBIG) without root: the path a full disk takes."""
    pytest.importorskip("resource")
    target = tmp_path / "ck.flow"
    save({"w": flow.ones(10), "epoch": 1}, target)
    got = run_python(f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        report(lambda: flow.save({{"w": flow.zeros(100_000), "epoch": 2}}, {str(target)!r}))
    """)
    assert got["errno"] == errno.EFBIG and got["filename"] == str(target)
    assert {"CheckpointOSError", "CheckpointError", "OSError"} <= set(got["types"])
    assert_untouched(tmp_path, target, 1)


# -- permission, read-only and missing directories ------------------------------------------------------------------
def test_read_only_directory(tmp_path):
    directory = tempfile.mkdtemp(prefix="flow-ro-")  # under /tmp, so that another user can reach it
    try:
        target = os.path.join(directory, "ck.flow")
        save({"epoch": 1}, target)
        os.chmod(directory, 0o555)
        if os.geteuid() != 0:
            with pytest.raises(PermissionError) as ei:
                save({"epoch": 2}, target)
            assert_os_error(ei.value, errno.EACCES, target)
        else:  # root writes anywhere: ask an unprivileged user to save there
            got = run_python(
                f"""
                os.setgroups([]); os.setgid(65534); os.setuid(65534)
                report(lambda: flow.save({{"epoch": 2}}, {target!r}))
            """,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
            assert got["errno"] == errno.EACCES and got["filename"] == target, got
            assert {"CheckpointPermissionError", "PermissionError", "CheckpointError"} <= set(got["types"])
        assert_untouched(directory, target, 1)
    finally:
        os.chmod(directory, 0o755)
        shutil.rmtree(directory)


def test_missing_directory_a_file_in_its_place_and_a_directory_as_target(tmp_path):
    target = tmp_path / "no" / "such" / "ck.flow"
    with pytest.raises(FileNotFoundError) as ei:
        save({"a": 1}, target)
    assert_os_error(ei.value, errno.ENOENT, target)
    assert "does not exist" in str(ei.value)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError) as ei:
        save({"a": 1}, tmp_path / "file" / "ck.flow")
    assert_os_error(ei.value, errno.ENOTDIR, tmp_path / "file" / "ck.flow")
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError) as ei:
        save({"a": 1}, tmp_path / "dir")
    assert_os_error(ei.value, errno.EISDIR, tmp_path / "dir")
    assert sorted(os.listdir(tmp_path)) == ["dir", "file"] and os.listdir(tmp_path / "dir") == []


def test_errors_of_a_file_object_and_bad_targets(tmp_path):
    class Full(io.RawIOBase):
        name = "full-stream"

        def writable(self):
            return True

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as ei:
        save({"w": flow.ones(3)}, Full())
    assert_os_error(ei.value, errno.ENOSPC, "full-stream")
    with open(tmp_path / "t.txt", "w") as f, pytest.raises(OpTypeError, match="text mode.*'wb'"):
        save({"a": 1}, f)
    for bad in (3, None, ["x"]):
        with pytest.raises(OpTypeError, match="path or a writable binary file object"):
            save({"a": 1}, bad)
    buf = io.BytesIO()
    save({"a": flow.ones(2)}, buf)
    assert load(io.BytesIO(buf.getvalue()))["a"].tolist() == [1.0, 1.0]


# -- atomicity ---------------------------------------------------------------------------------------------------
def test_interrupt_mid_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "ck.flow"
    save({"epoch": 1}, target)

    def interrupted(fd, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "_write_all", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save({"epoch": 2}, target)
    monkeypatch.undo()
    assert_untouched(tmp_path, target, 1)


def test_fsync_and_replace_order_and_file_mode(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    save({"a": flow.ones(3)}, tmp_path / "a.flow")
    monkeypatch.undo()
    assert events == ["fsync", "replace", "fsync"]  # file synced, moved into place, directory synced
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "a.flow").stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would create it


KILLED_SAVE = """
import numpy as np, flow, sys, time
big = {"epoch": 2, "w": [flow.from_numpy(np.full(4_000_000, i, np.float32)) for i in range(4)]}
print("ready", flush=True)
flow.save(big, sys.argv[1])
print("saved", flush=True)
time.sleep(60)
"""


def _kill_mid_save(target) -> tuple[int, list[str]]:
    """SIGKILL a process while it writes ``target``; its pid and the temp files it left (none if it was too fast)."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SAVE, str(target)], stdout=subprocess.PIPE)
    directory = os.path.dirname(target)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until the temporary file is being written
            tmps = [n for n in os.listdir(directory) if ".flowtmp-" in n]
            try:
                if tmps and os.path.getsize(os.path.join(directory, tmps[0])) > 0:
                    break
            except FileNotFoundError:  # renamed meanwhile
                pass
            time.sleep(0.0005)
        else:
            pytest.fail("the save never started")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    return proc.pid, [n for n in os.listdir(directory) if ".flowtmp-" in n]


def test_kill_during_save_keeps_the_checkpoint_and_the_next_save_removes_the_temp_file(tmp_path):
    target = tmp_path / "big.flow"
    save({"epoch": 1, "w": flow.ones(10)}, target)
    for _ in range(5):
        pid, left = _kill_mid_save(target)
        back = load(target)  # the old checkpoint, or a complete new one: never a torn file
        assert back["epoch"] in (1, 2)
        if back["epoch"] == 1:
            assert back["w"].tolist() == [1.0] * 10
        else:
            assert [float(t._data[0]) for t in back["w"]] == list(range(4))
        if left:
            break
    else:
        pytest.fail("five saves finished before they could be killed")
    assert len(left) == 1 and f"-{pid}-" in left[0] and os.path.getsize(tmp_path / left[0]) > 0
    save({"epoch": 3}, target)
    assert sorted(os.listdir(tmp_path)) == ["big.flow"]
    assert load(target)["epoch"] == 3


def test_only_stale_temp_files_of_flows_naming_are_removed(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    other_origin = "0" * 8 if atomic._ORIGIN != "0" * 8 else "1" * 8
    names = {
        f".ck.flow.flowtmp-{atomic._ORIGIN}-{live.pid}-0123abcd": "kept",  # a save still being written
        f".ck.flow.flowtmp-{atomic._ORIGIN}-{os.getpid()}-0123abcd": "kept",  # this process's own
        f".ck.flow.flowtmp-{atomic._ORIGIN}-{dead.pid}-0123abcd": "removed",  # its writer is gone
        f".other.flow.flowtmp-{atomic._ORIGIN}-{dead.pid}-0123abcd": "removed",  # another checkpoint's, same dir
        f".ck.flow.flowtmp-{other_origin}-{dead.pid}-0123abcd": "kept",  # another machine's, fresh
        f".ck.flow.flowtmp-{other_origin}-{live.pid}-4567abcd": "removed",  # another machine's, old (below)
        f".ck.flow.{dead.pid}.0123abcd.tmp": "kept",  # older naming, fresh
        f".ck.flow.{dead.pid}.4567abcd.tmp": "removed",  # older naming, old
        f".other.flow.{dead.pid}.4567abcd.tmp": "kept",  # older naming, another target
        f"ck.flow.flowtmp-{atomic._ORIGIN}-{dead.pid}-0123abcd": "kept",  # not flow's pattern
        ".ck.flow.tmp": "kept",
        "notes.txt": "kept",
    }
    try:
        old = time.time() - atomic.STALE_AFTER_S - 60
        for name in names:
            (tmp_path / name).write_bytes(b"partial")
            if "4567abcd" in name:
                os.utime(tmp_path / name, (old, old))
        save({"epoch": 1}, tmp_path / "ck.flow")
        kept = set(os.listdir(tmp_path))
        assert {n for n, what in names.items() if what == "kept"} | {"ck.flow"} == kept
    finally:
        live.kill()
        live.wait()


def test_a_long_file_name_gets_a_temp_file_that_fits(tmp_path):
    target = tmp_path / ("c" * 250)
    save({"epoch": 1}, target)
    assert load(target)["epoch"] == 1 and os.listdir(tmp_path) == ["c" * 250]


# -- structures that cannot be saved ---------------------------------------------------------------------------------
def _nest(kind: str, depth: int):
    obj = flow.ones(1)
    for _ in range(depth):
        obj = {"x": obj} if kind == "dict" else [obj] if kind == "list" else (obj,)
    return obj


@pytest.mark.parametrize("kind", ["dict", "list", "tuple"])
def test_nesting_depth_limit(tmp_path, kind):
    deepest = _nest(kind, MAX_DEPTH)
    save(deepest, tmp_path / "ok.flow")
    back = load(tmp_path / "ok.flow")
    for _ in range(MAX_DEPTH):
        back = back["x"] if kind == "dict" else back[0]
    assert back.tolist() == [1.0]
    with pytest.raises(CheckpointError, match=f"nested more than {MAX_DEPTH}.*at most {MAX_DEPTH} levels"):
        save(_nest(kind, MAX_DEPTH + 1), tmp_path / "deep.flow")
    with pytest.raises(CheckpointError, match=f"at most {MAX_DEPTH}"):
        save(_nest(kind, 100_000), tmp_path / "deep.flow")
    assert os.listdir(tmp_path) == ["ok.flow"]


def test_nesting_within_the_limit_but_past_the_recursion_limit(tmp_path):
    import inspect

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 60)
    try:
        with pytest.raises(CheckpointError, match="recursion limit"):
            save(_nest("dict", MAX_DEPTH), tmp_path / "deep.flow")
    finally:
        sys.setrecursionlimit(limit)
    assert os.listdir(tmp_path) == []


def test_reference_cycles(tmp_path):
    a: list = [1]
    a.append(a)
    with pytest.raises(CheckpointError, match="'1' contains itself"):
        save(a, tmp_path / "c.flow")
    d: dict = {"cfg": {}}
    d["cfg"]["parent"] = d
    with pytest.raises(CheckpointError, match="'cfg.parent' contains itself"):
        save(d, tmp_path / "c.flow")
    shared = {"lr": 0.1}
    save({"a": shared, "b": shared, "c": [shared, shared]}, tmp_path / "ok.flow")  # shared, not a cycle
    assert load(tmp_path / "ok.flow")["c"] == [{"lr": 0.1}] * 2
    assert os.listdir(tmp_path) == ["ok.flow"]


def test_values_that_json_cannot_hold_and_bad_metadata(tmp_path):
    with pytest.raises(CheckpointError, match="cannot write the structure"):
        save({"n": 10**5000}, tmp_path / "x.flow")
    with pytest.raises(OpTypeError, match="metadata must be a dict"):
        save({}, tmp_path / "x.flow", metadata=[("a", "b")])
    with pytest.raises(OpTypeError, match="metadata must map str to str"):
        save({}, tmp_path / "x.flow", metadata={"a": 1})
    for key in ("format", "flow.structure", "flow.checksum", "flow.mine"):
        with pytest.raises(OpError, match=f"'{key}' is reserved"):
            save({}, tmp_path / "x.flow", metadata={key: "x"})
    assert os.listdir(tmp_path) == []
    save({}, tmp_path / "x.flow", metadata={"flow-train.format": "v"})
    assert load(tmp_path / "x.flow") == {}
