"""``flow.multiprocessing``: PyTorch's ``torch.multiprocessing``, Python's :mod:`multiprocessing` plus
tensors in shared memory and ``spawn``.

Everything of :mod:`multiprocessing` is here (``Process``, ``Queue``, ``Pool``, ``get_context``,
``set_start_method``, ``cpu_count``, ...). ``Tensor.share_memory_()`` / ``nn.Module.share_memory()``
move data into shared memory, so that processes started with ``fork`` (Linux's default) see each
other's writes: the Hogwild pattern, where workers update one model's parameters in place::

    model.share_memory()
    procs = [mp.Process(target=train, args=(model,)) for _ in range(4)]

A process started with ``spawn`` or ``forkserver`` gets a pickled copy of the tensors it is passed, not
the shared memory. :func:`spawn` runs ``fn(i, *args)`` in ``nprocs`` processes and raises in the
parent when one of them fails.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import sys
import traceback
from multiprocessing import *  # noqa: F401,F403
from typing import Any, Callable

__all__ = list(multiprocessing.__all__) + [
    "spawn",
    "start_processes",
    "ProcessContext",
    "ProcessRaisedException",
    "ProcessExitedException",
    "get_sharing_strategy",
    "set_sharing_strategy",
    "get_all_sharing_strategies",
]

# PyTorch's strategies name how CPU storages are passed between processes; flow's shared tensors use one
# mechanism (an inherited shared mapping), so the strategy is recorded for API parity only.
_STRATEGIES = {"file_descriptor", "file_system"}
_strategy = ["file_descriptor"]


def get_all_sharing_strategies() -> set[str]:
    """The sharing strategies :func:`set_sharing_strategy` accepts."""
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    """The current sharing strategy."""
    return _strategy[0]


def set_sharing_strategy(new_strategy: str) -> None:
    """Choose a sharing strategy (one of :func:`get_all_sharing_strategies`)."""
    if new_strategy not in _STRATEGIES:
        raise ValueError(f"set_sharing_strategy: unknown strategy {new_strategy!r}; known: {sorted(_STRATEGIES)}")
    _strategy[0] = new_strategy


class ProcessException(Exception):
    """A process started by :func:`spawn` failed."""

    def __init__(self, msg: str, error_index: int, pid: int) -> None:
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.pid = pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A process started by :func:`spawn` raised; the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A process started by :func:`spawn` exited with a nonzero code (or was killed by a signal)."""

    def __init__(
        self, msg: str, error_index: int, error_pid: int, exit_code: int, signal_name: str | None = None
    ) -> None:
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


def _wrap(fn: Callable, i: int, args: tuple, error_queue: Any) -> None:
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass  # the parent is shutting the processes down
    except Exception:
        error_queue.put(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes :func:`start_processes` started; :meth:`join` waits for them."""

    def __init__(self, processes: list, error_queues: list) -> None:
        self.processes = processes
        self.error_queues = error_queues
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self) -> list[int]:
        return [int(p.pid) for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) for the processes; True once all have finished.

        When one fails, the others are terminated and :class:`ProcessRaisedException` (it raised: its
        traceback) or :class:`ProcessExitedException` (it exited with a nonzero code) is raised.
        """
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(list(self.sentinels), timeout=timeout)
        failed = None
        for s in ready:
            i = self.sentinels.pop(s)
            p = self.processes[i]
            p.join()
            if p.exitcode != 0 and failed is None:
                failed = i
        if failed is None:
            return not self.sentinels
        for p in self.processes:
            if p.is_alive():
                p.terminate()
            p.join()
        self.sentinels.clear()
        p = self.processes[failed]
        q = self.error_queues[failed]
        if not q.empty():
            msg = f"\n\n-- Process {failed} terminated with the following error:\n" + q.get()
            raise ProcessRaisedException(msg, failed, p.pid)
        code = p.exitcode
        if code < 0:
            name = signal.Signals(-code).name
            raise ProcessExitedException(f"process {failed} terminated with signal {name}", failed, p.pid, code, name)
        raise ProcessExitedException(f"process {failed} terminated with exit code {code}", failed, p.pid, code)


def start_processes(
    fn: Callable,
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """Run ``fn(i, *args)`` for ``i`` in ``range(nprocs)``, each in a process started with ``start_method``.

    With ``join`` (the default) waits for them and returns None; otherwise returns the
    :class:`ProcessContext`.
    """
    if not callable(fn):
        raise TypeError(f"start_processes: fn must be callable, got {type(fn).__name__}")
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"start_processes: nprocs must be a positive int, got {nprocs!r}")
    if not isinstance(args, tuple):
        raise TypeError(f"start_processes: args must be a tuple, got {type(args).__name__}")
    ctx = multiprocessing.get_context(start_method)
    processes, queues = [], []
    for i in range(nprocs):
        q = ctx.SimpleQueue()
        p = ctx.Process(target=_wrap, args=(fn, i, args, q), daemon=daemon)
        p.start()
        processes.append(p)
        queues.append(q)
    context = ProcessContext(processes, queues)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(
    fn: Callable,
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """PyTorch's ``torch.multiprocessing.spawn``: :func:`start_processes` (``spawn`` start method by default)."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
