"""What SBP rules are made of: signatures, the rule context, and helpers shared by the rules."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

from flow_dist.sbp import Broadcast, PartialSum, SbpError, Split, broadcast, partial_sum, split

__all__ = ["TABLE", "Sig", "RuleContext", "S", "B", "P", "as_sig", "same_layout"]

TABLE = "sbp"
S = split
B = broadcast
P = partial_sum


class Sig(NamedTuple):
    """One SBP signature: ``ins`` per tensor argument, ``outs`` per output."""

    ins: tuple
    outs: tuple
    local_attrs: Callable | None = None  # (attrs, local_in_shapes, local_out_shapes) -> attrs
    local: Callable | None = None  # (run, local_inputs, attrs, ctx) -> outputs
    note: str = ""


class RuleContext:
    """What a rule sees of one call: logical shapes, attributes, the placement axis's size."""

    __slots__ = (
        "op",
        "attrs",
        "shapes",
        "out_shapes",
        "axis_size",
        "current",
        "has_scalars",
        "constants",
        "list_lengths",
    )

    def __init__(
        self,
        op,
        attrs: dict,
        shapes: list,
        out_shapes: list,
        axis_size: int,
        current: list,
        has_scalars: bool,
        constants: list,
        list_lengths: list,
    ) -> None:
        self.op = op
        self.attrs = attrs
        self.shapes = shapes  # logical shape per tensor slot (None: an absent optional tensor)
        self.out_shapes = out_shapes
        self.axis_size = axis_size
        self.current = current  # the SBP each slot has now on this axis (None: absent, or a local constant)
        self.has_scalars = has_scalars  # a Python / NumPy number among the inputs
        self.constants = constants  # slots holding local 0-d tensors (the same on every rank by contract)
        self.list_lengths = list_lengths  # the length of each tensor-list argument, in order

    @property
    def n(self) -> int:
        return len(self.shapes)

    def ndim(self, k: int) -> int:
        return len(self.shapes[k])

    def attr(self, name: str, default: Any = None) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        a = self.op.schema.attr_map.get(name)
        return default if a is None else a.default


def _parse(x):
    if x is None or isinstance(x, (Split, Broadcast, PartialSum)):
        return x
    if isinstance(x, str):
        t = x.replace(" ", "")
        if t == "B":
            return B
        if t == "P":
            return P
        if t.startswith("S(") and t.endswith(")") and t[2:-1].lstrip("-").isdigit():
            return S(int(t[2:-1]))
    raise SbpError(f"SBP rule: {x!r} is not an SBP (flow.sbp objects, or 'S(d)', 'B', 'P')")


def as_sig(candidate) -> Sig:
    """A candidate a rule returned, as a :class:`Sig` of SBP objects."""
    if isinstance(candidate, Sig):
        if all(x is None or not isinstance(x, str) for x in candidate.ins + candidate.outs):
            return candidate
        return candidate._replace(
            ins=tuple(_parse(x) for x in candidate.ins), outs=tuple(_parse(x) for x in candidate.outs)
        )
    ins, outs = candidate
    return Sig(tuple(_parse(x) for x in ins), tuple(_parse(x) for x in outs))


def _dims(dim, ndim: int) -> tuple:
    """A ``dim`` attribute (None, an int or a tuple) as sorted non-negative dims."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    return tuple(sorted({d % ndim if ndim else 0 for d in dim}))


def same_layout(ctx: RuleContext, partial: bool = True, skip: Sequence[int] = ()) -> list:
    """Ops where any layout of the (first) input gives the same layout of every output: B, every
    split not in ``skip`` and (``partial``) P."""
    nd = ctx.ndim(0)
    n_out = len(ctx.out_shapes)
    sigs = [Sig((B,) + (None,) * (ctx.n - 1), (B,) * n_out)]
    for d in range(nd):
        if d not in skip:
            sigs.append(Sig((S(d),) + (None,) * (ctx.n - 1), (S(d),) * n_out))
    if partial:
        sigs.append(Sig((P,) + (None,) * (ctx.n - 1), (P,) * n_out))
    return sigs
