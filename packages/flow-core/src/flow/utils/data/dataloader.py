"""``DataLoader``: batches from a dataset, in the main process or in worker processes.

With ``num_workers > 0`` the loader starts worker processes (``fork`` where available, else
``spawn``; pick with ``multiprocessing_context``), keeps ``prefetch_factor`` batches per worker
in flight and yields batches in sampler order. A worker's exception is re-raised in the main
process with the worker's traceback; a worker that dies, or a batch that takes longer than
``timeout`` seconds, raises instead of hanging; workers are shut down when the iterator is
exhausted (unless ``persistent_workers``), garbage-collected, or at interpreter exit.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import time
import weakref
from multiprocessing.connection import wait as _wait_readable

from flow._random import Generator, default_generator
from flow.utils.data import _worker
from flow.utils.data._worker import DataLoaderWorkerError
from flow.utils.data.collate import CollateError, CollateTypeError, default_collate, default_convert
from flow.utils.data.dataset import IterableDataset
from flow.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = [
    "DataLoader",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "DataLoaderWorkerError",
    "CollateError",
    "CollateTypeError",
]

get_worker_info = _worker.get_worker_info

#: seconds to wait for a worker to exit on shutdown before terminating it
JOIN_TIMEOUT = 5.0


class _InfiniteConstantSampler(Sampler):
    def __iter__(self):
        while True:
            yield None


# -- the loader -----------------------------------------------------------------------------------
class DataLoader:
    """Iterate over ``dataset`` in batches (``torch.utils.data.DataLoader``'s arguments).

    ``shuffle=True`` uses a :class:`RandomSampler` driven by ``generator`` (a seeded
    :class:`flow.Generator` gives a reproducible order; without one, flow's default generator
    seeds each epoch). Worker ``i`` seeds Python's, NumPy's and flow's generators with
    ``base_seed + i``, ``base_seed`` being drawn from ``generator`` at each epoch.
    """

    def __init__(
        self,
        dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator: Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
    ) -> None:
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing; "
                "let num_workers > 0 to enable multiprocessing"
            )
        if prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor < 1:
            raise ValueError("prefetch_factor must be at least 1")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.persistent_workers = persistent_workers
        self._iterable = isinstance(dataset, IterableDataset)
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
            )
        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle={shuffle}"
                )
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected no sampler / batch_sampler")
            sampler = _InfiniteConstantSampler()
        else:
            shuffle = bool(shuffle)
            if sampler is not None and shuffle:
                raise ValueError("sampler option is mutually exclusive with shuffle")
            if sampler is None:
                sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        elif batch_size is None:
            if drop_last:
                raise ValueError(
                    "batch_size=None option disables auto-batching and is mutually exclusive with drop_last"
                )
        elif not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self._iterator = None

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None or (self._iterable and self.batch_size is not None)

    @property
    def _index_sampler(self):
        if self._iterable:
            return self.sampler
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def _task(self, indices):
        """What a worker is asked for: a list of indices, one index, or a batch size (iterable datasets)."""
        if self._iterable:
            return self.batch_size if self.batch_size is not None else None
        return indices

    def _shared_seed(self) -> int:
        gen = self.generator if self.generator is not None else default_generator
        return int(gen._rng.integers(0, 2**62))

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if self.persistent_workers:
            if self._iterator is None or self._iterator._closed:
                self._iterator = _MultiProcessIter(self)
            else:
                self._iterator._reset()
            return self._iterator
        return _MultiProcessIter(self)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)


class _SingleProcessIter:
    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._auto = loader._auto_collation
        self._base_seed = loader._shared_seed()  # drawn as with workers, so shuffles match either way
        if loader._iterable:
            self._data_iter = iter(loader.dataset)
        else:
            self._sampler_iter = iter(loader._index_sampler)

    def __iter__(self):
        return self

    def __next__(self):
        ld = self._loader
        if ld._iterable:
            return _worker._fetch(
                ld.dataset, True, self._data_iter, ld.batch_size, self._auto, ld.collate_fn, ld.drop_last, 0
            )
        indices = next(self._sampler_iter)
        return _worker._fetch(ld.dataset, False, None, indices, self._auto, ld.collate_fn, ld.drop_last, 0)

    def __len__(self) -> int:
        return len(self._loader)


def _mp_context(ctx):
    if ctx is None:
        methods = multiprocessing.get_all_start_methods()
        return multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    if isinstance(ctx, str):
        return multiprocessing.get_context(ctx)
    return ctx


def _shutdown(workers, index_queues, result_readers) -> None:
    """Stop the workers: ask politely, wait ``JOIN_TIMEOUT``, then terminate. Never blocks for long."""
    for q in index_queues:
        try:
            q.put(None)
        except Exception:
            pass
    deadline = time.monotonic() + JOIN_TIMEOUT
    for w in workers:
        w.join(timeout=max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.is_alive():
            w.terminate()
            w.join(timeout=1.0)
        if w.is_alive() and hasattr(w, "kill"):
            w.kill()
            w.join(timeout=1.0)
    for q in index_queues:
        try:
            q.cancel_join_thread()
            q.close()
        except Exception:
            pass
    for r in result_readers:
        try:
            r.close()
        except Exception:
            pass


class _MultiProcessIter:
    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._n = loader.num_workers
        self._prefetch = loader.prefetch_factor * self._n
        self._closed = False
        ctx = _mp_context(loader.multiprocessing_context)
        # Each worker sends its batches down a pipe of its own, whose only writer it is: the main process
        # closes its copy as soon as the worker has started (so workers started later do not inherit
        # it). A worker that dies, even halfway through sending a batch, then ends its pipe (EOF) and the
        # main process notices at once, instead of waiting forever for the rest of a message that a
        # shared queue (written to by the other workers too) would never deliver.
        self._readers: list = []
        self._index_queues, self._workers = [], []
        base_seed = loader._shared_seed()
        # SIGINT / SIGTERM stay blocked while the workers start, so that none reaches a worker before it has
        # dropped the handlers it inherited (a training loop's "save a checkpoint" handler, say)
        with _worker.main_signals_blocked() as mask:
            for i in range(self._n):
                iq = ctx.Queue()
                iq.cancel_join_thread()
                reader, writer = ctx.Pipe(duplex=False)
                w = ctx.Process(
                    target=_worker.worker_loop,
                    args=(
                        loader.dataset,
                        loader._iterable,
                        iq,
                        writer,
                        loader._auto_collation,
                        loader.collate_fn,
                        loader.drop_last,
                        base_seed,
                        loader.worker_init_fn,
                        i,
                        self._n,
                        os.getpid(),
                        mask,
                    ),
                    daemon=True,
                )
                w.start()
                writer.close()
                self._readers.append(reader)
                self._index_queues.append(iq)
                self._workers.append(w)
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._index_queues, self._readers)
        self._open = dict(enumerate(self._readers))  # worker -> its pipe, while it has not ended
        self._epoch = 0
        self._reset(first=True)

    def _reset(self, first: bool = False) -> None:
        self._epoch += 1
        self._sampler_iter = iter(self._loader._index_sampler)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._tasks: dict[int, tuple] = {}  # idx -> (worker,) while pending, (worker, data) when arrived early
        self._active = [True] * self._n
        self._cycle = itertools.cycle(range(self._n))
        for _ in range(self._prefetch):
            self._try_put_index()

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def _try_put_index(self) -> None:
        if self._send_idx - self._rcvd_idx >= self._prefetch or not any(self._active):
            return
        try:
            indices = next(self._sampler_iter)
        except StopIteration:
            return
        for _ in range(self._n):
            w = next(self._cycle)
            if self._active[w]:
                break
        self._index_queues[w].put((self._epoch, self._send_idx, self._loader._task(indices)))
        self._tasks[self._send_idx] = (w,)
        self._send_idx += 1

    def _get(self):
        timeout = self._loader.timeout
        deadline = time.monotonic() + timeout if timeout > 0 else None
        while True:
            wait = _worker.POLL_INTERVAL
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            for reader in _wait_readable(list(self._open.values()), timeout=wait):
                try:
                    return reader.recv()
                except (EOFError, OSError):  # its worker is gone (the pipe ended, maybe mid-message)
                    self._open = {i: r for i, r in self._open.items() if r is not reader}
            if deadline is not None and time.monotonic() >= deadline:
                raise DataLoaderWorkerError(f"DataLoader timed out after {timeout} seconds waiting for a batch")
            ended = [w for i, w in enumerate(self._workers) if i not in self._open]
            dead = [w for w in self._workers if not w.is_alive()] or ended
            if dead:
                for w in dead:
                    w.join(timeout=1.0)  # for its exit code
                self._close()
                desc = ", ".join(f"pid {w.pid} (exit code {w.exitcode})" for w in dead)
                raise DataLoaderWorkerError(f"DataLoader worker(s) exited unexpectedly: {desc}")

    def __next__(self):
        if self._closed:
            raise StopIteration
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._tasks[self._rcvd_idx]
                if len(info) == 2 or self._active[info[0]]:
                    break
                del self._tasks[self._rcvd_idx]  # its worker's iterable is exhausted: no batch will come
                self._rcvd_idx += 1
            else:
                if not self._loader.persistent_workers:
                    self._close()
                raise StopIteration
            info = self._tasks[self._rcvd_idx]
            if len(info) == 2:
                del self._tasks[self._rcvd_idx]
                self._rcvd_idx += 1
                self._try_put_index()
                return self._process(info[1])
            epoch, idx, blob = self._get()
            if epoch != self._epoch or idx not in self._tasks:
                continue  # a result of an abandoned epoch (persistent workers)
            data = pickle.loads(blob)
            if isinstance(data, _worker.IterableEnd):
                self._active[data.worker_id] = False  # its pending tasks are skipped above
                self._try_put_index()
                continue
            if idx != self._rcvd_idx:
                self._tasks[idx] = (self._tasks[idx][0], data)
                continue
            del self._tasks[idx]
            self._rcvd_idx += 1
            self._try_put_index()
            return self._process(data)

    def _process(self, data):
        if isinstance(data, _worker.ExceptionWrapper):
            data.reraise()
        return _worker.from_payload(data)

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()

    def __del__(self) -> None:
        try:
            self._close()
        except Exception:
            pass
