"""ZeRO in a compiled step: the graph pass ``zero`` (``graph.config.enable_zero``, OneFlow's).

On global tensors ZeRO is an SBP change on the data-parallel axis. A data-parallel parameter is
broadcast (B) and its gradient arrives as a partial sum (P) that an ``sbp_boxing`` node all-reduces
(P -> B) before the update reads it. For each broadcast parameter of at least ``shard_min_size``
elements the pass rewrites the step (stage 1):

- the gradient's all-reduce becomes a reduce-scatter (P -> S(0)): each process gets the rows of
  the summed gradient it updates;
- the parameter enters the update as its piece (B -> S(0): a slice, no communication), and the
  update runs on the pieces;
- the parameter's optimizer states are laid out S(0): each process holds 1/n of them. The pass
  gives them that layout through :func:`flow.optim.set_state_layout` (a
  :class:`ZeroStateLayout`), so the optimizer's flat buffers shrink to the pieces (its states are
  carried over, each process keeping its rows) and the compiled step binds the pieces;
- the updated piece is all-gathered (S(0) -> B) into the new parameter.

Once the states are laid out S(0), a step traced again (a new input shape) goes through the
updates' SBP rule (:mod:`flow_dist.rules.update`), which runs the update on the rows itself; its
gradient is then all-reduced when accumulated and sliced for the update, which the pass fuses into
one reduce-scatter.

Each gradient's reduce-scatter sits where backward completes the gradient, and the update reads
only its rows (``param.grad`` of a compiled step is not filled). The reduce-scatters then go in
buckets (:mod:`flow_dist.zero.buckets`, ``zero.bucket_size_mb``): one collective per bucket, after
its last gradient. A bucket keeps its gradients whole until it closes, which is where the stages
differ: stage 1 uses the bucket size as given (the fewest collectives), stage 2 caps it at 1/n of
the gradients' bytes, so the whole gradients alive at any time stay within 1/n of them and the
step's peak is lower. Stage 3 is refused. Only parameters on a 1-d placement are sharded (on N-d
placements the data-parallel axis is not known here; they keep their all-reduce).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from flow.errors import FlowError
from flow.graph.meta_check import mark_node_checked
from flow.ops.optim import UPDATE_OPS
from flow.optim import StateLayout, set_state_layout, state_layout
from flow_dist.boxing import OP_NAME as BOXING
from flow_dist.global_array import GlobalArray
from flow_dist.layout import local_shape, local_slice
from flow_dist.sbp import Broadcast, PartialSum, Split, broadcast, split
from flow_dist.zero.buckets import bucket_reduce_scatters, bucket_size_bytes

if TYPE_CHECKING:
    from flow.graph.config import GraphConfig
    from flow.graph.ir import GraphIR

__all__ = ["PASS", "ZeroStateLayout", "register_pass", "zero"]

PASS = "zero"


class ZeroStateLayout(StateLayout):
    """The optimizer states of a broadcast parameter split on dim 0 of a 1-d placement (S(0))."""

    def __init__(self, placement, shape: tuple, coord: tuple) -> None:
        self.placement = placement
        self.shape = tuple(shape)  # the parameter's (logical) shape
        self.coord = tuple(coord)
        self.sbp = (split(0),)
        super().__init__(local_shape(self.shape, placement, self.sbp, self.coord))

    def wrap(self, view) -> GlobalArray:
        return GlobalArray(view, self.placement, self.sbp, self.shape, self.coord)

    def from_param(self, arr) -> np.ndarray:
        arr = np.asarray(arr)
        if tuple(arr.shape) != self.shape:
            return super().from_param(arr)
        return arr[local_slice(self.shape, self.placement, self.sbp, self.coord)]

    def same_as(self, other: object) -> bool:
        """The same layout (the same placement, shape and coordinate): no rebuild of the optimizer."""
        return (
            isinstance(other, ZeroStateLayout)
            and other.placement == self.placement
            and other.shape == self.shape
            and other.coord == self.coord
        )


def _settings(config) -> dict:
    z = config.zero or {}
    stage = z.get("stage", 1)
    if stage == 3:
        raise FlowError(
            "graph.config.enable_zero(stage=3): sharding the parameters between steps is not done in graph "
            "mode; use stage 1 or 2 (or flow_dist.zero.ZeroRedundancyOptimizer(stage=3) in eager mode)"
        )
    return z


def _flat_slots(node) -> list:
    """``[(outer index, inner index or None)]`` of the node's tensor inputs, flattened as the update
    ops number them (params, grads, the states name-major, then the scalars)."""
    slots = []
    for i, a in enumerate(node.inputs):
        if a.__class__ is list:
            slots.extend((i, j) for j in range(len(a)))
        else:
            slots.append((i, None))
    return slots


def _get(node, slot):
    i, j = slot
    return node.inputs[i] if j is None else node.inputs[i][j]


def _put(node, slot, v) -> None:
    i, j = slot
    if j is None:
        node.inputs[i] = v
    else:
        node.inputs[i][j] = v


def _shardable(param, min_size: int) -> bool:
    pl, sbp = param.attrs.get("placement"), param.attrs.get("sbp")
    if pl is None or sbp is None or pl.ndim != 1 or pl.hierarchy[0] < 2:
        return False
    return sbp[0].__class__ is Broadcast and param.ndim >= 1 and param.numel() >= min_size


def _set_layout(v, shape: tuple, sbp: tuple) -> None:
    v.shape = tuple(shape)
    v.attrs["sbp"] = sbp


def zero(ir: GraphIR, config: GraphConfig) -> GraphIR:
    """The ``zero`` pass (see the module docstring)."""
    z = _settings(config)
    min_size = int(z.get("shard_min_size", 1024))
    limit = bucket_size_bytes(config)
    users = ir.users()
    reduce_scatters = []  # the gradients' reduce-scatters, for the buckets
    for node in list(ir.nodes):
        if node.name not in UPDATE_OPS or node.tags.get("phase") != "optimizer":
            continue
        slots = _flat_slots(node)
        n = len(node.inputs[0])
        n_states = len(node.outputs) - n
        for k in range(n):
            param = _get(node, slots[k])
            if _is_box(param.producer, Broadcast, Split) and param.producer.inputs[0].kind == "state":
                # traced with the states already laid out S(0) (a recompile): the update rule ran it on the
                # rows; its gradient was all-reduced and then sliced, which is one reduce-scatter
                reduce_scatters.extend(_fuse_grad(ir, _get(node, slots[n + k]), users))
                continue
            spec = ir.state_specs.get(param.id) if param.kind == "state" else None
            if spec is None or spec.tensor is None or not _shardable(param, min_size):
                continue
            reduce_scatters.extend(_shard(ir, node, slots, n, n_states, k, param, spec.tensor, users))
    bucket_reduce_scatters(ir, reduce_scatters, int(z.get("stage", 1)), limit)
    return ir


def _is_box(node, frm, to) -> bool:
    return (
        node is not None
        and node.name == BOXING
        and node.attrs["sbp"][node.attrs["axis"]].__class__ is frm
        and node.attrs["to"].__class__ is to
    )


def _fuse_grad(ir, grad, users) -> list:
    """An all-reduce (P -> B) read only by a slice (B -> S(0)) becomes one reduce-scatter (P -> S(0)),
    which is returned (in a list: none when there is nothing to fuse)."""
    cut = grad.producer
    if not _is_box(cut, Broadcast, Split):
        return []
    whole = cut.inputs[0]
    red = whole.producer
    if not _is_box(red, PartialSum, Broadcast) or len(users.get(whole.id, ())) != 1 or whole.id in _roots(ir):
        return []
    red.attrs["to"] = cut.attrs["to"]
    _set_layout(whole, grad.shape, tuple(grad.attrs.get("sbp", (cut.attrs["to"],))))
    mark_node_checked(red)
    ir.replace_uses({grad.id: whole})
    ir.remove_nodes({cut.id})
    return [red]


def _roots(ir) -> set:
    return {v.id for v in ir.live_roots()}


def _shard(ir, node, slots, n, n_states, k, param, tensor, users) -> list:
    placement, shape = param.attrs["placement"], tuple(param.shape)  # broadcast: the piece is the whole
    coord = tuple(tensor._data.coord)  # this process's place in the placement
    s0 = (split(0),)
    piece = local_shape(shape, placement, s0, coord)
    box = dict(placement=placement, axis=0, shape=shape, coord=coord)
    # the gradient: its all-reduce becomes a reduce-scatter when the update is its only reader, else a slice
    grad = _get(node, slots[n + k])
    g_node = grad.producer
    if (
        g_node is not None
        and g_node.name == BOXING
        and g_node.attrs["sbp"][0].__class__ is PartialSum
        and len(users.get(grad.id, ())) == 1
    ):
        g_node.attrs["to"] = split(0)
        _set_layout(grad, piece, s0)
        mark_node_checked(g_node)
        made = [g_node]  # a gradient's own reduce-scatter: it can go in a bucket
    else:
        made = []  # the whole reduced gradient is read elsewhere too: only sliced here
        g_node = ir.emit(BOXING, [grad], dict(box, sbp=tuple(grad.attrs["sbp"]), to=split(0)), before=node)
        _set_layout(g_node.outputs[0], piece, s0)
        _put(node, slots[n + k], g_node.outputs[0])
    # the parameter enters as its rows (B -> S(0) is a slice)
    p_node = ir.emit(BOXING, [param], dict(box, sbp=(broadcast,), to=split(0)), before=node, tags={})
    _set_layout(p_node.outputs[0], piece, s0)
    _put(node, slots[k], p_node.outputs[0])
    # the states are laid out S(0): the optimizer's buffers hold this process's rows
    lay = state_layout(tensor)
    if not (isinstance(lay, ZeroStateLayout) and lay.same_as(ZeroStateLayout(placement, shape, coord))):
        set_state_layout(tensor, ZeroStateLayout(placement, shape, coord))
    for j in range(n_states // n):
        _set_layout(_get(node, slots[2 * n + j * n + k]), piece, s0)
        _set_layout(node.outputs[n + j * n + k], piece, s0)
    # the updated rows are all-gathered into the new parameter
    new = node.outputs[k]
    _set_layout(new, piece, s0)
    mark_node_checked(node)
    gather = ir.emit(BOXING, [new], dict(box, sbp=s0, to=broadcast), after=node, tags={"phase": "optimizer"})
    whole = gather.outputs[0]
    whole.attrs.update(placement=placement, sbp=(broadcast,))

    def swap(v):
        return whole if v is new else v

    for m in ir.nodes:
        if m is not gather:
            m.map_inputs(swap)
    ir.outputs = [swap(v) for v in ir.outputs]
    ir.updates = [(s, swap(v)) for s, v in ir.updates]
    return made


def register_pass(registry) -> None:
    """Register the ``zero`` pass (off unless ``graph.config.enable_zero``), before the gradient buckets."""
    from flow.graph.optim_trace import PIECE_OPS

    PIECE_OPS.add(BOXING)  # an update of a parameter's rows is still that parameter's update
    # before the gradient buckets: the all-reduces it turns into reduce-scatters are not bucketed
    registry.register_pass(PASS, zero, after=("dce",), before=("gradient_buckets",), enabled_by_default=False)
