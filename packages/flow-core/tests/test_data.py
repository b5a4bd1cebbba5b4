"""flow.utils.data: datasets, samplers, collation and the DataLoader with 0 and several workers."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import namedtuple

import numpy as np
import pytest

import flow
import flow.utils.data as D
from flow.errors import FlowError
from flow.utils.data import (
    BatchSampler,
    CollateError,
    CollateTypeError,
    ConcatDataset,
    DataLoader,
    DataLoaderWorkerError,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
    default_collate,
    get_worker_info,
    random_split,
)

Point = namedtuple("Point", ["x", "y"])


# Module-level datasets so that 'spawn' workers can import them.
class Squares(Dataset):
    def __init__(self, n=23):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return {"x": np.full(3, i, np.float32), "y": i * i, "name": f"s{i}"}


class Failing(Squares):
    def __getitem__(self, i):
        if i == 13:
            raise ValueError(f"sample {i} is broken on purpose")
        return super().__getitem__(i)


class NoCtorArgsError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} {b}")


class FailingOddly(Squares):
    def __getitem__(self, i):
        raise NoCtorArgsError("weird", i)


class Dying(Squares):
    def __getitem__(self, i):
        if get_worker_info() is not None and i == 5:
            os._exit(3)
        return super().__getitem__(i)


class Slow(Squares):
    def __getitem__(self, i):
        time.sleep(2.0 if i >= 2 else 0)
        return i


class WorkerId(Squares):
    def __getitem__(self, i):
        w = get_worker_info()
        return {
            "i": i,
            "pid": os.getpid(),
            "wid": -1 if w is None else w.id,
            "rand": float(np.random.random()),
            "flow_rand": float(flow.rand(1).item()),
        }


class Stream(IterableDataset):
    def __init__(self, n=17):
        self.n = n

    def __iter__(self):
        w = get_worker_info()
        start, step = (0, 1) if w is None else (w.id, w.num_workers)
        for i in range(start, self.n, step):
            yield flow.tensor([float(i)])

    def __len__(self):
        return self.n


def _init_fn(worker_id):
    np.random.seed(1000 + worker_id)


def _bad_init(worker_id):
    raise RuntimeError("init failed")


# -- datasets -----------------------------------------------------------------------------------------
def test_tensor_dataset_subset_concat():
    x = flow.tensor(np.arange(12, dtype=np.float32).reshape(6, 2))
    y = flow.tensor(np.arange(6))
    ds = TensorDataset(x, y)
    assert len(ds) == 6
    a, b = ds[4]
    assert a.tolist() == [8.0, 9.0] and b.item() == 4
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(x, flow.tensor(np.arange(5)))
    sub = Subset(ds, [5, 0, 2])
    assert [int(s[1].item()) for s in (sub[i] for i in range(3))] == [5, 0, 2]
    cat = ConcatDataset([sub, Squares(4)])
    assert len(cat) == 7 and cat[3]["y"] == 0 and cat[-1]["y"] == 9 and cat[0][1].item() == 5
    with pytest.raises(IndexError):
        cat[7]
    assert len(ds + ds) == 12


def test_random_split():
    ds = Squares(10)
    parts = random_split(ds, [3, 7], generator=flow.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(parts[0].indices + parts[1].indices) == list(range(10))
    again = random_split(ds, [3, 7], generator=flow.Generator().manual_seed(1))
    assert again[0].indices == parts[0].indices
    fr = random_split(Squares(11), [0.5, 0.3, 0.2], generator=flow.Generator().manual_seed(0))
    assert [len(p) for p in fr] == [6, 3, 2]
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [3, 3])


# -- samplers -----------------------------------------------------------------------------------------------
def test_samplers():
    ds = Squares(10)
    assert list(SequentialSampler(ds)) == list(range(10))
    g = flow.Generator().manual_seed(0)
    perm = list(RandomSampler(ds, generator=g))
    assert sorted(perm) == list(range(10)) and perm != list(range(10))
    assert list(RandomSampler(ds, generator=flow.Generator().manual_seed(0))) == perm
    rep = list(RandomSampler(ds, replacement=True, num_samples=50, generator=g))
    assert len(rep) == 50 and set(rep) <= set(range(10))
    assert len(list(RandomSampler(ds, num_samples=25, generator=g))) == 25
    assert sorted(SubsetRandomSampler([3, 5, 7], generator=g)) == [3, 5, 7]
    w = list(WeightedRandomSampler([0, 0, 1.0, 0], 20, generator=g))
    assert w == [2] * 20
    assert list(BatchSampler(range(7), 3, drop_last=False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, False)) == 3 and len(BatchSampler(range(7), 3, True)) == 2
    with pytest.raises(ValueError):
        BatchSampler(range(3), 0, False)


@pytest.mark.parametrize("n,replicas", [(10, 3), (12, 4), (5, 8), (7, 1)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_partitions(n, replicas, shuffle):
    ds = list(range(n))
    parts = [list(DistributedSampler(ds, replicas, r, shuffle=shuffle, seed=3)) for r in range(replicas)]
    per = -(-n // replicas)
    assert all(len(p) == per for p in parts)
    flat = sum(parts, [])
    assert set(flat) == set(range(n)) and len(flat) == per * replicas
    if n % replicas == 0:
        assert sorted(flat) == list(range(n))  # disjoint
    dropped = [list(DistributedSampler(ds, replicas, r, shuffle=shuffle, drop_last=True)) for r in range(replicas)]
    flat = sum(dropped, [])
    assert len(flat) == len(set(flat)) == (n // replicas) * replicas
    if shuffle:
        s = DistributedSampler(ds, replicas, 0, seed=3)
        e0 = list(s)
        s.set_epoch(1)
        assert list(s) != e0 or n <= replicas
        s.set_epoch(0)
        assert list(s) == e0
    else:
        assert parts[0][:2] == [0, replicas][: len(parts[0][:2])]


def test_distributed_sampler_env_and_validation(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    s = DistributedSampler(list(range(6)), shuffle=False)
    assert list(s) == [1, 3, 5]
    with pytest.raises(ValueError, match="Invalid rank"):
        DistributedSampler(list(range(6)), 2, 2)


# -- collation --------------------------------------------------------------------------------------------
def test_default_collate():
    b = default_collate(
        [
            {"t": flow.tensor([1.0, 2.0]), "n": 1, "f": 0.5, "s": "a", "p": Point(1, np.ones(2))},
            {"t": flow.tensor([3.0, 4.0]), "n": 2, "f": 1.5, "s": "b", "p": Point(2, np.zeros(2))},
        ]
    )
    assert b["t"].tolist() == [[1.0, 2.0], [3.0, 4.0]] and b["t"].dtype is flow.float32
    assert b["n"].dtype is flow.int64 and b["n"].tolist() == [1, 2]
    assert b["f"].dtype is flow.float64 and b["s"] == ["a", "b"]
    assert isinstance(b["p"], Point) and b["p"].x.tolist() == [1, 2] and b["p"].y.shape == (2, 2)
    t = default_collate([(1, np.float32(2.0)), (3, np.float32(4.0))])
    assert isinstance(t, list) and t[1].dtype is flow.float32
    assert default_collate([True, False]).dtype is flow.bool
    bf = default_collate([flow.ones(2, dtype=flow.bfloat16)] * 3)
    assert bf.dtype is flow.bfloat16 and bf.shape == (3, 2)
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([flow.ones(2), flow.ones(3)])
    with pytest.raises(TypeError, match="found object"):
        default_collate([object(), object()])


Sample = namedtuple("Sample", ["image", "label"])


@pytest.mark.parametrize(
    "batch,field,shapes",
    [
        ([np.zeros((3, 4)), np.zeros((3, 5))], "the samples", "(3, 4) and sample 1 has shape (3, 5)"),
        ([(np.zeros(2), 1), (np.zeros(2), 2), (np.zeros(3), 3)], "field [0]", "(2,) and sample 2 has shape (3,)"),
        (
            [{"x": {"y": flow.ones(2)}}, {"x": {"y": flow.ones(4)}}],
            "field ['x']['y']",
            "(2,) and sample 1 has shape (4,)",
        ),
        ([Sample(np.zeros((1, 2)), 0), Sample(np.zeros((2, 2)), 1)], "field .image", "(1, 2) and sample 1 has shape"),
    ],
)
def test_ragged_samples_name_the_field_and_the_shapes(batch, field, shapes):
    with pytest.raises(CollateError) as info:
        default_collate(batch)
    msg = str(info.value)
    assert f"cannot stack {field} of the samples" in msg or (field == "the samples" and "stack the samples" in msg)
    assert f"sample 0 has shape {shapes}" in msg and "collate_fn" in msg, msg
    # flow's own error, caught as ValueError (and as RuntimeError, as PyTorch's "equal size" error is)
    assert isinstance(info.value, (FlowError, ValueError, RuntimeError)) and not isinstance(info.value, TypeError)


def test_collate_errors_of_keys_lengths_and_types():
    with pytest.raises(CollateError, match=r"sample 2 lacks \['y'\] compared with sample 0 \(keys \['x', 'y'\]\)"):
        default_collate([{"x": 1, "y": 2}, {"x": 3, "y": 4}, {"x": 3}])
    with pytest.raises(CollateError, match="sample 0 has 2 items and sample 1 has 3"):
        default_collate([[1, 2], [1, 2, 3]])
    with pytest.raises(
        CollateTypeError,
        match=r"field \[1\] of the samples: sample 0 is a number \(int\) but "
        "sample 2 is NoneType",
    ):
        default_collate([(0, 1), (0, 2), (0, None)])
    with pytest.raises(CollateTypeError, match="sample 0 is a tensor but sample 1 is a NumPy array"):
        default_collate([flow.ones(2), np.ones(2)])
    with pytest.raises(CollateTypeError, match="does not fit in int64"):
        default_collate([1, 2**64])
    with pytest.raises(CollateTypeError, match="dtype flow.float32 and sample 1 has dtype flow.float64"):
        default_collate([flow.ones(2), flow.ones(2, dtype=flow.float64)])
    with pytest.raises(TypeError):  # CollateTypeError is a TypeError
        default_collate([{"a": 1}, [1]])


def test_numbers_are_never_truncated():
    """An int batch with a float in it is float64 (as torch.tensor infers), not int64 with 2.5 -> 2."""
    t = default_collate([1, 2.5, 3])
    assert t.dtype is flow.float64 and t.tolist() == [1.0, 2.5, 3.0]
    assert default_collate([True, 2]).dtype is flow.int64
    assert default_collate([np.int16(1), np.int16(2)]).dtype is flow.int16


@pytest.mark.parametrize("num_workers", [0, 2])
def test_ragged_batch_names_the_dataset_items(num_workers):
    ds = [(np.zeros(3 if i != 6 else 4, np.float32), i) for i in range(8)]
    with pytest.raises(CollateError) as info:
        list(DataLoader(ds, batch_size=4, num_workers=num_workers))
    msg = str(info.value)
    assert "field [0]" in msg and "sample 2 has shape (4,)" in msg, msg
    assert "sample 0 is dataset item 4, sample 2 is dataset item 6" in msg, msg


# -- signals in workers: the main process's handlers are not theirs ------------------------------------
_SIGNAL_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    from flow.utils.data import DataLoader, DataLoaderWorkerError, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 10 ** 6

        def __getitem__(self, i):
            time.sleep(0.01)
            return np.float32(i)

    def handler(signum, frame):
        print(f"handled {signum} in {os.getpid()}", flush=True)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    it = iter(DataLoader(Slow(), batch_size=2, num_workers=2))
    try:
        for n, batch in enumerate(it, 1):
            if n == 3:
                print("ready", os.getpid(), *(w.pid for w in it._workers), flush=True)
            if n == int(sys.argv[1]):
                break
        print("done", n, flush=True)
    except DataLoaderWorkerError as e:
        print("worker error:", e, flush=True)
""")


