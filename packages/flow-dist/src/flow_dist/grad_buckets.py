"""Gradient buckets in a compiled step: the all-reduces of gradients fused, started early, waited late.

In a traced data-parallel step each broadcast parameter's gradient arrives as a partial sum and is
all-reduced (an ``sbp_boxing`` node, P -> B) before its optimizer update reads it. The graph pass
``gradient_buckets`` (registered by flow-dist's plugin, after the core's clean-up passes) groups
those all-reduces, in the order backward produces them, into buckets that close once
they hold ``bucket_size_mb`` (``graph.config.set_option("gradient_buckets.bucket_size_mb", 25)``, the
default as DDP's), and replaces each bucket by two collective nodes:

- ``sbp_all_reduce_start`` where the bucket's last gradient is made: its pieces are copied into
  one flat buffer and a nonblocking all-reduce of it starts;
- ``sbp_all_reduce_wait`` right before the first update that reads one of them: it waits for the
  all-reduce and gives each gradient back as a view of the reduced buffer.

The backward ops between the two run while the all-reduce is in flight, so its time hides behind
them (as far as the backend progresses on its own: MPI moves nonblocking collectives forward when
any MPI call is made). Both are collective nodes, so every process issues them in program order.
A gradient that something other than an optimizer update reads (a graph output) keeps its own
all-reduce. ``graph.config.disable_pass("gradient_buckets")`` turns the pass off.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from flow.errors import OpError
from flow.ops.meta import TensorMeta
from flow.registry import ANY, Attr, schema
from flow_dist.boxing_op import OP_NAME as BOXING
from flow_dist.sbp import Broadcast, PartialSum

__all__ = ["START", "WAIT", "PASS", "gradient_buckets", "register", "register_kernels", "register_pass"]

START = "sbp_all_reduce_start"
WAIT = "sbp_all_reduce_wait"
PASS = "gradient_buckets"
DEFAULT_MB = 25.0

# flat buffers with an all-reduce in flight: id(buffer) -> (buffer, work). The buffer is held
# here until its wait, so its id cannot be reused meanwhile.
_IN_FLIGHT: dict = {}


# -- the two ops --------------------------------------------------------------------------------
def _start_meta(xs, placement, axis, coord) -> TensorMeta:
    from flow_dist.boxing_op import check_group

    check_group(START, placement, axis, coord)
    if not xs:
        raise OpError(START, "expected at least one tensor")
    dt = xs[0].dtype
    if any(x.dtype != dt for x in xs):
        raise OpError(START, f"the tensors of a bucket must have one dtype, got {sorted({str(x.dtype) for x in xs})}")
    total = 0
    for x in xs:
        n = 1
        for s in x.shape:
            n *= s
        total += n
    return TensorMeta((total,), dt, xs[0].device)


def _wait_meta(flat, shapes) -> tuple:
    if not shapes or not all(isinstance(s, tuple) and all(isinstance(d, int) and d >= 0 for d in s) for s in shapes):
        raise OpError(WAIT, f"shapes must be a non-empty tuple of shapes, got {shapes!r}")
    if len(flat.shape) != 1:
        raise OpError(WAIT, f"the buffer must be 1-d, got shape {tuple(flat.shape)}")
    total = 0
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        total += n
    if tuple(flat.shape) != (total,):
        raise OpError(WAIT, f"the buffer has shape {tuple(flat.shape)}, but the shapes {shapes} need ({total},)")
    return tuple(TensorMeta(tuple(s), flat.dtype, flat.device) for s in shapes)


def _group(placement, axis: int, coord: tuple):
    from flow_dist.comm.backend import get_backend

    if placement.ndim == 1:
        return get_backend(placement.type, placement.rank_list)
    me = placement.rank_list[int(np.ravel_multi_index(coord, placement.hierarchy))]
    return get_backend(placement.type, placement.axis_group(me, axis))


def _start(xs, placement, axis, coord) -> np.ndarray:
    flat = np.concatenate([np.ascontiguousarray(x).reshape(-1) for x in xs])
    if placement.hierarchy[axis] > 1:
        work = _group(placement, axis, tuple(coord)).all_reduce(flat, op="sum", async_op=True)
        _IN_FLIGHT[id(flat)] = (flat, work)
    return flat


def _wait(flat: np.ndarray, shapes) -> tuple:
    hit = _IN_FLIGHT.pop(id(flat), None)
    total = flat if hit is None else hit[1].wait()  # no all-reduce in flight: a group of one
    out = []
    o = 0
    for s in shapes:
        n = int(np.prod(s, dtype=np.int64))
        out.append(total[o : o + n].reshape(s))
        o += n
    return tuple(out)


def _samples(op: str) -> Iterator:
    import flow
    from flow_dist.placement import placement

    p = placement("cpu", [0])
    a, b = flow.tensor(np.arange(6.0).reshape(2, 3)), flow.tensor(np.arange(4.0))
    if op == START:
        yield flow.testing.SampleInput(args=([a, b],), kwargs=dict(placement=p, axis=0, coord=(0,)))
    else:
        yield flow.testing.SampleInput(args=(flow.tensor(np.arange(10.0)),), kwargs=dict(shapes=((2, 3), (4,))))


def register(registry) -> None:
    registry.register_op(
        schema(START, ["*xs"], [Attr("placement"), Attr("axis", int), Attr("coord", tuple)], dtypes=ANY),
        meta=_start_meta,
        samples=lambda: _samples(START),
        collective=True,
        no_error_samples="made by the gradient_buckets graph pass, never by users",
        doc="copies gradients into one buffer and starts its all-reduce (flow-dist gradient buckets)",
    )
    registry.register_op(
        schema(WAIT, ["flat"], [Attr("shapes", tuple)], outputs=("grads",), dtypes=ANY),
        meta=_wait_meta,
        samples=lambda: _samples(WAIT),
        collective=True,
        no_error_samples="made by the gradient_buckets graph pass, never by users",
        doc="waits for a bucket's all-reduce and gives each gradient back (flow-dist gradient buckets)",
    )


def register_kernels(registry) -> None:
    registry.register_kernel(START, "cpu", _start)
    registry.register_kernel(WAIT, "cpu", _wait)


# -- the pass -----------------------------------------------------------------------------------
def _is_grad_all_reduce(n, users, roots) -> bool:
    if n.name != BOXING:
        return False
    a = n.attrs
    if a["sbp"][a["axis"]].__class__ is not PartialSum or a["to"].__class__ is not Broadcast:
        return False
    out = n.outputs[0]
    us = users.get(out.id, ())
    return bool(us) and out.id not in roots and all(u.tags.get("phase") == "optimizer" for u in us)


def gradient_buckets(ir, config):
    limit = float(config.options.get(f"{PASS}.bucket_size_mb", DEFAULT_MB)) * 2**20
    if limit <= 0:
        raise OpError(PASS, f"gradient_buckets.bucket_size_mb must be positive, got {limit / 2**20}")
    users = ir.users()
    roots = {v.id for v in ir.live_roots()}
    groups: dict = {}  # (placement, axis, coord, dtype) -> [[boxing nodes of one bucket], ...]
    for n in ir.nodes:
        if not _is_grad_all_reduce(n, users, roots):
            continue
        a = n.attrs
        x = n.inputs[0]
        key = (a["placement"], a["axis"], tuple(a["coord"]), x.dtype)
        buckets = groups.setdefault(key, [[0]])  # each bucket: [bytes, nodes...]
        if buckets[-1][0] >= limit:  # full: as DDP, a bucket closes once it reaches the size
            buckets.append([0])
        buckets[-1][0] += x.numel() * x.dtype.itemsize
        buckets[-1].append(n)
    if not groups:
        return ir
    pos = {n.id: i for i, n in enumerate(ir.nodes)}
    mapping: dict = {}
    dead: set = set()
    for (placement, axis, coord, _), buckets in groups.items():
        for _, *bucket in buckets:
            last = max(bucket, key=lambda b: pos[b.id])
            first_user = min((u for b in bucket for u in users[b.outputs[0].id]), key=lambda u: pos[u.id])
            if pos[first_user.id] < pos[last.id]:  # an update reads a gradient before the bucket is whole
                continue
            start = ir.emit(
                START,
                [[b.inputs[0] for b in bucket]],
                dict(placement=placement, axis=axis, coord=coord),
                after=last,
                scope=last.scope,
                tags={"phase": "backward", "bucket_of": len(bucket)},
            )
            wait = ir.emit(
                WAIT,
                [start.outputs[0]],
                dict(shapes=tuple(b.inputs[0].shape for b in bucket)),
                before=first_user,
                scope=first_user.scope,
                tags={"phase": "optimizer"},
            )
            for b, v in zip(bucket, wait.outputs):
                mapping[b.outputs[0].id] = v
                dead.add(b.id)
    ir.replace_uses(mapping)
    ir.remove_nodes(dead)
    return ir


def register_pass(registry) -> None:
    registry.register_pass(PASS, gradient_buckets, after=("dce",))
