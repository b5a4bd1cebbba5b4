"""``sbp_boxing``: one placement axis of a conversion as an op, so that a compiled graph holds it.

In eager mode :mod:`flow_dist.boxing` converts local pieces directly. While a graph is traced the
pieces are symbolic, so each one-axis conversion is called as this op instead: the tracer records
it as a node (marked ``collective``, so the graph keeps every such node in program order and the
processes of the job issue their collectives alike), and the compiled step runs its kernel, which
is the eager conversion itself on the piece.

Attributes: ``placement``, ``sbp`` (the input's SBP, one per placement axis), ``axis`` (the axis
converted), ``to`` (its new SBP), ``shape`` (the logical shape) and ``coord`` (this process's
index in the placement). The output is this process's piece of the converted tensor.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from flow.errors import OpError
from flow.ops.meta import TensorMeta
from flow.registry import ANY, Attr, schema
from flow_dist.boxing import OP_NAME  # named where boxing calls the op

__all__ = ["OP_NAME", "register", "register_kernels"]


def check_group(op: str, placement, axis, coord) -> None:
    """The placement, axis and coordinate attributes of a collective op are consistent."""
    from flow_dist.placement import Placement

    if not isinstance(placement, Placement):
        raise OpError(op, f"attribute 'placement' must be a flow.placement, got {placement!r}")
    if not 0 <= axis < placement.ndim:
        raise OpError(op, f"axis {axis} is not an axis of {placement!r}")
    hier = placement.hierarchy
    if len(coord) != len(hier) or not all(isinstance(c, int) and 0 <= c < h for c, h in zip(coord, hier)):
        raise OpError(op, f"coord {coord} is not a position in {placement!r}")


def _check(placement, sbp, axis, to, shape, coord) -> tuple:
    from flow_dist.sbp import sbp as SBP

    check_group(OP_NAME, placement, axis, coord)
    if len(sbp) != placement.ndim or not all(isinstance(s, SBP) for s in sbp) or not isinstance(to, SBP):
        raise OpError(OP_NAME, f"sbp {sbp} and to={to!r} must be SBPs, one per axis of {placement!r}")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise OpError(OP_NAME, f"shape {shape} is not a shape")
    for s in tuple(sbp) + (to,):
        if s.is_split() and not 0 <= s.dim < len(shape):
            raise OpError(OP_NAME, f"{s!r} splits no dim of shape {tuple(shape)}")
    return tuple(sbp)[:axis] + (to,) + tuple(sbp)[axis + 1 :]


def _meta(x, placement, sbp, axis, to, shape, coord) -> TensorMeta:
    from flow_dist.layout import local_shape

    target = _check(placement, sbp, axis, to, shape, coord)
    have = local_shape(tuple(shape), placement, tuple(sbp), tuple(coord))
    if tuple(x.shape) != have:
        raise OpError(
            OP_NAME, f"the piece has shape {tuple(x.shape)}, but {tuple(sbp)} of {tuple(shape)} gives {have} here"
        )
    out = local_shape(tuple(shape), placement, target, tuple(coord))
    return TensorMeta(out, x.dtype, x.device)


def _kernel(x: np.ndarray, placement, sbp, axis, to, shape, coord) -> np.ndarray:
    from flow_dist.boxing import convert_axis
    from flow_dist.global_array import GlobalArray

    g = GlobalArray(x, placement, tuple(sbp), tuple(shape), tuple(coord))
    return convert_axis(g, axis, to).local


def _samples() -> Iterator:
    """One process's placement (every test process is rank 0 of its own): each kind of conversion."""
    import flow
    from flow_dist.placement import placement
    from flow_dist.sbp import broadcast, partial_sum, split

    p = placement("cpu", [0])
    x = flow.tensor(np.arange(6.0).reshape(2, 3))
    for frm, to in (
        (broadcast, split(1)),
        (split(0), broadcast),
        (partial_sum, broadcast),
        (split(0), split(1)),
        (broadcast, partial_sum),
    ):
        yield flow.testing.SampleInput(
            args=(x,), kwargs=dict(placement=p, sbp=(frm,), axis=0, to=to, shape=(2, 3), coord=(0,))
        )


def register(registry) -> None:
    registry.register_op(
        schema(
            OP_NAME,
            ["x"],
            [
                Attr("placement"),
                Attr("sbp", tuple),
                Attr("axis", int),
                Attr("to"),
                Attr("shape", tuple),
                Attr("coord", tuple),
            ],
            dtypes=ANY,
        ),
        meta=_meta,
        samples=_samples,
        collective=True,
        no_error_samples="the attributes come from flow-dist's boxing, never from users",
        doc="one placement axis of an SBP conversion of a global tensor's piece (flow-dist boxing)",
    )


def register_kernels(registry) -> None:
    registry.register_kernel(OP_NAME, "cpu", _kernel)
