"""Autograd through in-place writes into views (what PyTorch calls CopySlices).

A view shares its base's storage, so an in-place write into the view changes the base too. Two
things must then follow for gradients to stay right:

* the base's history is rebased: its new value is "the old base, with the view's elements replaced by
  the written values" (``_CopySlices``), so the overwritten elements pass no gradient to the old
  history and the written values get the gradient of those elements;
* every view of the base whose recorded history predates the write is stale: it still routes its
  gradient to the old base. A view remembers the version of its storage its history belongs to
  (``_view_ver``); when autograd records an op on a view whose storage has been written since, the
  view gets a fresh history as "these elements of the base" (``_ViewOf``, see :func:`refresh_view`).

Which elements of the base a view covers is read from the arrays themselves (offset and strides of
the view inside the base's memory), so every view op (indexing, transpose, diagonal, unfold, ...)
is covered without a per-op inverse. This is for host arrays (NumPy); other array kinds keep the
refusal in :mod:`flow.ops.inplace`.
"""

from __future__ import annotations

import numpy as np

from flow.autograd.function import Function
from flow.errors import AutogradError


def view_base(t):
    """The base ``t`` is a differentiable view of, or None (not a view, or an alias such as ``detach()``'s)."""
    base = t._base
    return base if base is not None and t._view_ver is not None else None


def is_host_view(t) -> bool:
    """True when ``t`` is a differentiable view whose element positions in its base can be read from memory."""
    base = view_base(t)
    return base is not None and isinstance(t._data, np.ndarray) and isinstance(base._data, np.ndarray)


def _offsets(a: np.ndarray, start: int, itemsize: int, op: str) -> np.ndarray:
    """Memory offsets (in elements, from ``start`` elements) of every element of ``a``, in ``a``'s shape."""
    off = np.full(a.shape, start, dtype=np.int64)
    for k, (n, s) in enumerate(zip(a.shape, a.strides)):
        if s % itemsize:
            raise AutogradError(f"{op}: cannot track gradients through a view with a stride of {s} bytes")
        shape = [1] * a.ndim
        shape[k] = n
        off += (np.arange(n, dtype=np.int64) * (s // itemsize)).reshape(shape)
    return off


def view_positions(view, op: str = "in-place") -> np.ndarray:
    """The C-order flat positions in ``view._base`` of each element of ``view`` (an int64 array of its shape)."""
    v, b = view._data, view._base._data
    isz = b.itemsize
    start = v.__array_interface__["data"][0] - b.__array_interface__["data"][0]
    if start % isz:
        raise AutogradError(f"{op}: cannot track gradients through a view that starts inside an element")
    pos = _offsets(v, start // isz, isz, op)
    if not b.flags.c_contiguous:
        # memory offset -> logical position of the base, through the base's own strides
        boff = _offsets(b, 0, isz, op).reshape(-1)
        order = np.argsort(boff, kind="stable")
        found = np.searchsorted(boff[order], pos)
        found = np.clip(found, 0, max(order.size - 1, 0))
        if order.size == 0 or not np.array_equal(boff[order][found], pos):
            raise AutogradError(f"{op}: the view covers memory outside its base; cannot track its gradient")
        pos = order[found]
    return pos


def _check_writable(pos: np.ndarray, op: str) -> None:
    if pos.size > 1 and np.unique(pos).size != pos.size:
        raise AutogradError(
            f"{op}: more than one element of the written-to view refers to a single memory location "
            "(an expanded view); .clone() it before the in-place operation"
        )


def _flat_index(pos: np.ndarray):
    from flow._creation import tensor

    return tensor(pos.reshape(-1))


class _CopySlices(Function):
    """The base after a write into one of its views: old values outside the view, ``new`` inside it."""

    @staticmethod
    def forward(ctx, old, new, pos, data):
        from flow._tensor import Tensor

        ctx.pos = pos
        ctx.shape = tuple(old.shape)
        return Tensor._make(data, old.dtype, old.device)  # the base's storage, already written

    @staticmethod
    def backward(ctx, g):
        idx = _flat_index(ctx.pos)
        flat = g.reshape(-1)
        g_old = flat.index_fill(0, idx, 0).reshape(ctx.shape) if ctx.needs_input_grad[0] else None
        g_new = flat.index_select(0, idx).reshape(ctx.pos.shape) if ctx.needs_input_grad[1] else None
        return g_old, g_new, None, None


class _ViewOf(Function):
    """A view's value as "these elements of its base", for a view whose history went stale."""

    @staticmethod
    def forward(ctx, base, pos, data):
        from flow._tensor import Tensor

        ctx.pos = pos
        ctx.shape = tuple(base.shape)
        return Tensor._make(data, base.dtype, base.device)  # the view's own storage: no copy

    @staticmethod
    def backward(ctx, g):
        from flow._creation import zeros

        n = int(np.prod(ctx.shape, dtype=np.int64))
        gb = zeros(n, dtype=g.dtype, device=g.device).index_add(0, _flat_index(ctx.pos), g.reshape(-1))
        return gb.reshape(ctx.shape), None, None


def _take_history(dst, src) -> None:
    dst.grad_fn = src.grad_fn
    dst._out_idx = src._out_idx
    dst._requires_grad = True


def check_view_writable(view, op: str) -> None:
    """Before a write into ``view`` under autograd: refuse what PyTorch refuses, before anything changes."""
    pos = view_positions(view, op)
    _check_writable(pos, op)


def rebase_view_write(view, new, op: str) -> None:
    """After ``view``'s storage was written with ``new``'s values (``new`` may carry history or be a
    constant, ``None``): rebase the base's history and give the view one that reads the base."""
    from flow._creation import zeros

    base = view._base
    pos = view_positions(view, op)  # writability was checked before the write (check_view_writable)
    if new is None:
        new = zeros(())  # a constant: no history to pass a gradient to
    if base._requires_grad or new._requires_grad:
        _take_history(base, _CopySlices.apply(base, new, pos, base._data))
    refresh_view(view, pos)


def refresh_view(view, pos: np.ndarray | None = None) -> None:
    """Give ``view`` a history that reads its base as it is now (its storage was written since its
    history was recorded)."""
    base = view._base
    if base._requires_grad:
        if pos is None:
            pos = view_positions(view, "autograd")
        _take_history(view, _ViewOf.apply(base, pos, view._data))
    view._view_ver = view._version[0]
