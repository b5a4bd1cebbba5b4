"""What a profile recorded: :class:`FunctionEvent` (one range), :class:`EventList` and the averages table.

Times are measured with :func:`time.perf_counter_ns` and reported in microseconds, as PyTorch's
profiler reports them (``cpu_time_total``, ``self_cpu_time_total``). An event's *total* time is its
range from start to end; its *self* time is that minus the total times of the ranges it contains
(its children: the ops of a ``record_function`` block, the primitive ops of a composite op, the
ops of a gradient). Memory works the same way: see :mod:`flow.profiler` for what is counted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

__all__ = ["FunctionEvent", "FunctionEventAvg", "EventList", "Interval"]

_SORT_KEYS = (
    "cpu_time_total",
    "self_cpu_time_total",
    "cpu_time",
    "self_cpu_time",
    "count",
    "cpu_memory_usage",
    "self_cpu_memory_usage",
)


class Interval:
    """Start and end of a range, in microseconds since the profile started (``time_range``)."""

    __slots__ = ("start", "end")

    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.end = end

    def elapsed_us(self) -> float:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"Interval(start={self.start:.3f}, end={self.end:.3f})"


class FunctionEvent:
    """One recorded range: an op call, a ``record_function`` block, a gradient or a graph plan node.

    ``kind`` is ``"op"`` (a registered op), ``"composite"`` (a composite op containing others),
    ``"user"`` (``record_function``), ``"backward"`` (an autograd node's gradient) or ``"graph"`` (a
    node of a compiled plan, or the whole compiled step).
    """

    __slots__ = (
        "id",
        "name",
        "kind",
        "thread",
        "start_ns",
        "end_ns",
        "input_shapes",
        "own_memory",
        "stack",
        "cpu_parent",
        "cpu_children",
        "args",
    )

    def __init__(self, id: int, name: str, kind: str, thread: int, start_ns: int, parent: FunctionEvent | None) -> None:
        self.id = id
        self.name = name
        self.kind = kind
        self.thread = thread
        self.start_ns = start_ns
        self.end_ns = start_ns
        self.input_shapes: list = []
        self.own_memory = 0  # bytes of new output arrays (ops only; ranges count their children's)
        self.stack: list[str] = []
        self.cpu_parent = parent
        self.cpu_children: list[FunctionEvent] = []
        self.args: dict = {}

    key = property(lambda self: self.name)
    count = property(lambda self: 1)

    @property
    def time_range(self) -> Interval:
        return Interval(self.start_ns / 1000.0, self.end_ns / 1000.0)

    @property
    def cpu_time_total(self) -> float:
        """Microseconds from the start of the range to its end."""
        return (self.end_ns - self.start_ns) / 1000.0

    @property
    def self_cpu_time_total(self) -> float:
        """Microseconds of the range not spent in its children."""
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    @property
    def cpu_memory_usage(self) -> int:
        """Bytes of the output arrays made in this range (its own, plus its children's)."""
        return self.own_memory + sum(c.cpu_memory_usage for c in self.cpu_children)

    @property
    def self_cpu_memory_usage(self) -> int:
        return self.own_memory

    def __repr__(self) -> str:
        return (
            f"<FunctionEvent id={self.id} name={self.name} kind={self.kind} "
            f"cpu_time_total={self.cpu_time_total:.3f}us input_shapes={self.input_shapes}>"
        )


class FunctionEventAvg:
    """Events of one key summed together (a row of :meth:`EventList.key_averages`)."""

    def __init__(self, key: str, input_shapes: str | None) -> None:
        self.key = key
        self.input_shapes = input_shapes
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = 0
        self.self_cpu_memory_usage = 0
        self.stack: list[str] = []

    def add(self, ev: FunctionEvent) -> None:
        self.count += 1
        self.cpu_time_total += ev.cpu_time_total
        self.self_cpu_time_total += ev.self_cpu_time_total
        self.cpu_memory_usage += ev.cpu_memory_usage
        self.self_cpu_memory_usage += ev.self_cpu_memory_usage
        if not self.stack and ev.stack:
            self.stack = ev.stack

    @property
    def cpu_time(self) -> float:
        """Average total microseconds per call."""
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def self_cpu_time(self) -> float:
        return self.self_cpu_time_total / self.count if self.count else 0.0

    def __repr__(self) -> str:
        return (
            f"<FunctionEventAvg key={self.key} count={self.count} cpu_time_total={self.cpu_time_total:.3f}us "
            f"self_cpu_time_total={self.self_cpu_time_total:.3f}us input_shapes={self.input_shapes}>"
        )


def _us(t: float) -> str:
    # as PyTorch's table: the unit follows the size
    if t >= 1e6:
        return f"{t / 1e6:.3f}s"
    if t >= 1e3:
        return f"{t / 1e3:.3f}ms"
    return f"{t:.3f}us"


def _bytes(b: int) -> str:
    for unit, size in (("Gb", 1 << 30), ("Mb", 1 << 20), ("Kb", 1 << 10)):
        if abs(b) >= size:
            return f"{b / size:.2f} {unit}"
    return f"{b} b"


class EventList(list):
    """A list of :class:`FunctionEvent` (from ``prof.events()``) or :class:`FunctionEventAvg` (averages)."""

    def __init__(self, events: Iterable = (), with_memory: bool = False, with_shapes: bool = False) -> None:
        super().__init__(events)
        self._with_memory = with_memory
        self._with_shapes = with_shapes

    @property
    def self_cpu_time_total(self) -> float:
        """Microseconds of self time of all events: the time the profile spent in recorded ranges."""
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0) -> EventList:
        """Sum events by name (and input shapes, and the first ``group_by_stack_n`` stack frames)."""
        if not isinstance(group_by_stack_n, int) or group_by_stack_n < 0:
            raise ValueError(f"key_averages: group_by_stack_n must be an integer >= 0, got {group_by_stack_n!r}")
        rows: dict = {}
        for ev in self:
            if not isinstance(ev, FunctionEvent):
                raise TypeError("key_averages: this list holds averages already; call it on prof.events()")
            shapes = str(ev.input_shapes) if group_by_input_shape else None
            key = (ev.name, shapes, tuple(ev.stack[:group_by_stack_n]))
            row = rows.get(key)
            if row is None:
                row = rows[key] = FunctionEventAvg(ev.name, shapes)
            row.add(ev)
        return EventList(rows.values(), self._with_memory, group_by_input_shape)

    def table(
        self,
        sort_by: str | None = None,
        row_limit: int = 100,
        max_name_column_width: int = 55,
        header: str | None = None,
        top_level_events_only: bool = False,
    ) -> str:
        """The events as a table like PyTorch's: one row each, sorted by ``sort_by`` (descending)."""
        rows = list(self)
        if top_level_events_only:
            rows = [e for e in rows if getattr(e, "cpu_parent", None) is None]
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise ValueError(f"table: sort_by must be one of {', '.join(_SORT_KEYS)}, got {sort_by!r}")
            rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        total_self = self.self_cpu_time_total
        cols = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
        if self._with_memory:
            cols += ["CPU Mem", "Self CPU Mem"]
        cols.append("# of Calls")
        shapes = self._with_shapes and any(getattr(e, "input_shapes", None) for e in rows)
        if shapes:
            cols.append("Input Shapes")
        stacks = any(getattr(e, "stack", None) for e in rows)
        if stacks:
            cols.append("Source Location")

        def pct(t: float) -> str:
            return f"{100.0 * t / total_self:.2f}%" if total_self > 0 else "0.00%"

        body = []
        for e in rows:
            name = e.key
            if len(name) > max_name_column_width:
                name = name[: max_name_column_width - 3] + "..."
            r = [name, pct(e.self_cpu_time_total), _us(e.self_cpu_time_total), pct(e.cpu_time_total)]
            r += [_us(e.cpu_time_total), _us(e.cpu_time_total / max(e.count, 1))]
            if self._with_memory:
                r += [_bytes(e.cpu_memory_usage), _bytes(e.self_cpu_memory_usage)]
            r.append(str(e.count))
            if shapes:
                r.append(str(e.input_shapes if e.input_shapes is not None else ""))
            if stacks:
                r.append(e.stack[0] if e.stack else "")
            body.append(r)
        widths = [max([len(c)] + [len(r[i]) for r in body]) for i, c in enumerate(cols)]
        line = "  ".join("-" * w for w in widths)

        def fmt(r: list) -> str:
            return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))

        out = [header] if header else []
        out += [line, fmt(cols), line] + [fmt(r) for r in body] + [line]
        out.append(f"Self CPU time total: {_us(total_self)}")
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.table()

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write the events as Chrome Trace Event Format JSON (open in chrome://tracing or Perfetto)."""
        write_chrome_trace(self, path)


_CATEGORY = {
    "op": "cpu_op",
    "composite": "cpu_op",
    "user": "user_annotation",
    "backward": "cpu_op",
    "graph": "graph_node",
}


def chrome_trace(events: Iterable[FunctionEvent]) -> dict:
    """The Trace Event Format document of ``events``: one complete ("X") event per range."""
    pid = os.getpid()
    out = []
    threads = set()
    for ev in events:
        threads.add(ev.thread)
        args: dict = {"kind": ev.kind}
        if ev.input_shapes:
            args["Input Dims"] = ev.input_shapes
        if ev.own_memory:
            args["Output Bytes"] = ev.own_memory
        if ev.stack:
            args["Call stack"] = ";".join(ev.stack)
        args.update(ev.args)
        # ts and dur from the same integer nanoseconds, so a child's range stays inside its parent's
        out.append(
            {
                "ph": "X",
                "cat": _CATEGORY[ev.kind],
                "name": ev.name,
                "pid": pid,
                "tid": ev.thread,
                "ts": ev.start_ns / 1000.0,
                "dur": (ev.end_ns - ev.start_ns) / 1000.0,
                "args": args,
            }
        )
    meta = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"flow (pid {pid})"}}]
    meta += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": f"thread {t}"}} for t in threads]
    return {"traceEvents": meta + out, "displayTimeUnit": "ms"}


def write_chrome_trace(events: Iterable[FunctionEvent], path: str | os.PathLike) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(chrome_trace(events), f)
