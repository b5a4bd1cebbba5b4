"""DataLoader worker processes: the loop each worker runs, and what travels between processes.

A worker receives tasks ``(epoch, task_idx, indices)`` on its own index queue and answers
``(epoch, task_idx, payload)`` down its own result pipe. The payload is pickled by the worker
itself (so a sample that cannot be pickled becomes an error the main process sees instead of a
silently lost batch); flow tensors travel as NumPy arrays plus their dtype name. A failure is
sent as an :class:`ExceptionWrapper` carrying the worker's traceback text, which the main
process re-raises.

Signals: SIGINT and SIGTERM are the main process's business. A worker ignores SIGINT (Ctrl-C
reaches the whole process group; the main process decides what it means and shuts the workers
down) and ends on SIGTERM (what ``Process.terminate`` sends), whatever handlers the main process
had installed when it forked them.
"""

from __future__ import annotations

import os
import pickle
import queue
import random
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from flow.errors import FlowError

#: how often (seconds) a blocked worker / main process wakes up to check that the other side lives
POLL_INTERVAL = 0.5


@dataclass(frozen=True)
class WorkerInfo:
    """What :func:`get_worker_info` returns inside a worker process."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker: its id, the number of workers, its seed and its dataset copy; else ``None``."""
    return _worker_info


class DataLoaderWorkerError(FlowError):
    """A DataLoader worker failed (died, or raised an exception that cannot be rebuilt in the main process)."""


class ExceptionWrapper:
    """An exception raised in a worker, with the worker's traceback as text."""

    def __init__(self, exc_info=None, where: str = "in background") -> None:
        if exc_info is None:
            exc_info = sys.exc_info()
        exc_type, exc, tb = exc_info
        self.type_name = exc_type.__name__
        try:
            pickle.loads(pickle.dumps(exc_type))
            self.exc_type = exc_type
        except Exception:
            self.exc_type = None
        self.msg = "".join(traceback.format_exception(exc_type, exc, tb))
        self.where = where

    def reraise(self):
        """Raise the worker's exception type (or RuntimeError) with the worker's traceback in the message."""
        msg = f"Caught {self.type_name} {self.where}.\nOriginal Traceback (most recent call last):\n{self.msg}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        exc = None
        if self.exc_type is not None:
            try:
                exc = self.exc_type(msg)
            except Exception:
                exc = None
        if exc is None:
            exc = DataLoaderWorkerError(msg)
        raise exc


class _KeyErrorMessage(str):
    """KeyError quotes its message; this keeps the traceback readable."""

    def __repr__(self) -> str:
        return self


@dataclass
class IterableEnd:
    """Sent by a worker whose IterableDataset iterator is exhausted."""

    worker_id: int


class _TensorPayload:
    """A flow tensor in transit: its NumPy array, dtype name and requires_grad flag."""

    __slots__ = ("array", "dtype", "requires_grad")

    def __init__(self, array: np.ndarray, dtype: str, requires_grad: bool) -> None:
        self.array, self.dtype, self.requires_grad = array, dtype, requires_grad

    def __reduce__(self):
        return (_TensorPayload, (self.array, self.dtype, self.requires_grad))