def _run_signal_script(tmp_path, batches: int, send):
    script = tmp_path / "signals.py"
    script.write_text(_SIGNAL_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(batches)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for line in proc.stdout:
            if line.startswith("ready"):
                pids = [int(x) for x in line.split()[1:]]
                break
        send(proc, pids)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return pids, out, err


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_to_the_process_group_runs_only_the_main_handler(tmp_path):
    """Ctrl-C reaches every process of the group: the workers ignore it and keep serving batches."""
    pids, out, err = _run_signal_script(tmp_path, 200, lambda proc, pids: os.killpg(proc.pid, signal.SIGINT))
    handled = [line for line in out.splitlines() if line.startswith("handled")]
    assert handled == [f"handled {int(signal.SIGINT)} in {pids[0]}"], out + err
    assert "done 200" in out and "Traceback" not in err, out + err


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or sys.platform == "win32", reason="POSIX signals")
def test_sigterm_ends_a_worker_without_running_the_main_handler(tmp_path):
    pids, out, err = _run_signal_script(tmp_path, 10**6, lambda proc, pids: os.kill(pids[1], signal.SIGTERM))
    assert "handled" not in out, out
    assert "worker error:" in out and f"pid {pids[1]} (exit code -{int(signal.SIGTERM)})" in out, out + err


