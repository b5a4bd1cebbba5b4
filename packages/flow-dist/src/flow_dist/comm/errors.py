"""Errors of communication."""

from __future__ import annotations

from flow.errors import FlowError

__all__ = ["CommError", "CommTimeoutError"]


class CommError(FlowError):
    """A collective that cannot run as called (ranks disagree on its shape or dtype, a bad rank)."""


class CommTimeoutError(CommError):
    """A collective did not complete within FLOW_COMM_TIMEOUT seconds."""
