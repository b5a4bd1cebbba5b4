"""Eager interceptors: code that sees every op call and may answer it instead of the kernel.

An interceptor is ``fn(op, inputs, attrs)``: ``op`` is the registered op (``op.name``,
``op.schema``), ``inputs`` the tuple of tensors and other positional inputs as the op
receives them (after type promotion), ``attrs`` its attributes. It returns the result, or
``NotImplemented`` to pass the call on. Autocast and global tensors are built this way.

>>> def log_ops(op, inputs, attrs):
...     print(op.name, [tuple(x.shape) for x in inputs if isinstance(x, flow.Tensor)])
...     return NotImplemented
>>> with flow.interceptors.intercept(log_ops):
...     y = flow.ones(2) + 1

Active interceptors form a chain. The innermost (the last entered) sees a call first;
what it returns is the result, unless it returns ``NotImplemented``, in which case the
next one out sees the call, and so on, and the op runs when none answered. Ops that an
interceptor itself calls (to compute its answer, or to pass a changed call on with
:func:`redispatch`) are seen only by the interceptors outside it, so an interceptor never
sees its own calls. With no interceptor active the dispatcher does no extra work.

An interceptor with the attribute ``sees_composites = True`` is also offered the calls of
composite ops (functions made of other ops, such as ``F.mse_loss``; see :mod:`flow.ops.composite`),
whose ``op`` is a :class:`flow.ops.composite.CompositeOp`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from flow import _dispatch

__all__ = ["intercept", "active", "redispatch", "run_op"]


@contextmanager
def intercept(fn: Callable) -> Iterator[Callable]:
    """Make ``fn(op, inputs, attrs)`` the innermost interceptor inside the ``with`` block."""
    _dispatch.push_interceptor(fn)
    try:
        yield fn
    finally:
        _dispatch.pop_interceptor(fn)


def active() -> tuple:
    """This thread's active interceptors, outermost first (each thread has its own chain)."""
    return _dispatch.active_interceptors()


def redispatch(op, inputs, attrs=None):
    """Pass a (possibly changed) call on to the interceptors outside the running one, then the op."""
    return _dispatch.call(op, *inputs, **(attrs or {}))


def run_op(op, inputs, attrs=None):
    """Run the op itself (an op name, handle or OpDef), skipping every interceptor (not array kinds:
    see :mod:`flow.array_kinds`)."""
    if getattr(op, "is_composite", False):
        return _dispatch.run_composite_below(op, tuple(inputs), dict(attrs or {}))
    return _dispatch.execute(_dispatch.opdef(op), tuple(inputs), dict(attrs or {}))
