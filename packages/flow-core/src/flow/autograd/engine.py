"""The backward engine: reverse topological order without recursion.

Dependencies are counted first (an iterative walk over ``node.next``), then
nodes run when every gradient flowing into them has arrived, so a chain of
any length works and each node runs once.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from flow.autograd.grad_mode import STATE
from flow.autograd.node import Node, _freed_error
from flow.errors import FlowError

Tensor = None  # set by flow/__init__


def _is_node(x) -> bool:
    return x.__class__ is Node


def _collect(roots: list[Node]) -> dict:
    deps: dict = {}
    stack = list(roots)
    seen = set(roots)
    for r in roots:
        deps.setdefault(r, 0)
    while stack:
        n = stack.pop()
        for tgt, _ in n.next:
            if tgt is not None and tgt.__class__ is Node:
                deps[tgt] = deps.get(tgt, 0) + 1
                if tgt not in seen:
                    seen.add(tgt)
                    stack.append(tgt)
    return deps


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _fix_grad(g, shape, dtype, op_name: str, i: int):
    if g.dtype is not dtype and dtype.is_floating_point:
        g = g.to(dtype)
    if tuple(g.shape) != tuple(shape):
        if g._data.size == int(np.prod(shape)) if shape else g._data.size == 1:
            g = g.reshape(shape)
        else:
            raise FlowError(
                f"gradient of '{op_name}' returned shape {tuple(g.shape)} for input {i}, expected {tuple(shape)}"
            )
    return g


def _owned(g):
    """A gradient stored in ``.grad`` must own writable memory (users zero it in place)."""
    a = g._data
    if isinstance(a, np.ndarray) and (a.base is not None or not a.flags.writeable):
        return Tensor._make(np.array(a, copy=True, order="C"), g.dtype, g.device)
    return g


def _accumulate_leaf(t, g, create_graph: bool) -> None:
    ext = t._extra
    if ext is not None and ext.get("hooks"):
        for h in ext["hooks"]:
            r = h(g)
            if r is not None:
                g = r
    if not create_graph:
        g = g.detach()
    if t.grad is None:
        t.grad = _owned(g) if not create_graph else g
    else:
        t.grad = t.grad + g if create_graph or t.grad.requires_grad else _inplace_acc(t.grad, g)
    if ext is not None and ext.get("post_acc_hooks"):
        for h in ext["post_acc_hooks"]:
            h(t)


def _inplace_acc(acc, g):
    try:
        acc._data += g._data
        acc._version[0] += 1
        return acc
    except (ValueError, TypeError):
        return acc + g


def run_backward(
    tensors: Sequence,
    grad_tensors: Sequence,
    retain_graph: bool = False,
    create_graph: bool = False,
    inputs: Sequence | None = None,
    allow_unused: bool = False,
    accumulate: bool = True,
):
    """Backpropagate from ``tensors`` seeded with ``grad_tensors``.

    With ``inputs`` given and ``accumulate=False`` (``autograd.grad``), the
    gradients reaching those tensors are returned instead of stored in ``.grad``.
    """
    captures_leaf: dict = {}
    captures_node: dict = {}
    result: list = []
    if inputs is not None:
        for k, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"autograd.grad: inputs[{k}] is not a Tensor")
            if not t.requires_grad:
                raise FlowError(f"autograd.grad: inputs[{k}] does not require grad")
            result.append(None)
            if t.grad_fn is None:
                captures_leaf.setdefault(id(t), []).append(k)
            else:
                captures_node.setdefault((t.grad_fn, t._out_idx), []).append(k)

    roots = []
    buffers: dict = {}
    for t, g in zip(tensors, grad_tensors):
        if not t.requires_grad:
            raise FlowError("element 0 of tensors does not require grad and does not have a grad_fn")
        if t.grad_fn is None:  # backward on a leaf: its gradient is the seed itself
            if id(t) in captures_leaf:
                for k in captures_leaf[id(t)]:
                    result[k] = _add(result[k], g)
            elif accumulate:
                _accumulate_leaf(t, g, create_graph)
            continue
        n = t.grad_fn
        buf = buffers.get(n)
        if buf is None:
            buf = buffers[n] = [None] * n.n_out
            roots.append(n)
        buf[t._out_idx] = _add(buf[t._out_idx], g)

    deps = _collect(roots)
    ready = [n for n in roots if deps[n] == 0]
    prev = STATE.grad_enabled
    STATE.grad_enabled = create_graph
    given: set = set()
    try:
        while ready:
            n = ready.pop()
            grads = buffers.pop(n, None) or [None] * n.n_out
            if n.out_hooks:
                for idx, hooks in n.out_hooks.items():
                    if grads[idx] is not None:
                        for h in hooks:
                            r = h(grads[idx])
                            if r is not None:
                                grads[idx] = r
            if captures_node:
                for idx in range(n.n_out):
                    for k in captures_node.get((n, idx), ()):
                        result[k] = _add(result[k], grads[idx])
            if all(g is None for g in grads):
                in_grads = [None] * len(n.next)
            else:
                if n.released:
                    raise _freed_error()
                if n.n_out > 1:
                    grads = [g if g is not None else _zeros(m) for g, m in zip(grads, n.out_meta)]
                in_grads = _flatten(n, n.op.grad(n, *grads))
            for (tgt, idx), g, m in zip(n.next, in_grads, n.in_meta):
                if tgt is None:
                    continue
                if g is not None:
                    g = _fix_grad(g, m[0], m[1], n.op.name, idx)
                if tgt.__class__ is Node:
                    buf = buffers.get(tgt)
                    if buf is None:
                        buf = buffers[tgt] = [None] * tgt.n_out
                    if g is not None:
                        buf[idx] = _add(buf[idx], g)
                    deps[tgt] -= 1
                    if deps[tgt] == 0:
                        ready.append(tgt)
                elif g is not None:
                    key = id(tgt)
                    if key in captures_leaf:
                        for k in captures_leaf[key]:
                            result[k] = _add(result[k], g)
                    elif accumulate:
                        if id(g) in given:
                            g = g.clone()
                        given.add(id(g))
                        _accumulate_leaf(tgt, g, create_graph)
            if not retain_graph:
                n.release()
    finally:
        STATE.grad_enabled = prev
    if inputs is not None:
        for k, r in enumerate(result):
            if r is None and not allow_unused:
                raise FlowError(
                    f"autograd.grad: inputs[{k}] was not used in the graph; pass allow_unused=True to get None"
                )
        return tuple(result)
    return None


def _zeros(meta):
    from flow._creation import zeros

    shape, dtype, device = meta
    return zeros(shape, dtype=dtype, device=device)


def _flatten(n: Node, grads) -> list:
    if not isinstance(grads, (tuple, list)):
        grads = (grads,)
    flat = []
    for g in grads:
        if g.__class__ is list or g.__class__ is tuple:
            flat.extend(g)
        else:
            flat.append(g)
    if len(flat) != len(n.next):
        raise FlowError(
            f"gradient of '{n.op.name}' returned {len(flat)} gradients for {len(n.next)} tensor inputs"
        )
    return flat
