"""The backward engine: reverse topological order without recursion.

Dependencies are counted first (an iterative walk over ``node.next``), then
nodes run when every gradient flowing into them has arrived, so a chain of
any length works and each node runs once. Leaves are counted the same way:
a leaf's hooks run once, on the sum of every gradient reaching it, and its
``.grad`` is updated when the last one has arrived (as PyTorch's
AccumulateGrad does).

Memory handed to a ``.grad`` never aliases another ``.grad``, a user's
``gradient=`` tensor or a tensor a hook has seen, so accumulating into
``.grad`` in place (the next backward, ``zero_()``, an optimizer) cannot
change anything else.
"""

from __future__ import annotations

import threading
from typing import Sequence

from flow._fpstate import FP_ERRORS as _FP_ERRORS
from flow._kinds import KINDS as _KINDS
from flow.autograd.grad_mode import STATE
from flow.autograd.node import Node, _refresh_view
from flow.errors import AutogradError

Tensor = None  # set by flow/__init__


def _collect(roots: list) -> tuple[dict, dict]:
    """Count the edges into every node and every leaf reachable from ``roots``."""
    deps: dict = {}
    for r in roots:
        deps[r] = 0
    leaves: dict = {}
    stack = list(roots)
    pop, push = stack.pop, stack.append
    while stack:
        for tgt, _ in pop().next:
            if tgt is None:
                continue
            if tgt.__class__ is Node:
                c = deps.get(tgt)
                if c is None:
                    deps[tgt] = 1
                    push(tgt)
                else:
                    deps[tgt] = c + 1
            else:
                k = id(tgt)
                leaves[k] = leaves.get(k, 0) + 1
    return deps, leaves


def _needed(deps: dict, roots: list, cap_leaf: dict, cap_node: dict) -> set:
    """The nodes from which a captured tensor can be reached (only they run for ``inputs=``)."""
    indeg = dict(deps)
    order = []
    ready = [r for r in roots if indeg[r] == 0]
    while ready:
        n = ready.pop()
        order.append(n)
        for tgt, _ in n.next:
            if tgt.__class__ is Node:
                indeg[tgt] -= 1
                if indeg[tgt] == 0:
                    ready.append(tgt)
    need: set = set()
    for n in reversed(order):
        if any((n, i) in cap_node for i in range(n.n_out)):
            need.add(n)
            continue
        for tgt, _ in n.next:
            if tgt is None:
                continue
            if tgt.__class__ is Node:
                if tgt in need:
                    need.add(n)
                    break
            elif id(tgt) in cap_leaf:
                need.add(n)
                break
    return need


def _sum(a, b, owned: dict, create_graph: bool):
    """``a + b`` for gradient buffers; adds into ``a`` in place when the engine made ``a`` itself."""
    if a is None:
        return b
    if b is None:
        return a
    if not create_graph:
        if id(a) in owned:
            try:
                a._data += b._data
                return a
            except (TypeError, ValueError):
                pass
            except _FP_ERRORS:
                # the user's NumPy settings (or a warnings filter) turned inf/nan into an error: NumPy
                # reports it after the ufunc has written its output, so the sum is in place, as kernels
                # give it (flow._dispatch runs kernels quietly too)
                return a
        r = a + b
        owned[id(r)] = r
        return r
    return a + b


def _fix_grad(g, meta, op_name: str, i: int):
    """Bring a gradient to its input's dtype and shape, or say which gradient formula is wrong."""
    shape, dtype = meta[0], meta[1]
    if g.dtype is not dtype and dtype.is_floating_point:
        g = g.to(dtype)
    gs = tuple(g._data.shape)
    if gs != tuple(shape):
        if [s for s in gs if s != 1] == [s for s in shape if s != 1]:
            g = g.reshape(tuple(shape))
        elif len(gs) >= len(shape) and _broadcasts_to(shape, gs):
            from flow.ops._grad_util import sum_to_shape

            g = sum_to_shape(g, tuple(shape))
        else:
            raise AutogradError(f"gradient of '{op_name}' returned shape {gs} for input {i}, expected {tuple(shape)}")
    return g


def _broadcasts_to(small, big) -> bool:
    off = len(big) - len(small)
    return all(s == 1 or s == big[off + k] for k, s in enumerate(small))


def _foreign(given: dict, t) -> None:
    """Remember that ``t``'s memory belongs to someone else (a user, a hook): copy before keeping it."""
    a = t._data
    given[id(a)] = a


def _run_hooks(hooks, g, given: dict):
    for h in hooks:
        _foreign(given, g)
        r = h(g)
        if r is not None:
            g = r
            _foreign(given, g)
    return g


