"""The error when no SBP signature of an op fits its inputs: the op, the inputs' SBPs, every
candidate signature with the conversions it would need and their cost, or why it cannot run."""

from __future__ import annotations

from flow_dist.errors import GlobalTensorError
from flow_dist.sbp import short

__all__ = ["no_signature", "NoSignatureError"]


class NoSignatureError(GlobalTensorError):
    """No SBP signature of an op can take its inputs."""


def _s(x) -> str:
    return "-" if x is None else short(x)


def no_signature(op, nd_in, assessed, placement, axis) -> NoSignatureError:
    """``assessed``: ``(signature, bytes, conversions, why not)`` per candidate."""
    have = ", ".join("-" if s is None else "(" + ", ".join(short(x) for x in s) + ")" for s in nd_in)
    lines = [
        f"{op.name}: no SBP signature fits on axis {axis} of {placement!r}; the inputs are ({have})",
        "candidates (inputs -> outputs):",
    ]
    for sig, cost, conversions, why in assessed:
        ins = ", ".join(_s(x) for x in sig.ins)
        outs = ", ".join(_s(x) for x in sig.outs)
        after = f"cannot run: {why}" if why else f"{conversions} conversion(s), {cost:.0f} bytes per rank"
        lines.append(f"  ({ins}) -> ({outs}): {after}")
    if not assessed:
        lines.append("  none: the op's rule gave no candidate for these shapes")
    return NoSignatureError("\n".join(lines))
