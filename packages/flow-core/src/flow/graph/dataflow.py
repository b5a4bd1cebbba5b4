"""The dataflow engine: actors connected by channels with a fixed number of buffers.

An :class:`Actor` fires when every input channel holds a token (its inputs are ready) and every
output channel has a free buffer; firing consumes one token per input and puts one per output.
Buffer counts on the channels give back-pressure: a producer that runs ahead of its consumer
stops when the buffers between them are full. :class:`DataflowScheduler` runs actors from a
ready queue on one thread. :class:`Channel` is also thread safe, so actors on different threads
(the input loader of :class:`Prefetcher` and the compute of a compiled step) overlap, bounded by
the channel between them.

Inside one compiled step, the plan's nodes are actors and the IR's edges are channels with one
buffer: :func:`schedule` simulates that once at compile time, giving the order the executor then
runs as straight-line code (on one CPU thread, the dataflow schedule of a step is a topological
order). :func:`run_dataflow` interprets a plan through the scheduler instead (``config.executor =
"dataflow"``), for devices or tests that want the dynamic version.
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from typing import Any, Callable

import numpy as np

from flow.errors import FlowError


def call_step(step, values: list) -> None:
    """Run one step reading and writing ``values`` (the interpreted path: dataflow mode, tuning)."""
    args = []
    for kind, a in step.args:
        if kind == "s":
            args.append(values[a])
        elif kind == "l":
            args.append([values[x] for x in a])
        else:
            args.append(a)
    out = step.kernel(*args, **step.attrs)
    if len(step.outs) == 1 and not isinstance(out, (tuple, list)):
        values[step.outs[0]] = np.asarray(out) if step.scalar_out else out
    else:
        for s, o in zip(step.outs, out):
            values[s] = o


class Channel:
    """A FIFO edge holding at most ``capacity`` tokens (buffers)."""

    def __init__(self, capacity: int = 1, name: str = "") -> None:
        if capacity < 1:
            raise ValueError("a channel needs at least one buffer")
        self.capacity = capacity
        self.name = name
        self._items: deque = deque()
        self._cv = threading.Condition()
        self._closed = False
        self.consumer: Actor | None = None
        self.producer: Actor | None = None

    def ready(self) -> bool:
        return bool(self._items)

    def has_space(self) -> bool:
        return len(self._items) < self.capacity

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item, block: bool = True, timeout: float | None = None) -> None:
        with self._cv:
            while len(self._items) >= self.capacity:
                if self._closed:
                    raise FlowError(f"channel {self.name!r} is closed")
                if not block or not self._cv.wait(timeout):
                    raise FlowError(f"channel {self.name!r} is full ({self.capacity} buffers)")
            self._items.append(item)
            self._cv.notify_all()

    def get(self, block: bool = True, timeout: float | None = None):
        with self._cv:
            while not self._items:
                if self._closed or not block or not self._cv.wait(timeout):
                    raise FlowError(f"channel {self.name!r} is empty")
            item = self._items.popleft()
            self._cv.notify_all()
            return item

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()


class Actor:
    """A node of the dataflow: ``fn(*input tokens) -> token`` put on every output channel."""

    def __init__(self, name: str, fn: Callable | None = None, budget: int | None = None) -> None:
        self.name = name
        self.fn = fn
        self.inputs: list[Channel] = []
        self.outputs: list[Channel] = []
        self.budget = budget  # how many times it may fire (sources need one); None: unbounded
        self.fired = 0
        self.position = 0

    def ready(self) -> bool:
        if self.budget is not None and self.fired >= self.budget:
            return False
        for c in self.inputs:
            if not c._items:
                return False
        for c in self.outputs:
            if len(c._items) >= c.capacity:
                return False
        return True

    def fire(self) -> None:
        tokens = [c.get(block=False) for c in self.inputs]
        out = self.fn(*tokens) if self.fn is not None else None
        for c in self.outputs:
            c.put(out, block=False)
        self.fired += 1


def connect(src: Actor, dst: Actor, capacity: int = 1) -> Channel:
    ch = Channel(capacity, f"{src.name}->{dst.name}")
    ch.producer, ch.consumer = src, dst
    src.outputs.append(ch)
    dst.inputs.append(ch)
    return ch


class DataflowScheduler:
    """Fires ready actors until none is ready; returns the firing order.

    The ready queue is FIFO, or ordered by ``priority(actor)`` (smallest first) when given: the
    compile-time schedule uses the trace position, so it keeps program order wherever the
    dependencies allow it (which keeps peak memory close to eager mode's).
    """

    def __init__(self, actors: list[Actor], priority: Callable[[Actor], Any] | None = None) -> None:
        self.actors = actors
        self.priority = priority

    def run(self) -> list[Actor]:
        prio = self.priority
        queued = set()
        heap: list = []
        fifo: deque = deque()
        tie = 0

        def push(a):
            nonlocal tie
            queued.add(id(a))
            if prio is None:
                fifo.append(a)
            else:
                tie += 1
                heapq.heappush(heap, (prio(a), tie, a))

        def pop():
            return fifo.popleft() if prio is None else heapq.heappop(heap)[2]

        for a in self.actors:
            if a.ready():
                push(a)
        order = []
        while fifo or heap:
            a = pop()
            queued.discard(id(a))
            if not a.ready():
                continue
            a.fire()
            order.append(a)
            # the consumers got a token, the producers got a free buffer, and a may fire again
            for c in a.outputs:
                b = c.consumer
                if b is not None and id(b) not in queued and b.ready():
                    push(b)
            for c in a.inputs:
                b = c.producer
                if b is not None and id(b) not in queued and b.ready():
                    push(b)
            if id(a) not in queued and a.ready():
                push(a)
        return order


def _build(nodes, deps: dict, fns: dict | None = None):
    actors = {}
    for i, n in enumerate(nodes):
        a = actors[n.id] = Actor(f"{n.name}#{n.id}", (fns or {}).get(n.id), budget=1)
        a.position = i
    for n in nodes:
        for d in sorted(deps.get(n.id, ())):
            if d in actors:
                connect(actors[d], actors[n.id])
    return actors


def schedule(nodes, deps: dict) -> list[int]:
    """The order one step's nodes fire in (one buffer per edge, each node once)."""
    actors = _build(nodes, deps)
    order = DataflowScheduler([actors[n.id] for n in nodes], priority=lambda a: a.position).run()
    if len(order) != len(nodes):
        stuck = [a.name for a in actors.values() if a.fired == 0][:8]
        raise FlowError(f"graph scheduling: the dependencies form a cycle; nodes that never became ready: {stuck}")
    return [int(a.name.rsplit("#", 1)[1]) for a in order]


def run_dataflow(plan, values: list) -> None:
    """Run ``plan``'s steps through the scheduler (tokens signal readiness; arrays live in ``values``)."""

    by_node = {s.node.id: s for s in plan.steps}
    fns = {nid: (lambda *tokens, s=s: call_step(s, values)) for nid, s in by_node.items()}
    actors = _build(
        [s.node for s in plan.steps],
        {s.node.id: {plan.steps[d].node.id for d in plan.deps[s.index]} for s in plan.steps},
        fns,
    )
    order = DataflowScheduler(list(actors.values())).run()
    if len(order) != len(plan.steps):
        raise FlowError("graph executor: the dataflow stalled before every step ran")


class Prefetcher:
    """Loads the next step's inputs on a background thread while the current step computes.

    The loader actor puts loaded inputs into a channel with ``depth`` buffers: when the compute
    side falls behind, the buffers fill and the loader waits (back-pressure); when the loader falls
    behind, ``get()`` waits for it.
    """

    def __init__(self, load: Callable[[Any], Any], depth: int = 2) -> None:
        self.load = load
        self.channel = Channel(depth, "prefetch")
        self._thread: threading.Thread | None = None
        self._stop = False
        self.source = None

    def start(self, source) -> None:
        """Load every item of the iterator ``source`` in order, in the background."""
        self.source = source
        self._thread = threading.Thread(target=self._loop, args=(source,), daemon=True, name="flow-graph-prefetch")
        self._thread.start()

    def _loop(self, source) -> None:
        while not self._stop:
            try:
                item = next(source)
            except StopIteration:
                self.channel.put(("end", None))
                return
            except BaseException as e:  # delivered to the compute side
                self.channel.put(("error", e))
                return
            try:
                self.channel.put(("item", item, self.load(item)))
            except BaseException as e:
                self.channel.put(("error", e))
                return

    def submit(self, item) -> None:
        """Load one item in the background (``graph.prefetch``)."""

        def work():
            try:
                self.channel.put(("item", item, self.load(item)))
            except BaseException as e:
                self.channel.put(("error", e))

        self._thread = threading.Thread(target=work, daemon=True, name="flow-graph-prefetch")
        self._thread.start()

    def get(self):
        """``(item, loaded)`` of the next item; StopIteration at the end of the source."""
        tok = self.channel.get()
        if tok[0] == "end":
            raise StopIteration
        if tok[0] == "error":
            raise tok[1]
        return tok[1], tok[2]

    def close(self) -> None:
        self._stop = True
        self.channel.close()