def _store_grad(t, g, create_graph: bool, given: dict, owned: dict) -> None:
    """Accumulate ``g`` into ``t.grad`` (running the tensor's hooks first)."""
    ext = t._extra
    if ext is not None and ext.get("hooks"):
        g = _run_hooks(ext["hooks"], g, given)
    if t._data.__class__ in _KINDS:  # an array kind may lay the gradient out as its tensor's .grad needs
        grad_for = getattr(t._data, "grad_for", None)
        if grad_for is not None:
            g = grad_for(g)
    acc = t.grad
    if create_graph:
        t.grad = g if acc is None else acc + g
    elif acc is None:
        a = g._data
        fresh = owned.pop(id(g), None) is not None
        if (not fresh and id(a) in given) or getattr(a, "base", None) is not None or not _writeable(a):
            a = _copy(a)
            g = Tensor._make(a, g.dtype, g.device)
        elif g._requires_grad or g._extra is not None or g.__class__ is not Tensor:
            # an array kind may name its tensor class (a sparse gradient stays a SparseTensor)
            g = getattr(a, "tensor_class", Tensor)._make(a, g.dtype, g.device)
        given[id(a)] = a
        t.grad = g
    elif acc._requires_grad:
        t.grad = acc + g
    else:
        try:
            acc._data += g._data
            acc._version[0] += 1
        except (TypeError, ValueError):
            t.grad = acc + g
    if ext is not None and ext.get("post_acc_hooks"):
        for h in ext["post_acc_hooks"]:
            h(t)


_LOCAL = threading.local()


def _callback_stack() -> list:
    stack = getattr(_LOCAL, "callbacks", None)
    if stack is None:
        stack = _LOCAL.callbacks = []
    return stack


def queue_callback(fn) -> None:
    """Run ``fn()`` once the backward pass now running has finished (every gradient computed and
    accumulated), as PyTorch's ``Variable._execution_engine.queue_callback``: a gradient hook uses
    it to finish work it started (DDP waits for its gradient all-reduces there). Outside a backward
    pass it is an error."""
    stack = _callback_stack()
    if not stack:
        raise AutogradError("queue_callback: no backward pass is running (call it from a gradient hook)")
    stack[-1].append(fn)


def _writeable(a) -> bool:
    flags = getattr(a, "flags", None)
    return flags is None or flags.writeable


def _copy(a):
    c = a.copy()
    return c


