"""How a training run stops on a signal: SIGINT (Ctrl-C) and SIGTERM (what schedulers, ``kill`` and
container runtimes send) both ask the loop to checkpoint and stop; the run then exits with
128 + the signal's number (130, 143), as a shell reports a process ended by it. A second signal
stops at once, without a checkpoint.

DataLoader worker processes do not run these handlers: flow's workers ignore SIGINT and take
SIGTERM's default action whatever the main process installed (see ``flow.utils.data._worker``).
"""

from __future__ import annotations

import signal
import sys

__all__ = ["Interrupt", "SIGNALS"]

SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)


class Interrupt:
    """A context that turns SIGINT / SIGTERM into a request (``requested``) the training loop polls."""

    def __init__(self, prog: str = "flow-train") -> None:
        self.prog = prog
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """What the process exits with once it has checkpointed: 128 + the signal's number."""
        return 128 + int(self.signum or signal.SIGINT)

    def __enter__(self) -> Interrupt:
        for sig in SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except (ValueError, OSError):  # not the main thread, or a platform without this signal
                pass
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:  # the second one: stop now
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)
        self.signum = signum
        if signum == signal.SIGINT:
            what, again = "interrupted", "Ctrl-C again"
        else:
            what, again = f"received {signal.Signals(signum).name}", "send it again"
        print(f"\n{self.prog}: {what}; saving a checkpoint ({again} to quit without one)", file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            try:
                signal.signal(sig, previous)
            except (ValueError, OSError, TypeError):
                pass
        self._previous.clear()
