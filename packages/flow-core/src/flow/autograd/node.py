"""Autograd nodes: one per recorded op call, linking outputs back to inputs.

A node is also the ``ctx`` an op's gradient receives: ``ctx.inputs``,
``ctx.outputs``, ``ctx.attrs``, ``ctx.input_shape(i)``, ``ctx.needs_input_grad``.
Saved tensors are checked against their version counters so an in-place
change after saving is reported instead of silently giving wrong gradients.
"""

from __future__ import annotations

from flow.errors import AutogradError

Tensor = None  # set by flow/__init__ (import cycle)

_FREED = "freed"
_NO_EDGE = (None, 0)
_NO_VERSIONS: list = []  # shared by nodes that save nothing; never appended to
_new = object.__new__


class Node:
    """The record of one op call in the autograd graph.

    ``next[i]`` is where input ``i``'s gradient goes: ``(node, output index)``,
    ``(leaf tensor, -1)``, or ``(None, 0)`` when it needs none; ``in_meta[i]``
    is that input's ``(shape, dtype, device)``.
    """

    __slots__ = (
        "op",
        "attrs",
        "next",
        "in_meta",
        "saved_in",
        "saved_out",
        "versions",
        "n_out",
        "out_meta",
        "out_hooks",
        "fctx",
        "__weakref__",
    )

    @staticmethod
    def record(op, inputs: tuple, attrs: dict, outs: tuple) -> "Node":
        """Link ``outs`` to ``inputs`` through a new node (the dispatcher calls this when grad is on)."""
        n = _new(Node)
        n.op = op
        n.attrs = attrs
        save = op.save
        if save == "none":
            save_in = False
            versions = _NO_VERSIONS
        else:
            save_in = save != "outputs"  # "both" or "inputs"
            versions = []
        if len(inputs) == 2 and isinstance(x := inputs[0], Tensor) and isinstance(y := inputs[1], Tensor):
            # two tensors (binary arithmetic, most recorded ops): the loop below unrolled; a recorded
            # add is about 3% faster
            if x._base is not None and x.grad_fn is not None and x._version[0] != x._view_ver:
                _refresh_view(x)
            if y._base is not None and y.grad_fn is not None and y._version[0] != y._view_ver:
                _refresh_view(y)
            nxt = [
                _NO_EDGE if not x._requires_grad else (x, -1) if x.grad_fn is None else (x.grad_fn, x._out_idx),
                _NO_EDGE if not y._requires_grad else (y, -1) if y.grad_fn is None else (y.grad_fn, y._out_idx),
            ]
            meta = [(x._data.shape, x.dtype, x.device), (y._data.shape, y.dtype, y.device)]
            if save_in:
                versions.append((x._version, x._version[0]))
                versions.append((y._version, y._version[0]))
            rest = ()
        else:
            nxt = []
            meta = []
            rest = inputs
        for x in rest:
            if isinstance(x, Tensor):
                meta.append((x._data.shape, x.dtype, x.device))
                if x._base is not None and x.grad_fn is not None and x._version[0] != x._view_ver:
                    _refresh_view(x)  # its storage was written after its history was recorded
                # where the gradient goes: nowhere, a leaf's .grad, or the node that made x
                nxt.append(
                    _NO_EDGE if not x._requires_grad else (x, -1) if x.grad_fn is None else (x.grad_fn, x._out_idx)
                )
                if save_in:
                    versions.append((x._version, x._version[0]))
            elif x.__class__ is list or x.__class__ is tuple:
                for t in x:
                    _edge(t, nxt, meta)
                    if save_in:
                        versions.append((t._version, t._version[0]))
            else:  # scalars and absent optional inputs get no gradient
                nxt.append(_NO_EDGE)
                meta.append(None)
        n.next = nxt
        n.in_meta = meta
        n.saved_in = inputs if save_in else None
        n.out_hooks = None
        n.fctx = None
        if len(outs) == 1:
            o = outs[0]
            n.n_out = 1
            n.out_meta = None
            if save == "both" or save == "outputs":
                n.saved_out = (o._data,)
                versions.append((o._version, o._version[0]))
            else:
                n.saved_out = None
            n.versions = versions
            if o.dtype.is_floating_point:
                o._requires_grad = True
                o.grad_fn = n
                o._out_idx = 0
            return n
        n.n_out = len(outs)
        if save == "both" or save == "outputs":
            keep = op.saved_outputs
            if keep is None:
                n.saved_out = tuple([o._data for o in outs])
                for o in outs:
                    versions.append((o._version, o._version[0]))
            else:  # only these outputs: the others may be written in place without invalidating the node
                n.saved_out = tuple([o._data if i in keep else None for i, o in enumerate(outs)])
                for i in keep:
                    versions.append((outs[i]._version, outs[i]._version[0]))
        else:
            n.saved_out = None
        n.versions = versions
        n.out_meta = tuple([(o._data.shape, o.dtype, o.device) for o in outs])
        i = 0
        for o in outs:
            if o.dtype.is_floating_point:
                o._requires_grad = True
                o.grad_fn = n
                o._out_idx = i
            i += 1
        return n

    # -- the ctx interface gradients use ---------------------------------
    @property
    def inputs(self) -> tuple:
        s = self.saved_in
        if s is None:
            raise AutogradError(f"gradient of op '{self.op.name}' used its inputs, but the op saves '{self.op.save}'")
        if s is _FREED:
            raise _freed_error()
        self._check_versions()
        return s

    @property
    def outputs(self) -> tuple:
        s = self.saved_out
        if s is None:
            raise AutogradError(f"gradient of op '{self.op.name}' used its outputs, but the op saves '{self.op.save}'")
        if s is _FREED:
            raise _freed_error()
        self._check_versions()
        outs = []
        for i, a in enumerate(s):
            if a is None:  # not kept (OpDef.saved_outputs)
                outs.append(None)
                continue
            t = Tensor._make(a, _dtype_of(a), self._out_device())
            t._requires_grad = True
            t.grad_fn = self
            t._out_idx = i
            outs.append(t)
        return tuple(outs)

    def _out_device(self):
        if self.out_meta is not None:
            return self.out_meta[0][2]
        for m in self.in_meta:
            if m is not None:
                return m[2]
        return None

    def input_shape(self, i: int) -> tuple:
        return self.in_meta[i][0]

    def input_dtype(self, i: int):
        return self.in_meta[i][1]

    @property
    def needs_input_grad(self) -> tuple:
        return tuple(e is not None for e, _ in self.next)

    def _check_versions(self) -> None:
        for ver, v in self.versions:
            if ver[0] != v:
                raise AutogradError(
                    f"one of the tensors needed for the gradient of '{self.op.name}' has been modified by an "
                    f"in-place operation (version {ver[0]}, expected {v}); use an out-of-place op or .clone()"
                )

    def release(self) -> None:
        if self.saved_in is not None:
            self.saved_in = _FREED
        if self.saved_out is not None:
            self.saved_out = _FREED
        if self.fctx is not None:
            self.fctx._release()

    @property
    def released(self) -> bool:
        return self.saved_in is _FREED or self.saved_out is _FREED

    def name(self) -> str:
        return f"{self.op.name}Backward"

    @property
    def next_functions(self) -> tuple:
        return tuple((e if isinstance(e, Node) else None, i) for e, i in self.next)

    def register_hook(self, idx: int, fn) -> None:
        if self.out_hooks is None:
            self.out_hooks = {}
        self.out_hooks.setdefault(idx, []).append(fn)

    def __repr__(self) -> str:
        return f"<{self.name()}>"