# -- the loader -------------------------------------------------------------------------------------------
def _collect(loader):
    return [(b["x"].numpy().tolist(), b["y"].tolist(), b["name"]) for b in loader]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_order_and_contents(num_workers):
    loader = DataLoader(Squares(), batch_size=5, num_workers=num_workers)
    got = _collect(loader)
    assert len(got) == len(loader) == 5
    assert [y for b in got for y in b[1]] == [i * i for i in range(23)]
    assert got[-1][2] == ["s20", "s21", "s22"]
    dropped = _collect(DataLoader(Squares(), batch_size=5, drop_last=True, num_workers=num_workers))
    assert len(dropped) == 4 and len(DataLoader(Squares(), batch_size=5, drop_last=True)) == 4


def test_zero_and_two_workers_agree_and_seeded_shuffle_reproduces():
    runs = []
    for nw in (0, 2, 2):
        g = flow.Generator().manual_seed(123)
        loader = DataLoader(Squares(), batch_size=4, shuffle=True, generator=g, num_workers=nw)
        runs.append([_collect(loader), _collect(loader)])  # two epochs
    assert runs[0] == runs[1] == runs[2]
    e1, e2 = runs[0]
    assert e1 != e2  # a new order each epoch
    assert sorted(y for b in e1 for y in b[1]) == [i * i for i in range(23)]