def to_payload(obj):
    """Replace the flow tensors in ``obj`` (nested dicts / lists / tuples) by NumPy payloads."""
    from flow._tensor import Tensor

    if isinstance(obj, Tensor):
        return _TensorPayload(np.asarray(obj.numpy_host()), obj.dtype.name, bool(obj.requires_grad))
    if isinstance(obj, dict):
        try:
            return type(obj)((k, to_payload(v)) for k, v in obj.items())
        except TypeError:
            return {k: to_payload(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_payload(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_payload(v) for v in obj)
    return obj


def from_payload(obj):
    """Inverse of :func:`to_payload`: NumPy payloads become CPU flow tensors (no copy)."""
    if isinstance(obj, _TensorPayload):
        from flow import _dtype as D
        from flow._device import CPU
        from flow._tensor import Tensor

        t = Tensor._make(obj.array, D.as_dtype(obj.dtype), CPU)
        t.requires_grad = obj.requires_grad
        return t
    if isinstance(obj, dict):
        try:
            return type(obj)((k, from_payload(v)) for k, v in obj.items())
        except TypeError:
            return {k: from_payload(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(from_payload(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(from_payload(v) for v in obj)
    return obj


_MAIN_SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)


@contextmanager
def main_signals_blocked() -> Iterator[set | None]:
    """Block SIGINT and SIGTERM in this thread (where the platform can); yields the mask to restore after."""
    if not hasattr(signal, "pthread_sigmask"):
        yield None
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _MAIN_SIGNALS)
    try:
        yield old
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def reset_signals(mask: set | None) -> None:
    """In a new worker: SIGINT ignored, SIGTERM back to its default, then the signal mask of the parent restored."""
    if threading.current_thread() is threading.main_thread():
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError, AttributeError):  # no such signals here (Windows has no SIGTERM handler)
            pass
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _with_dataset_indices(exc: BaseException, indices):
    """A CollateError that also names the dataset indices of the samples it names (None for other errors)."""
    from flow.utils.data.collate import CollateError, CollateTypeError

    if type(exc) not in (CollateError, CollateTypeError) or not exc.samples:  # a subclass may take other arguments
        return None
    try:
        items = [indices[k] for k in exc.samples]
    except (IndexError, TypeError, KeyError):
        return None
    named = ", ".join(f"sample {k} is dataset item {item!r}" for k, item in zip(exc.samples, items))
    return type(exc)(f"{exc} (in this batch {named})", exc.field, exc.samples)


def seed_worker(seed: int) -> None:
    """Seed Python's, NumPy's and flow's global generators in a worker."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    from flow._random import manual_seed

    manual_seed(seed)


def _fetch(dataset, iterable: bool, it, indices, auto_collation: bool, collate_fn, drop_last: bool, worker_id):
    if iterable:
        if not auto_collation:
            return collate_fn(next(it))
        batch = []
        for _ in range(indices):
            try:
                batch.append(next(it))
            except StopIteration:
                break
        if not batch or (drop_last and len(batch) < indices):
            raise StopIteration
        return collate_fn(batch)
    if auto_collation:
        getitems = getattr(dataset, "__getitems__", None)
        data = getitems(indices) if callable(getitems) else [dataset[i] for i in indices]
        try:
            return collate_fn(data)
        except Exception as e:
            named = _with_dataset_indices(e, indices)
            if named is None:
                raise
            raise named from None
    return collate_fn(dataset[indices])


def worker_loop(
    dataset,
    iterable: bool,
    index_queue,
    result_pipe,
    auto_collation: bool,
    collate_fn,
    drop_last: bool,
    base_seed: int,
    init_fn,
    worker_id: int,
    num_workers: int,
    parent_pid: int,
    signal_mask: set | None = None,
) -> None:
    """The body of a worker process (see the module docstring for the protocol and the signals)."""
    global _worker_info
    try:
        reset_signals(signal_mask)
        seed = base_seed + worker_id
        seed_worker(seed)
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
        init_error = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
        except Exception:
            init_error = ExceptionWrapper(where=f"in DataLoader worker process {worker_id} (worker_init_fn)")
        it, it_epoch = None, None
        while True:
            try:
                task = index_queue.get(timeout=POLL_INTERVAL)
            except queue.Empty:
                if os.getppid() != parent_pid:  # the main process died: leave
                    break
                continue
            if task is None:
                break
            epoch, idx, indices = task
            if init_error is not None:
                data = init_error
            else:
                try:
                    if iterable and it_epoch != epoch:
                        it, it_epoch = iter(dataset), epoch
                    data = _fetch(dataset, iterable, it, indices, auto_collation, collate_fn, drop_last, worker_id)
                except StopIteration:
                    data = IterableEnd(worker_id)
                except Exception:
                    data = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
            try:
                blob = pickle.dumps(to_payload(data), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                blob = pickle.dumps(
                    ExceptionWrapper(
                        where=f"in DataLoader worker process {worker_id} while sending a batch to the main process"
                    )
                )
            result_pipe.send((epoch, idx, blob))
    except KeyboardInterrupt:
        pass
    except (BrokenPipeError, EOFError, OSError):
        pass  # the main process has gone, or closed the pipe on shutdown
    finally:
        result_pipe.close()
