"""Saved activations of one training step: what forward keeps for backward, in flow's graph and in PyTorch.

flow's graph (:func:`graph_saved_bytes`, on the compiled IR, ``graph._latest.ir``): the values made
by forward-phase nodes and read by backward-phase nodes. A node's phase is its ``tags["phase"]``,
except that a node tagged forward that reads a backward value is backward (the tracer tags the
autograd engine's gradient sums "forward"; the fusion pass decides phases the same way). A view
(an op of ``ALIASING_OPS``: reshape, permute, split, expand ...) or an in-place result shares its
input's buffer, so each saved value is followed to the buffer it lives in and each buffer counts
once, at its full size; buffers of parameters, states, inputs and constants are not activations
and count zero. Casts of parameters that the backward reads (AMP's bf16 weights) are buffers of
the step and count, reported apart as ``param_copies``.

PyTorch (:class:`TorchSavedTensors`): ``torch.autograd.graph.saved_tensors_hooks`` around forward
and loss; the sum of the unique storages (``untyped_storage().data_ptr()``, size ``nbytes()``) of
the saved tensors, less those of the parameters, buffers and inputs (autocast's bf16 weight copies
count, as in flow).
"""

from __future__ import annotations


def _nbytes(v) -> int:
    import numpy as np

    return v.numel() * np.dtype(v.dtype.np).itemsize


def node_phases(ir) -> dict:
    """node id -> "forward" / "backward" / "optimizer", by tag and data flow."""
    phase: dict = {}
    for n in ir.nodes:
        ph = n.tags.get("phase", "forward")
        if ph == "forward" and any(
            v.producer is not None and phase.get(v.producer.id) == "backward" for v in n.input_values()
        ):
            ph = "backward"
        phase[n.id] = ph
    return phase


def buffer_of(v):
    """The value whose buffer ``v`` lives in: followed through views and in-place results."""
    from flow.graph.lowering.plan import ALIASING_OPS

    while v.kind == "node":
        p = v.producer
        flat = list(p.input_values())
        if p.name in ALIASING_OPS and flat:
            v = flat[0]
        elif v.index in p.inplace and p.inplace[v.index] < len(flat):
            v = flat[p.inplace[v.index]]
        else:
            break
    return v


def graph_saved_bytes(ir) -> dict:
    """The buffers the forward of a traced step keeps for its backward (see the module docstring):
    ``total`` bytes, ``by_dtype``, ``by_op`` (by the op that made the buffer), ``param_copies`` (bytes
    of casts of parameters and other states), ``buffers`` (how many) and ``views_of_states`` (saved views of
    parameters/inputs, counted zero)."""
    phase = node_phases(ir)
    saved: dict = {}
    views_of_states = 0
    for n in ir.nodes:
        if phase[n.id] != "backward":
            continue
        for v in n.input_values():
            if v.kind != "node" or phase.get(v.producer.id) != "forward":
                continue
            b = buffer_of(v)
            if b.kind != "node":
                views_of_states += 1
                continue
            saved[b.id] = b
    by_dtype: dict = {}
    by_op: dict = {}  # "op dtype" of the node that made the buffer -> bytes: where the saved memory comes from
    copies = 0
    for b in saved.values():
        nb = _nbytes(b)
        by_dtype[b.dtype.name] = by_dtype.get(b.dtype.name, 0) + nb
        key = f"{b.producer.name} {b.dtype.name}"
        by_op[key] = by_op.get(key, 0) + nb
        if b.producer.name == "cast" and buffer_of(next(b.producer.input_values())).kind == "state":
            copies += nb
    return {
        "total": sum(by_dtype.values()),
        "by_dtype": by_dtype,
        "by_op": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
        "param_copies": copies,
        "buffers": len(saved),
        "views_of_states": views_of_states,
    }


class TorchSavedTensors:
    """``saved_tensors_hooks`` that sum the unique storages saved for backward, less ``exclude``'s."""

    def __init__(self, torch, exclude) -> None:
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self.skip = {t.untyped_storage().data_ptr() for t in exclude}
        self.seen: dict = {}  # storage pointer -> (bytes, dtype); a saved tensor stays alive, so no pointer is reused

    def _pack(self, t):
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in self.skip and ptr not in self.seen and s.nbytes():
            self.seen[ptr] = (s.nbytes(), str(t.dtype).replace("torch.", ""))
        return t

    def __enter__(self):
        return self.hooks.__enter__()

    def __exit__(self, *exc):
        return self.hooks.__exit__(*exc)

    def report(self) -> dict:
        by_dtype: dict = {}
        for nb, dt in self.seen.values():
            by_dtype[dt] = by_dtype.get(dt, 0) + nb
        return {"total": sum(by_dtype.values()), "by_dtype": by_dtype, "buffers": len(self.seen)}
