"""Composite ops: Python functions made of other ops that interceptors may see as one call.

Many PyTorch ops (``mse_loss``, ``addmm``, ``F.interpolate``) are written in flow as compositions
of primitive ops, so their gradients come for free. Most interceptors only care about the
primitives, but some need the whole call: autocast colours ``mse_loss`` float32 as one op, as
``torch.autocast`` does, where its subtraction and mean alone would run in whatever dtype comes
in. ``@composite("mse_loss")`` gives a function such a boundary:

>>> @flow.ops.composite("scaled_sum")
... def scaled_sum(x, scale=2.0):
...     return (x * scale).sum()

* With no interceptor active it is a plain call (one truth test more).
* With interceptors active, those that declare ``sees_composites = True`` (an attribute of the
  interceptor callable) are offered ``(op, inputs, attrs)`` like any op call, where ``op`` is the
  :class:`CompositeOp` (``op.name``, ``op.is_composite``), ``inputs`` the positional-or-keyword
  arguments in signature order (defaults filled in) and ``attrs`` the keyword-only ones. An
  interceptor answers it or returns ``NotImplemented``; :func:`flow.interceptors.redispatch` of a
  changed call runs the body with only the interceptors outside the one that redispatched, so an
  interceptor that answers a composite decides for its whole body. Interceptors that do not
  declare it (graph tracing, recorders) never see composites; they see the body's ops.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, TypeVar

from flow import _dispatch

__all__ = ["composite", "CompositeOp", "COMPOSITES"]

F = TypeVar("F", bound=Callable)

COMPOSITES: dict[str, "CompositeOp"] = {}  # name -> CompositeOp, for rule tables that colour them


class CompositeOp:
    """The op-like handle interceptors see for a call of a composite function."""

    __slots__ = ("name", "fn", "signature", "__weakref__")
    is_composite = True

    def __init__(self, name: str, fn: Callable) -> None:
        self.name = name
        self.fn = fn
        self.signature = inspect.signature(fn)

    def split(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """``(inputs, attrs)`` of a call: positional-or-keyword arguments in order, keyword-only ones."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}(): {e}") from None
        bound.apply_defaults()
        inputs, attrs = [], {}
        for p in self.signature.parameters.values():
            v = bound.arguments[p.name]
            if p.kind is p.VAR_POSITIONAL:
                inputs.extend(v)
            elif p.kind is p.VAR_KEYWORD:
                attrs.update(v)
            elif p.kind is p.KEYWORD_ONLY:
                attrs[p.name] = v
            else:
                inputs.append(v)
        return tuple(inputs), attrs

    def __call__(self, *inputs, **attrs):
        return self.fn(*inputs, **attrs)

    def __repr__(self) -> str:
        return f"<composite op {self.name}>"


def composite(name: str) -> Callable[[F], F]:
    """Declare the decorated function the composite op ``name`` (see the module docstring)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"composite: expected an op name, got {name!r}")

    def deco(fn: F) -> F:
        if name in COMPOSITES:
            raise ValueError(f"composite: '{name}' is already declared by {COMPOSITES[name].fn.__module__}")
        op = CompositeOp(name, fn)
        active, chain = _dispatch._ACTIVE, _dispatch._CHAIN

        @functools.wraps(fn)
        def run(*args, **kwargs):
            if active[0] and chain.chain:
                inputs, attrs = op.split(args, kwargs)
                return _dispatch.call_composite(op, inputs, attrs)
            return fn(*args, **kwargs)

        run.composite_op = op
        COMPOSITES[name] = op
        return run  # type: ignore[return-value]

    return deco