class GradAround:
    """An autograd node's op whose gradient runs inside ``enter()`` (a context manager factory).

    Made by :func:`flow.array_kinds.record` (``around=``); everything else is the op's own."""

    __slots__ = ("_op", "_enter")

    def __init__(self, op, enter) -> None:
        self._op = op
        self._enter = enter

    def __getattr__(self, name):
        return getattr(self._op, name)

    def grad(self, ctx, *grads):
        with self._enter():
            return self._op.grad(ctx, *grads)


def _refresh_view(x) -> None:
    from flow.ops.view_inplace import is_host_view, refresh_view

    if is_host_view(x):
        refresh_view(x)


def _edge(x, nxt: list, meta: list) -> None:
    meta.append((x._data.shape, x.dtype, x.device))
    if x._base is not None and x.grad_fn is not None and x._version[0] != x._view_ver:
        _refresh_view(x)
    if not x._requires_grad:
        nxt.append(_NO_EDGE)
    elif x.grad_fn is None:
        nxt.append((x, -1))  # leaf: accumulate into x.grad
    else:
        nxt.append((x.grad_fn, x._out_idx))


def _dtype_of(a):
    from flow._dtype import NP_TO_DTYPE, dtype

    dt = a.dtype
    return dt if isinstance(dt, dtype) else NP_TO_DTYPE[dt]  # an array kind may give a flow dtype


def _freed_error() -> AutogradError:
    return AutogradError(
        "Trying to backward through the graph a second time (or to use saved tensors after they were freed). "
        "Pass retain_graph=True to the first backward() if you need to backward twice."
    )
