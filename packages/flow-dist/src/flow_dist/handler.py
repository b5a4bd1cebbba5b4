"""How an op runs on global tensors: pick an SBP signature, box the inputs, run on the pieces.

:func:`global_handler` is the handler of the global array kind (:mod:`flow.array_kinds`). For a
call with global inputs it

1. checks that every global input has the same placement (local 0-d tensors and numbers are
   constants, the same on every rank; any other local tensor is an error);
2. runs the op's meta rule on the logical shapes (so bad input gets the op's own error);
3. per placement axis, asks the op's rule (:mod:`flow_dist.rules`) for candidate signatures and
   takes the cheapest by :func:`flow_dist.boxing.cost` (an op without a rule: everything
   broadcast, with a one-time warning);
4. boxes the inputs, runs the op (or the signature's local function) on the local pieces without
   autograd, wraps the pieces as global outputs and checks their shapes against the signature;
5. records autograd on the global call, so the gradient formula's ops come back here.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from flow import array_kinds, interceptors
from flow.graph.symbolic import SymbolicArray
from flow_dist import boxing
from flow_dist.errors import GlobalTensorError
from flow_dist.explain import no_signature
from flow_dist.global_array import GlobalArray
from flow_dist.layout import local_shape, local_slice
from flow_dist.rules import RuleContext, Sig, as_sig, rule_for
from flow_dist.sbp import Split, broadcast, partial_sum

__all__ = ["global_handler", "run_with_signature", "implicit_broadcast", "LocalCall", "warned_ops"]

_WARNED: set = set()
_IMPLICIT = [0]  # > 0: local tensors among global ones count as broadcast (gradient formulas, users)


@contextlib.contextmanager
def implicit_broadcast():
    """Within this block a local tensor mixed with global ones counts as broadcast: the same whole
    value on every rank (as in PyTorch DTensor's ``implicit_replication``). Gradient formulas run
    in it, since they make helper tensors (zeros of an input's shape) with plain factories."""
    _IMPLICIT[0] += 1
    try:
        yield
    finally:
        _IMPLICIT[0] -= 1


def warned_ops() -> set:
    """The ops that ran without an SBP rule (each warned about once)."""
    return set(_WARNED)


def _flatten(op, inputs):
    """The tensor slots of a call: one per tensor argument (lists flattened, None kept)."""
    from flow import Tensor

    slots, lengths = [], []
    scalars = False
    for x in inputs:
        if isinstance(x, Tensor) or x is None:
            slots.append(x)
        elif x.__class__ in (list, tuple):
            lengths.append(len(x))
            slots.extend(x)
        else:
            scalars = True
    # optional tensor inputs left out of the call: absent (None) slots, so rules see every input
    slots.extend([None] * (len(op.schema.inputs) - len(inputs)))
    return slots, lengths, scalars


def _rebuild(inputs, new_slots):
    from flow import Tensor

    it = iter(new_slots)
    out = []
    for x in inputs:
        if isinstance(x, Tensor) or x is None:
            out.append(next(it))
        elif x.__class__ in (list, tuple):
            out.append([next(it) for _ in x])
        else:
            out.append(x)
    return tuple(out)


def _meta_outputs(op, inputs, attrs) -> list:
    m = op.meta(*[x.item() if isinstance(x, np.generic) else x for x in inputs], **attrs)
    if isinstance(m, (tuple, list)):
        return list(m)
    return [m]


class LocalCall:
    """What a signature's ``local`` function gets: ``run`` an op on local tensors, the pieces'
    ``bounds`` and ``all_sum`` of a number over the placement."""

    def __init__(self, ctx: RuleContext, placement, coord, slots_nd: list, shapes: list) -> None:
        self.ctx = ctx
        self.placement = placement
        self.coord = coord
        self._nd = slots_nd
        self._shapes = shapes

    def run(self, op, inputs, attrs=None):
        return interceptors.run_op(op, tuple(inputs), attrs or {})

    def bounds(self, slot: int) -> tuple:
        """The slices of the logical tensor in ``slot`` that this rank's piece holds."""
        return local_slice(self._shapes[slot], self.placement, self._nd[slot], self.coord)

    def all_sum(self, value, slot: int, dims: tuple | None = None):
        """``value`` (a local tensor, of one shape on the ranks summed over) summed over the ranks
        holding different pieces of ``slot``'s tensor (ranks holding copies along a broadcast axis
        count once): a boxing of the value as a partial sum along the split axes. ``dims``: only
        the axes that split one of these dims of the tensor (a per-channel sum over the batch
        split of a placement axis, not over the channel split of another)."""
        nd = tuple(
            partial_sum if s.__class__ is Split and (dims is None or s.dim in dims) else broadcast
            for s in self._nd[slot]
        )
        if all(s is broadcast for s in nd):
            return value
        g = GlobalArray(value._data, self.placement, nd, tuple(value.shape), self.coord)
        whole = boxing.box(g, (broadcast,) * len(nd))
        return array_kinds.wrap(whole.local, value.device, dtype=value.dtype)


def _assess(sig, cur, shapes, itemsizes, n, constants, frozen):
    """``(bytes sent, conversions, None)`` to run ``sig`` from the current layouts, or
    ``(None, None, why not)``."""
    total = 0.0
    conversions = 0
    for k, want in enumerate(sig.ins):
        have = cur[k]
        if have is None or k in constants or want is None:
            continue
        if want.__class__ is Split and not 0 <= want.dim < len(shapes[k]):
            return None, None, f"input {k} has no dim {want.dim} to split"
        if want != have:
            if k in frozen:
                return None, None, f"input {k} is written in place and cannot be converted"
            part = itemsizes[k]
            for d in shapes[k]:
                part *= d
            total += boxing.cost_1d(have, want, part, n)
            conversions += 1
    return total, conversions, None


def _choose(op, candidates, cur, shapes, itemsizes, placement, axis, constants, frozen):
    n = placement.hierarchy[axis]
    best = None
    for sig in candidates:
        if len(sig.ins) != len(cur):
            raise GlobalTensorError(
                f"{op.name}: its SBP rule gave a signature with {len(sig.ins)} inputs for {len(cur)} tensor arguments"
            )
        total, conversions, _ = _assess(sig, cur, shapes, itemsizes, n, constants, frozen)
        if total is not None and (best is None or (total, conversions) < best[0]):
            best = ((total, conversions), sig)
    return None if best is None else best[1]


def global_handler(op, inputs: tuple, attrs: dict):
    return _handle(op, inputs, attrs, None)


def run_with_signature(op, inputs: tuple, attrs: dict, signatures: list):
    """Run ``op`` on global ``inputs`` with the given signature per placement axis (instead of the
    cheapest): what the rule-table parity check (:mod:`flow_dist.testing`) exercises."""
    from flow.registry import REGISTRY

    return _handle(REGISTRY.ops[op] if isinstance(op, str) else op, tuple(inputs), dict(attrs), list(signatures))


def _handle(op, inputs: tuple, attrs: dict, force):
    slots, lengths, scalars = _flatten(op, inputs)
    placement = None
    constants = []
    device = None
    local = []
    for k, t in enumerate(slots):
        if t is None:
            continue
        d = t._data
        if d.__class__ is GlobalArray:
            if placement is None:
                placement, device = d.placement, t.device
            elif d.placement != placement:
                raise GlobalTensorError(
                    f"{op.name}: global tensors of different placements ({placement!r} and {d.placement!r}); "
                    "convert one with to_global(placement=...) first"
                )
        elif getattr(d, "ndim", None) == 0:
            constants.append(k)  # a local 0-d tensor (a learning rate; symbolic while a graph is traced)
        else:
            local.append(k)
    if placement is None:
        return NotImplemented
    if local:
        if not _IMPLICIT[0]:
            k = local[0]
            raise GlobalTensorError(
                f"{op.name}: tensor argument {k} is a local tensor of shape {tuple(slots[k].shape)} among global "
                "ones; make it global with to_global(placement, sbp) (only 0-d local tensors count as constants; "
                "inside flow_dist.implicit_broadcast() local tensors count as broadcast)"
            )
        slots = list(slots)
        for k in local:  # the same whole value on every rank: broadcast
            t = slots[k]
            g = GlobalArray(t._data, placement, (broadcast,) * placement.ndim, tuple(t.shape))
            slots[k] = array_kinds.wrap(g, t.device, dtype=t.dtype)
        inputs = _rebuild(inputs, slots[: len(slots) - (len(op.schema.inputs) - len(inputs))])
    if op.dynamic_shape:  # the output shape depends on the data (nonzero): on the whole, everywhere
        return _run_whole(op, inputs, attrs, slots, placement, device, constants)
    out_metas = _meta_outputs(op, inputs, attrs)
    out_shapes = [None if m is None else tuple(m.shape) for m in out_metas]
    shapes = [None if t is None else tuple(t.shape) for t in slots]
    itemsizes = [0 if t is None else t._data.dtype.itemsize if hasattr(t._data.dtype, "itemsize") else 4 for t in slots]
    rule = rule_for(op.name)
    nd_in = []
    for k, t in enumerate(slots):
        nd_in.append(None if t is None or k in constants else t._data.sbp)
    frozen = _frozen_slots(op, attrs, lengths)
    chosen: list[Sig] = []
    if force is not None:
        chosen = force
    for axis in range(placement.ndim if force is None else 0):
        cur = [None if s is None else s[axis] for s in nd_in]
        ctx = RuleContext(op, attrs, shapes, out_shapes, placement.hierarchy[axis], cur, scalars, constants, lengths)
        if rule is None:
            cands = [Sig(tuple(None if c is None else broadcast for c in cur), (broadcast,) * len(out_shapes))]
            if op.name not in _WARNED:
                _WARNED.add(op.name)
                warnings.warn(
                    f"flow-dist: op '{op.name}' has no SBP rule; its global inputs are converted to broadcast "
                    "and it runs on the whole tensor on every rank (add a rule to the 'sbp' table)",
                    stacklevel=3,
                )
        else:
            cands = [as_sig(c) for c in rule(ctx)]
        sig = _choose(op, cands, cur, shapes, itemsizes, placement, axis, constants, frozen)
        if sig is None:
            assessed = [
                (sig,) + _assess(sig, cur, shapes, itemsizes, placement.hierarchy[axis], constants, frozen)
                for sig in cands
            ]
            raise no_signature(op, nd_in, assessed, placement, axis)
        chosen.append(sig)
    return _run(op, inputs, attrs, slots, nd_in, chosen, placement, device, out_metas, constants)


def _run_whole(op, inputs, attrs, slots, placement, device, constants):
    """An op whose output shape depends on the data: every input boxed to broadcast, the op run on
    the whole on every rank, the outputs broadcast with the shapes it gave (no meta rule to ask)."""
    from flow import Tensor, no_grad

    whole = (broadcast,) * placement.ndim
    local = []
    for k, t in enumerate(slots):
        if t is None or k in constants:
            local.append(t)
        else:
            local.append(array_kinds.wrap(boxing.box(t._data, whole).local, t.device, dtype=t.dtype))
    with no_grad():
        out = interceptors.run_op(
            op, _rebuild(inputs, local[: len(local) - (len(op.schema.inputs) - len(inputs))]), attrs
        )
    single = not isinstance(out, (tuple, list))
    wrapped = []
    for o in (out,) if single else out:
        if o is None or not isinstance(o, Tensor):
            wrapped.append(o)
            continue
        g = GlobalArray(o._data, placement, whole, tuple(o._data.shape))
        wrapped.append(array_kinds.wrap(g, device, dtype=o.dtype))
    result = wrapped[0] if single else tuple(wrapped)
    array_kinds.record(
        op, inputs, attrs, result if single else tuple(w for w in wrapped if w is not None), around=implicit_broadcast
    )
    return result


def _frozen_slots(op, attrs, lengths) -> set:
    """Slots an in-place op writes into: they must not be converted (a copy would take the write)."""
    if not attrs.get("inplace"):
        return set()
    n = lengths[0] if lengths else 0
    total = sum(lengths)
    return {k for k in range(total) if not n <= k < 2 * n}


def _run(op, inputs, attrs, slots, nd_in, chosen, placement, device, out_metas, constants):
    from flow import Tensor, no_grad

    want = []
    for k, have in enumerate(nd_in):
        if have is None:
            want.append(None)
        else:
            want.append(tuple(have[a] if chosen[a].ins[k] is None else chosen[a].ins[k] for a in range(len(chosen))))
    local_slots = []
    coord = None
    for k, t in enumerate(slots):
        if t is None or k in constants:
            local_slots.append(t)
            continue
        g = boxing.box(t._data, want[k])
        coord = g.coord
        lt = array_kinds.wrap(g.local, t.device, dtype=t.dtype)
        local_slots.append(lt)
    local_inputs = _rebuild(inputs, local_slots)
    out_nd = [tuple(chosen[a].outs[j] for a in range(len(chosen))) for j in range(len(out_metas))]
    out_local_shapes = [
        None if m is None else local_shape(tuple(m.shape), placement, out_nd[j], coord) for j, m in enumerate(out_metas)
    ]
    local_fn = next((s.local for s in chosen if s.local is not None), None)
    la = next((s.local_attrs for s in chosen if s.local_attrs is not None), None)
    with no_grad():
        if local_fn is not None:
            ctx = RuleContext(
                op,
                attrs,
                [None if t is None else tuple(t.shape) for t in slots],
                [None if m is None else tuple(m.shape) for m in out_metas],
                0,
                [],
                False,
                constants,
                [],
            )
            call = LocalCall(ctx, placement, coord, want, [None if t is None else tuple(t.shape) for t in slots])
            out = local_fn(call, local_inputs, attrs)
        else:
            local_attrs = attrs
            if la is not None:
                local_attrs = la(attrs, [None if t is None else tuple(t.shape) for t in local_slots], out_local_shapes)
            out = interceptors.run_op(op, local_inputs, local_attrs)
    single = not isinstance(out, (tuple, list))
    outs = (out,) if single else tuple(out)
    wrapped = []
    for j, o in enumerate(outs):
        if o is None:
            wrapped.append(None)
            continue
        if not isinstance(o, Tensor):
            o = array_kinds.wrap(np.asarray(o), device)
        m = out_metas[j]
        expect = out_local_shapes[j]
        if tuple(o._data.shape) != tuple(expect):
            raise GlobalTensorError(
                f"{op.name}: the local piece of output {j} has shape {tuple(o._data.shape)}, but its signature "
                f"({_fmt(out_nd[j])} of logical shape {tuple(m.shape)}) needs {tuple(expect)}: "
                "the op's SBP rule is wrong"
            )
        ga = GlobalArray(o._data, placement, out_nd[j], tuple(m.shape), coord)
        if o._data.__class__ is SymbolicArray:  # traced: the graph's value shows the layout
            o._data.value.attrs.update(ga.layout())
        wrapped.append(array_kinds.wrap(ga, device, dtype=o.dtype))
    result = wrapped[0] if single else tuple(wrapped)
    array_kinds.record(
        op, inputs, attrs, result if single else tuple(w for w in wrapped if w is not None), around=implicit_broadcast
    )
    return result


def _fmt(nd) -> str:
    from flow_dist.sbp import short

    return "(" + ", ".join(short(s) for s in nd) + ")"
