"""``flow-train --profile N``: profile N training steps after one warm-up step.

The warm-up step pays the one-off costs (kernel caches, graph compilation with ``--graph``) so the
profiled steps show what every later step costs. When the N steps are done (or the run ends
first), the Chrome trace ``profile.trace.json`` is written to the run directory and the ops with
the most CPU time are printed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from typing import Iterator

from flow.profiler import ProfilerActivity, profile, schedule

__all__ = ["StepProfiler", "TRACE_NAME", "TOP_OPS"]

TRACE_NAME = "profile.trace.json"
TOP_OPS = 15  # rows of the printed table


class StepProfiler:
    """Wraps training steps in a profile with ``schedule(wait=0, warmup=1, active=steps, repeat=1)``."""

    def __init__(self, steps: int | None, out_dir: str, log: Callable[[str], None], main: bool = True) -> None:
        self.steps = steps if main else None  # data-parallel runs: rank 0 profiles
        self.out_dir = out_dir
        self.log = log
        self.trace_path = os.path.join(out_dir, TRACE_NAME)
        self.prof: profile | None = None
        self.done = False

    @contextmanager
    def step(self) -> Iterator[None]:
        """Run one training step inside the ``with`` block; profiled when its turn comes."""
        if not self.steps or self.done:
            yield
            return
        if self.prof is None:
            self.prof = profile(
                activities=[ProfilerActivity.CPU],
                schedule=schedule(wait=0, warmup=1, active=self.steps, repeat=1),
                on_trace_ready=self._ready,
                record_shapes=True,
            )
            self.prof.start()
        yield
        self.prof.step()

    def close(self) -> None:
        """End a profile the run stopped before it finished (fewer steps than asked)."""
        if self.prof is not None and not self.done:
            self.prof.stop()
            self.done = True

    def _ready(self, prof: profile) -> None:
        self.done = True
        prof.export_chrome_trace(self.trace_path)
        table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=TOP_OPS)
        self.log(f"profile of {self.steps} step(s) after a warm-up step; Chrome trace: {self.trace_path}\n{table}")
