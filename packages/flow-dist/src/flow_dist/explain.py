"""The error when no SBP signature of an op fits its inputs: op, inputs' SBPs, the candidates and
what each would need."""

from __future__ import annotations

from flow_dist.global_array import GlobalTensorError
from flow_dist.sbp import short

__all__ = ["no_signature", "NoSignatureError"]


class NoSignatureError(GlobalTensorError):
    """No SBP signature of an op can take its inputs."""


def _s(x) -> str:
    return "-" if x is None else short(x)


def no_signature(op, slots, nd_in, candidates, placement, axis) -> NoSignatureError:
    have = ", ".join("-" if s is None else "(" + ", ".join(short(x) for x in s) + ")" for s in nd_in)
    lines = [
        f"{op.name}: no SBP signature fits on placement axis {axis} of {placement!r}; inputs have ({have})",
        "candidates (inputs -> outputs):",
    ]
    for sig in candidates:
        ins = ", ".join(_s(x) for x in sig.ins)
        outs = ", ".join(_s(x) for x in sig.outs)
        lines.append(f"  ({ins}) -> ({outs})")
    if not candidates:
        lines.append("  none: the rule gave no candidate for these shapes")
    lines.append(
        "an in-place update cannot convert the tensors it writes into; a split must be of a dim the tensor has"
    )
    return NoSignatureError("\n".join(lines))
