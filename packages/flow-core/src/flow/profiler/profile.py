"""``flow.profiler.profile``: the context manager, its schedule, and the trace handler."""

from __future__ import annotations

import enum
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterable

from flow import _dispatch
from flow.graph import executor as _executor
from flow.profiler import _record
from flow.profiler._events import EventList, FunctionEvent, write_chrome_trace

__all__ = ["profile", "ProfilerActivity", "ProfilerAction", "schedule", "tensorboard_trace_handler"]


class ProfilerActivity(enum.Enum):
    """What a profile records, as ``torch.profiler.ProfilerActivity``. flow times ops on the host;
    ``CUDA`` is accepted but its kernels are timed as host calls (no device timeline)."""

    CPU = "CPU"
    CUDA = "CUDA"


class ProfilerAction(enum.Enum):
    """What a schedule asks of a step: nothing, warm up, record, or record and then hand the trace over."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0) -> Callable:
    """A step schedule as ``torch.profiler.schedule``: after ``skip_first`` steps, cycles of ``wait``
    idle, ``warmup`` and ``active`` recorded steps, ``repeat`` times (0: forever). The last active
    step of a cycle is ``RECORD_AND_SAVE``: ``on_trace_ready`` runs when it ends."""
    for name, v, low in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1)):
        if not isinstance(v, int) or v < low:
            raise ValueError(f"schedule: {name} must be an integer >= {low}, got {v!r}")
    for name, v in (("repeat", repeat), ("skip_first", skip_first)):
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"schedule: {name} must be an integer >= 0, got {v!r}")
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        k = step % cycle
        if k < wait:
            return ProfilerAction.NONE
        if k < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if k < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None, use_gzip: bool = False) -> Callable:
    """An ``on_trace_ready`` that writes ``{worker_name}.{ms}.pt.trace.json`` into ``dir_name``
    (TensorBoard's profiler plugin and Perfetto read it)."""
    if not isinstance(dir_name, (str, os.PathLike)):
        raise TypeError(f"tensorboard_trace_handler: dir_name must be a path, got {type(dir_name).__name__}")

    def handler(prof: profile) -> None:
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(os.fspath(dir_name), f"{worker}.{int(time.time() * 1000)}.pt.trace.json")
        if use_gzip:
            import gzip
            import json

            from flow.profiler._events import chrome_trace

            with gzip.open(path + ".gz", "wt", encoding="utf-8") as f:
                json.dump(chrome_trace(prof.events()), f)
        else:
            prof.export_chrome_trace(path)

    return handler


def _start(rec: _record._Recorder) -> None:
    if _record._CURRENT[0] is not None:
        raise RuntimeError("profile: another profile is already recording (profiles do not nest)")
    _record._CURRENT[0] = rec
    _executor.PROFILE_HOOK = _record._run_profiled_plan
    _dispatch.push_interceptor(_record._interceptor)


def _stop(rec: _record._Recorder) -> None:
    _dispatch.pop_interceptor(_record._interceptor)
    _executor.PROFILE_HOOK = None
    rec.finish()
    _record._CURRENT[0] = None


class profile:
    """Record the ops run in a ``with`` block, as ``torch.profiler.profile``.

    Records, per op call: its CPU time (total, and self: minus the ranges inside it), its input
    shapes (``record_shapes``), the bytes of the new arrays it returned (``profile_memory``; views
    and in-place results count 0) and the user's call site (``with_stack``). ``record_function``
    blocks, composite ops and gradients (named as their autograd node, ``mulBackward``) are ranges
    holding the ops they run; a compiled graph step is a range holding one row per plan node.
    Only the thread that entered the profile is recorded.

    >>> with flow.profiler.profile(record_shapes=True) as prof:
    ...     y = model(x)
    >>> print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))

    With ``schedule``, call ``prof.step()`` after each step; ``on_trace_ready(prof)`` runs at the
    end of each active cycle, and ``prof.events()`` then holds that cycle's events.
    """

    def __init__(
        self,
        activities: Iterable[ProfilerActivity] | None = None,
        *,
        schedule: Callable[[int], ProfilerAction] | None = None,
        on_trace_ready: Callable[[profile], None] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
    ) -> None:
        acts = [ProfilerActivity.CPU] if activities is None else list(activities)
        for a in acts:
            if not isinstance(a, ProfilerActivity):
                raise TypeError(f"profile: activities must be ProfilerActivity values, got {a!r}")
        if not acts:
            raise ValueError("profile: activities is empty; pass [ProfilerActivity.CPU]")
        if ProfilerActivity.CUDA in acts:
            warnings.warn(
                "profile: ProfilerActivity.CUDA: flow times device kernels as host calls; "
                "no device timeline is recorded",
                stacklevel=2,
            )
        if schedule is not None and not callable(schedule):
            raise TypeError(f"profile: schedule must be callable (see flow.profiler.schedule), got {schedule!r}")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"profile: on_trace_ready must be callable, got {on_trace_ready!r}")
        if with_flops or with_modules:
            raise NotImplementedError("profile: with_flops and with_modules are not supported by flow's profiler")
        self.activities = set(acts)
        self.schedule = schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.step_num = 0
        self._rec: _record._Recorder | None = None  # recording now
        self._done: list[FunctionEvent] = []  # the last finished cycle's events
        self._step_ev = None
        self._action = ProfilerAction.NONE
        self._entered = False

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self._entered:
            raise RuntimeError("profile: already started")
        self._entered = True
        self._action = self.schedule(self.step_num) if self.schedule is not None else ProfilerAction.RECORD
        self._enter_action(self._action)

    def stop(self) -> None:
        if not self._entered:
            return
        self._entered = False
        if self._rec is not None:  # as PyTorch: a cycle cut short by the end of the block is handed over too
            ev = self._step_ev
            if ev is not None:
                self._rec.close(ev)
                if not ev.cpu_children and self._rec.events[-1] is ev:  # opened by the last step(); ran nothing
                    self._rec.events.pop()
            self._end_cycle(True)

    def step(self) -> None:
        """Mark the end of a step: the schedule decides whether the next one is recorded."""
        if not self._entered:
            raise RuntimeError("profile.step(): the profile is not running (call it inside the with block)")
        prev = self._action
        self.step_num += 1
        self._action = self.schedule(self.step_num) if self.schedule is not None else ProfilerAction.RECORD
        if self._step_ev is not None:
            self._rec.close(self._step_ev)
            self._step_ev = None
        if prev is ProfilerAction.RECORD_AND_SAVE or (self._rec is not None and not _records(self._action)):
            self._end_cycle(prev is ProfilerAction.RECORD_AND_SAVE)
        self._enter_action(self._action)

    def _enter_action(self, action: ProfilerAction) -> None:
        if not _records(action):
            return
        if self._rec is None:
            self._rec = _record._Recorder(self.record_shapes, self.profile_memory, self.with_stack)
            _start(self._rec)
        if self.schedule is not None:
            self._step_ev = self._rec.open(f"ProfilerStep#{self.step_num}", "user")

    def _end_cycle(self, save: bool) -> None:
        rec = self._rec
        self._rec = None
        self._step_ev = None
        _stop(rec)
        self._done = rec.events
        if save and self.on_trace_ready is not None:
            self.on_trace_ready(self)

    # -- results ------------------------------------------------------------------------------
    def events(self) -> EventList:
        """Every recorded range of the last finished cycle, in the order they started."""
        if self._rec is not None:
            raise RuntimeError("profile: results are ready once the profile (or its active cycle) has ended")
        return EventList(self._done, self.profile_memory, self.record_shapes)

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0) -> EventList:
        """Events summed by name (and input shapes): call ``.table(sort_by=..., row_limit=...)`` on it."""
        return self.events().key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write the events as Chrome Trace Event Format JSON (chrome://tracing, Perfetto)."""
        write_chrome_trace(self.events(), path)


def _records(action: ProfilerAction) -> bool:
    # warm-up steps record nothing: PyTorch warms its tracer up there, flow's has nothing to warm
    return action is ProfilerAction.RECORD or action is ProfilerAction.RECORD_AND_SAVE