def test_spawn_context():
    if "spawn" not in multiprocessing.get_all_start_methods():
        pytest.skip("no spawn")
    loader = DataLoader(Squares(9), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert [y for b in _collect(loader) for y in b[1]] == [i * i for i in range(9)]


def test_no_batching_and_batch_sampler():
    assert [d["y"] for d in DataLoader(Squares(4), batch_size=None)] == [0, 1, 4, 9]
    assert isinstance(next(iter(DataLoader(Squares(4), batch_size=None)))["x"], flow.Tensor)
    bs = BatchSampler(SequentialSampler(range(6)), 4, drop_last=False)
    assert [b["y"].tolist() for b in DataLoader(Squares(6), batch_sampler=bs, num_workers=2)] == [
        [0, 1, 4, 9],
        [16, 25],
    ]
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(Squares(6), batch_sampler=bs, batch_size=3)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(Squares(6), sampler=SequentialSampler(range(6)), shuffle=True)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterable_dataset(num_workers):
    loader = DataLoader(Stream(17), batch_size=4, num_workers=num_workers)
    got = sorted(v for b in loader for v in b.numpy().reshape(-1).tolist())
    assert got == [float(i) for i in range(17)]
    if num_workers == 0:
        assert len(list(loader)) == len(loader) == 5


def test_iterable_dataset_with_persistent_workers_restarts_each_epoch():
    loader = DataLoader(Stream(9), batch_size=2, num_workers=2, persistent_workers=True)
    for _ in range(3):
        assert sorted(v for b in loader for v in b.numpy().reshape(-1).tolist()) == [float(i) for i in range(9)]
    loader._iterator._close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_worker_error_is_reraised_with_traceback(num_workers):
    loader = DataLoader(Failing(), batch_size=4, num_workers=num_workers)
    with pytest.raises(ValueError, match="broken on purpose") as ei:
        list(loader)
    if num_workers:
        msg = str(ei.value)
        assert "Caught ValueError in DataLoader worker process" in msg
        assert "Original Traceback" in msg and "__getitem__" in msg and "test_data.py" in msg


def test_worker_error_that_cannot_be_rebuilt_and_init_fn_error():
    with pytest.raises(DataLoaderWorkerError, match="NoCtorArgsError"):
        list(DataLoader(FailingOddly(), batch_size=2, num_workers=1))
    with pytest.raises(RuntimeError, match="init failed"):
        list(DataLoader(Squares(), batch_size=2, num_workers=2, worker_init_fn=_bad_init))


def test_dead_worker_and_timeout_raise_instead_of_hanging():
    t0 = time.monotonic()
    with pytest.raises(DataLoaderWorkerError, match="exited unexpectedly"):
        list(DataLoader(Dying(), batch_size=2, num_workers=2))
    with pytest.raises(DataLoaderWorkerError, match="timed out"):
        list(DataLoader(Slow(8), batch_size=1, num_workers=1, timeout=0.5))
    assert time.monotonic() - t0 < 30


def test_workers_are_shut_down_when_abandoned():
    loader = DataLoader(Squares(), batch_size=1, num_workers=2)
    it = iter(loader)
    next(it)
    workers = list(it._workers)
    assert all(w.is_alive() for w in workers)
    del it
    gc.collect()
    deadline = time.monotonic() + 10
    while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(w.is_alive() for w in workers)


def test_persistent_workers_worker_info_and_seeds():
    loader = DataLoader(
        WorkerId(12), batch_size=3, num_workers=2, persistent_workers=True, generator=flow.Generator().manual_seed(7)
    )
    e1 = [s for b in loader for s in _rows(b)]
    it = loader._iterator
    e2 = [s for b in loader for s in _rows(b)]
    assert loader._iterator is it and all(w.is_alive() for w in it._workers)
    assert {s["pid"] for s in e1} == {s["pid"] for s in e2} and len({s["pid"] for s in e1}) == 2
    assert sorted(s["i"] for s in e1) == list(range(12))
    assert {s["wid"] for s in e1} == {0, 1}
    # workers are seeded differently from each other ...
    w0 = [s["rand"] for s in e1 if s["wid"] == 0]
    w1 = [s["rand"] for s in e1 if s["wid"] == 1]
    assert set(w0).isdisjoint(w1)
    # ... and reproducibly from the loader's generator
    again = DataLoader(WorkerId(12), batch_size=3, num_workers=2, generator=flow.Generator().manual_seed(7))
    r = [s for b in again for s in _rows(b)]
    assert [s["rand"] for s in r] == [s["rand"] for s in e1]
    assert [s["flow_rand"] for s in r] == [s["flow_rand"] for s in e1]
    # an abandoned epoch does not leak into the next one
    it = iter(loader)
    next(it)
    assert sorted(s["i"] for b in loader for s in _rows(b)) == list(range(12))
    it._close()


def test_worker_init_fn():
    loader = DataLoader(WorkerId(4), batch_size=1, num_workers=2, worker_init_fn=_init_fn)
    rows = [s for b in loader for s in _rows(b)]
    first = {s["wid"]: s["rand"] for s in reversed(rows)}
    for wid, v in first.items():
        np.random.seed(1000 + wid)
        assert v == np.random.random()


def _rows(b):
    n = len(b["i"])
    return [{k: (v[j].item() if isinstance(v, flow.Tensor) else v[j]) for k, v in b.items()} for j in range(n)]


def test_loader_argument_validation():
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(Squares(), num_workers=-1)
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(Squares(), prefetch_factor=2)
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader(Squares(), persistent_workers=True)
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Stream(), shuffle=True)
    assert D.get_worker_info() is None
