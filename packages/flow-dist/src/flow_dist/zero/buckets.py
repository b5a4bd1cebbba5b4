"""Reduce-scatter buckets of the ``zero`` graph pass: the gradients of sharded parameters reduced together.

The ``zero`` pass turns each sharded parameter's gradient all-reduce into a reduce-scatter (P -> S(0),
one ``sbp_boxing`` node where backward completes the gradient). :func:`bucket_reduce_scatters` then
groups those, in the order backward produces them, into buckets that close once they hold the bucket
size (``graph.config.set_option("zero.bucket_size_mb", mb)``; by default the gradient buckets'
``gradient_buckets.bucket_size_mb``, else 25, as DDP; 0: one reduce-scatter per parameter), and
replaces each bucket by one collective node, ``sbp_reduce_scatter_bucket``, right after the bucket's
last gradient is made: the gradients' rows are packed rank-major (rank 0's rows of every gradient,
then rank 1's, ...; the pieces may differ in size, the collective takes one count per rank, so no
padding is sent) and reduce-scattered at once, each rank receiving the sums of its rows.

A bucket keeps its gradients whole until it closes; after that only their rows live. The stages
size the buckets differently:

- stage 1: the bucket size as given (the fewest collectives);
- stage 2: at most 1/n of the bytes of the gradients to reduce, so at any time the whole gradients
  of the bucket being filled are within 1/n of all of them: gradients live as shards.

The collective is blocking: the MPI backend's nonblocking reduce-scatter does not yet keep its
packed send buffer alive until the wait, so a bucket left in flight while later ones start could
read freed memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from flow.errors import OpError
from flow.ops.meta import TensorMeta
from flow.registry import ANY, Attr, schema
from flow_dist.boxing_op import OP_NAME as BOXING
from flow_dist.layout import piece_bounds
from flow_dist.sbp import PartialSum, Split

__all__ = ["OP", "OPTION", "bucket_reduce_scatters", "bucket_size_bytes", "register", "register_kernels"]

OP = "sbp_reduce_scatter_bucket"
OPTION = "zero.bucket_size_mb"


def _rows(shape: tuple, n: int, i: int) -> tuple:
    """The shape of piece ``i`` of ``n`` of a tensor of ``shape`` split on dim 0."""
    s, e = piece_bounds(shape[0], n, i)
    return (e - s, *shape[1:])


def _numel(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


# -- the op -------------------------------------------------------------------------------------
def _meta(xs, placement, axis, coord) -> tuple:
    from flow_dist.boxing_op import check_group

    check_group(OP, placement, axis, coord)
    if not xs:
        raise OpError(OP, "expected at least one tensor")
    dt = xs[0].dtype
    if any(x.dtype != dt for x in xs):
        raise OpError(OP, f"the tensors of a bucket must have one dtype, got {sorted({str(x.dtype) for x in xs})}")
    if any(len(x.shape) == 0 for x in xs):
        raise OpError(OP, "the tensors of a bucket are split on dim 0, so they must have at least one dim")
    n, i = placement.hierarchy[axis], coord[axis]
    return tuple(TensorMeta(_rows(tuple(x.shape), n, i), dt, x.device) for x in xs)


def _kernel(xs, placement, axis, coord) -> tuple:
    from flow_dist.grad_buckets import _group

    n, me = placement.hierarchy[axis], coord[axis]
    xs = [np.asarray(x) for x in xs]
    # rank-major: what rank r receives is its rows of every gradient, one after the other
    pieces = []
    for r in range(n):
        rows = [x[slice(*piece_bounds(x.shape[0], n, r))].reshape(-1) for x in xs]
        pieces.append(np.concatenate(rows) if len(rows) > 1 else np.ascontiguousarray(rows[0]))
    # blocking: the MPI backend's nonblocking reduce-scatter does not keep its packed send buffer alive
    # until the wait, so a bucket in flight behind later ones could read freed memory
    mine = _group(placement, axis, tuple(coord)).reduce_scatter(pieces, op="sum") if n > 1 else pieces[0]
    mine = np.asarray(mine).reshape(-1)
    out, o = [], 0
    for x in xs:
        shape = _rows(x.shape, n, me)
        k = _numel(shape)
        out.append(mine[o : o + k].reshape(shape))
        o += k
    return tuple(out)


def _samples() -> Iterator:
    import flow
    from flow_dist.placement import placement

    p = placement("cpu", [0])
    a, b = flow.tensor(np.arange(6.0).reshape(2, 3)), flow.tensor(np.arange(4.0))
    yield flow.testing.SampleInput(args=([a, b],), kwargs=dict(placement=p, axis=0, coord=(0,)))


def register(registry) -> None:
    registry.register_op(
        schema(
            OP, ["*xs"], [Attr("placement"), Attr("axis", int), Attr("coord", tuple)], outputs=("rows",), dtypes=ANY
        ),
        meta=_meta,
        samples=_samples,
        collective=True,
        no_error_samples="made by the zero graph pass, never by users",
        doc="reduce-scatters a bucket of partial gradients on dim 0 in one collective (ZeRO in graph mode)",
    )


def register_kernels(registry) -> None:
    registry.register_kernel(OP, "cpu", _kernel)


# -- the rewrite --------------------------------------------------------------------------------
def bucket_size_bytes(config) -> float:
    """``zero.bucket_size_mb`` (default: ``gradient_buckets.bucket_size_mb``, else 25) in bytes; 0: no buckets."""
    from flow_dist.grad_buckets import DEFAULT_MB
    from flow_dist.grad_buckets import PASS as GB

    mb = config.options.get(OPTION, config.options.get(f"{GB}.bucket_size_mb", DEFAULT_MB))
    try:
        mb = float(mb)
    except (TypeError, ValueError):
        raise OpError("zero", f"{OPTION} must be a number of megabytes, got {mb!r}") from None
    if not mb >= 0:
        raise OpError("zero", f"{OPTION} must be >= 0 (0: one reduce-scatter per parameter), got {mb}")
    return mb * 2**20


def _is_reduce_scatter(node) -> bool:
    a = node.attrs
    return (
        node.name == BOXING
        and a["sbp"][a["axis"]].__class__ is PartialSum
        and a["to"].__class__ is Split
        and a["to"].dim == 0
    )


def stage_limit(nodes: list, stage: int, limit: float, n: int) -> float:
    """The bucket size at ``stage``: ``limit``, and at stage 2 at most 1/n of the gradients to reduce, so
    that the whole gradients of the one bucket being filled stay within 1/n of them."""
    if stage < 2 or n < 2:
        return limit
    total = sum(b.inputs[0].numel() * b.inputs[0].dtype.itemsize for b in nodes)
    return min(limit, total / n)


def bucket_reduce_scatters(ir, nodes: list, stage: int, limit: float) -> int:
    """Replace the reduce-scatters ``nodes`` (``sbp_boxing`` P -> S(0) of gradients read only by
    optimizer updates) by one ``sbp_reduce_scatter_bucket`` per bucket, right after the bucket's
    last gradient is made (see the module docstring). Returns the number of buckets made."""
    if limit <= 0 or not nodes:
        return 0
    users = ir.users()
    roots = {v.id for v in ir.live_roots()}
    pos = {n.id: i for i, n in enumerate(ir.nodes)}
    groups: dict = {}  # (placement, axis, coord, dtype) -> [boxing nodes in backward's order]
    for n in sorted({id(n): n for n in nodes}.values(), key=lambda n: pos[n.id]):
        out = n.outputs[0]
        us = users.get(out.id, ())
        if (
            not _is_reduce_scatter(n)
            or not us
            or out.id in roots
            or any(u.tags.get("phase") != "optimizer" for u in us)
        ):
            continue
        a = n.attrs
        groups.setdefault((a["placement"], a["axis"], tuple(a["coord"]), n.inputs[0].dtype), []).append(n)
    mapping: dict = {}
    dead: set = set()
    made = 0
    for (placement, axis, coord, _), group in groups.items():
        size = stage_limit(group, stage, limit, placement.hierarchy[axis])
        buckets = [[0]]  # each bucket: [bytes, nodes...]
        for n in group:
            if buckets[-1][0] >= size:  # full: as DDP, a bucket closes once it reaches the size
                buckets.append([0])
            buckets[-1][0] += n.inputs[0].numel() * n.inputs[0].dtype.itemsize
            buckets[-1].append(n)
        for _, *bucket in buckets:
            last = bucket[-1]
            first_user = min((u for b in bucket for u in users[b.outputs[0].id]), key=lambda u: pos[u.id])
            if pos[first_user.id] < pos[last.id]:  # an update reads a gradient before the bucket is whole
                continue
            node = ir.emit(
                OP,
                [[b.inputs[0] for b in bucket]],
                dict(placement=placement, axis=axis, coord=coord),
                after=last,
                scope=last.scope,
                tags={"phase": "backward", "bucket_of": len(bucket)},
            )
            for b, v in zip(bucket, node.outputs):
                v.attrs.update(b.outputs[0].attrs)
                mapping[b.outputs[0].id] = v
                dead.add(b.id)
            made += 1
    ir.replace_uses(mapping)
    ir.remove_nodes(dead)
    return made