def _accumulate_leaf(t, g, create_graph: bool) -> None:
    """Accumulate ``g`` into ``t.grad`` outside a backward pass (``backward(inputs=...)``)."""
    _store_grad(t, g, create_graph, {}, {})


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

    Without ``inputs``, gradients accumulate into the ``.grad`` of every leaf
    that requires grad. With ``inputs``, only the part of the graph leading to
    them runs; their gradients are returned (``accumulate=False``, as
    ``autograd.grad``) or accumulated into their ``.grad`` (``accumulate=True``,
    as ``backward(inputs=...)``), and nothing else is touched.
    """
    given: dict = {}  # id(array) -> array: memory a .grad, a user or a hook already has
    owned: dict = {}  # id(tensor) -> tensor: sums the engine made and nobody else has seen
    cap_leaf: dict = {}
    cap_node: dict = {}
    result: list = []
    for t in tensors:  # a view written after its history was recorded reads its base as it is now
        if isinstance(t, Tensor) and t._base is not None and t.grad_fn is not None and t._version[0] != t._view_ver:
            _refresh_view(t)
    if inputs is not None:
        for k, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"autograd: inputs[{k}] is not a Tensor")
            if not t._requires_grad:
                raise AutogradError(f"autograd: inputs[{k}] does not require grad")
            result.append(None)
            if t.grad_fn is None:
                cap_leaf.setdefault(id(t), []).append(k)
            else:
                cap_node.setdefault((t.grad_fn, t._out_idx), []).append(k)

    roots: list = []
    buffers: dict = {}
    for k, (t, g) in enumerate(zip(tensors, grad_tensors)):
        if not t._requires_grad:
            raise AutogradError(f"element {k} of tensors does not require grad and does not have a grad_fn")
        if g._data.__class__ is not t._data.__class__ and t._data.__class__ in _KINDS:
            g = _kind_seed(t, g)
        _foreign(given, g)
        if t.grad_fn is None:  # backward on a leaf: its gradient is the seed itself
            if inputs is not None:
                for j in cap_leaf.get(id(t), ()):
                    result[j] = _sum(result[j], g, owned, create_graph)
            elif accumulate:
                _store_grad(t, g, create_graph, given, owned)
            continue
        n = t.grad_fn
        buf = buffers.get(n)
        if buf is None:
            buf = buffers[n] = [None] * n.n_out
            roots.append(n)
        buf[t._out_idx] = _sum(buf[t._out_idx], g, owned, create_graph)

    deps, leaf_deps = _collect(roots)
    skip = None
    if inputs is not None:
        need = _needed(deps, roots, cap_leaf, cap_node)
        skip = {n for n in deps if n not in need}
    leaf_buf: dict = {}
    ready = [n for n in roots if deps[n] == 0]
    pop, push = ready.pop, ready.append
    prev = STATE.grad_enabled
    STATE.grad_enabled = create_graph
    callbacks = _callback_stack()
    callbacks.append([])
    try:
        while ready:
            n = pop()
            if skip is not None and n in skip:  # leads to none of the inputs: never runs
                buffers.pop(n, None)
                _pass_none(n, deps, leaf_deps, leaf_buf, push)
                continue
            grads = buffers.pop(n, None)
            if grads is None:
                grads = [None] * n.n_out
            elif owned:  # sums made for this node are now its inputs: no longer the engine's own
                for g in grads:
                    owned.pop(id(g), None)
            if n.out_hooks:
                for idx, hooks in n.out_hooks.items():
                    if grads[idx] is not None:
                        grads[idx] = _run_hooks(hooks, grads[idx], given)
            if cap_node:
                for idx in range(n.n_out):
                    for j in cap_node.get((n, idx), ()):
                        result[j] = _sum(result[j], grads[idx], owned, create_graph)
                        if result[j] is grads[idx]:
                            _foreign(given, grads[idx])
            nxt = n.next
            if grads[0] is None and _all_none(grads):
                in_grads = (None,) * len(nxt)
            else:
                # a released node raises when its gradient reads what it saved (ctx.inputs ...)
                if n.n_out > 1 and (n.fctx is None or n.fctx.materialize_grads):
                    grads = [g if g is not None else _zeros(m) for g, m in zip(grads, n.out_meta)]
                op = n.op
                in_grads = op.grad(n, *grads)
                if in_grads.__class__ is not tuple or len(in_grads) != len(nxt) or op.has_variadic:
                    in_grads = _flatten(n, in_grads)
            for (tgt, idx), g, m in zip(nxt, in_grads, n.in_meta):
                if tgt is None:
                    continue
                if g is not None and (g._data.shape != m[0] or g.dtype is not m[1]):
                    g = _fix_grad(g, m, n.op.name, idx)
                if tgt.__class__ is Node:
                    if g is not None:
                        buf = buffers.get(tgt)
                        if buf is None:
                            buf = buffers[tgt] = [None] * tgt.n_out
                            buf[idx] = g
                        else:
                            buf[idx] = _sum(buf[idx], g, owned, create_graph)
                    c = deps[tgt] - 1
                    deps[tgt] = c
                    if c == 0:
                        push(tgt)
                else:
                    key = id(tgt)
                    if g is not None:
                        have = leaf_buf.get(key)
                        leaf_buf[key] = g if have is None else _sum(have, g, owned, create_graph)
                    c = leaf_deps[key] - 1
                    leaf_deps[key] = c
                    if c == 0:
                        g = leaf_buf.pop(key, None)
                        if g is None:
                            continue
                        if inputs is not None:
                            for j in cap_leaf.get(key, ()):
                                result[j] = _sum(result[j], g, owned, create_graph)
                        elif accumulate:
                            _store_grad(tgt, g, create_graph, given, owned)
            if not retain_graph and (n.saved_in is not None or n.saved_out is not None or n.fctx is not None):
                n.release()
    finally:
        STATE.grad_enabled = prev
        queued = callbacks.pop()
    for fn in queued:  # the pass is done: what its hooks asked to run at its end (DDP's all-reduce waits)
        fn()
    if inputs is None:
        return None
    for k, r in enumerate(result):
        if r is None and not allow_unused:
            raise AutogradError(
                f"autograd.grad: inputs[{k}] was not used in the graph; pass allow_unused=True to get None"
            )
    if accumulate:
        for t, r in zip(inputs, result):
            if r is not None:
                _store_grad(t, r, create_graph, given, owned)
        return tuple(result)
    return tuple(r if r is None or create_graph else r.detach() for r in result)


def _kind_seed(t, g):
    """A plain seed (``ones_like`` of the output, a user's plain ``gradient=``) for an output of an
    array kind becomes an array of that kind laid out like the output (its array's ``like``, see
    flow.array_kinds), so that the gradients are of the kind too; without ``like`` it stays plain."""
    like = getattr(t._data, "like", None)
    if like is None or g._data.__class__ in _KINDS:
        return g
    return Tensor._make(like(g.numpy_host()), g.dtype, t.device)


def _pass_none(n, deps: dict, leaf_deps: dict, leaf_buf: dict, push) -> None:
    """Count ``n``'s edges as done without running it (the part of the graph ``inputs=`` does not need)."""
    for tgt, _ in n.next:
        if tgt is None:
            continue
        if tgt.__class__ is Node:
            c = deps[tgt] - 1
            deps[tgt] = c
            if c == 0:
                push(tgt)
        else:
            leaf_deps[id(tgt)] -= 1


def _all_none(grads) -> bool:
    for g in grads:
        if g is not None:
            return False
    return True


def _zeros(meta):
    from flow._creation import zeros

    shape, dtype, device = meta
    return zeros(shape, dtype=dtype, device=device)


def _flatten(n: Node, grads) -> tuple:
    if not isinstance(grads, (tuple, list)):
        grads = (grads,)
    flat = []
    for g in grads:
        if g.__class__ is list or g.__class__ is tuple:
            flat.extend(g)
        else:
            flat.append(g)
    if len(flat) != len(n.next):
        raise AutogradError(f"gradient of '{n.op.name}' returned {len(flat)} gradients for {len(n.next)} tensor inputs")
    return tuple(flat)
