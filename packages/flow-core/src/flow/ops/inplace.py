"""In-place ops: compute functionally, write into the tensor's storage, rebase autograd.

Writing into ``self._data`` in place keeps every view of the same storage in
sync; the version counter is bumped so a gradient that saved the old values
is caught. When the gradient of the recorded op needs ``self``'s old values,
a copy of them is kept in the node before the write.
"""

from __future__ import annotations

from flow.autograd.grad_mode import STATE
from flow.errors import AutogradError, OpError
from flow.ops.view_inplace import check_view_writable, is_host_view, rebase_view_write, view_base


def check_inplace_allowed(self, op: str) -> None:
    """Refuse, before anything is written, the in-place writes PyTorch refuses under autograd."""
    if not STATE.grad_enabled:
        return
    if self._requires_grad and self.grad_fn is None:
        raise AutogradError(
            f"{op}: a leaf tensor that requires grad is being used in an in-place operation; "
            "wrap it in flow.no_grad() or use the out-of-place op"
        )
    base = view_base(self)
    if base is not None and base._requires_grad:
        if base.grad_fn is None:
            raise AutogradError(
                f"{op}: a view of a leaf tensor that requires grad is being used in an in-place operation; "
                "wrap it in flow.no_grad() or use the out-of-place op"
            )
        if is_host_view(self):
            check_view_writable(self, op)


def inplace_call(self, op: str, fn, *args):
    """``self.<op>(*args)`` for an in-place op written as a composite: ``fn(src, *args)`` computes the
    result out of place, then it is written into ``self``.

    The ops inside ``fn`` save what their gradients need, ``self`` among it; writing into ``self``
    would then change (and invalidate) what they saved. So under autograd ``fn`` gets a snapshot of
    ``self``: a copy of its values that carries its autograd history (``grad_fn``), as PyTorch keeps
    the old values an in-place op's gradient needs. Without autograd there is no copy.
    """
    from flow._tensor import Tensor

    check_inplace_allowed(self, op)
    src = self
    if STATE.grad_enabled and (self._requires_grad or any(isinstance(a, Tensor) and a._requires_grad for a in args)):
        src = _snapshot(self)
    return apply_inplace(self, fn(src, *args), op)


def _snapshot(self):
    """A copy of ``self``'s values with its autograd identity and a version counter of its own."""
    from flow._tensor import Tensor

    snap = Tensor._make(self._data.copy(), self.dtype, self.device)
    snap._requires_grad = self._requires_grad
    snap.grad_fn = self.grad_fn
    if self.grad_fn is not None:
        snap._out_idx = self._out_idx
    return snap


def apply_inplace(self, result, op: str):
    """Make ``self`` hold ``result`` in place and take over its autograd history."""
    from flow._tensor import Tensor

    check_inplace_allowed(self, op)
    if tuple(result._data.shape) != tuple(self._data.shape):
        raise OpError(
            op,
            f"the result of shape {tuple(result.shape)} does not fit in-place into a tensor of "
            f"shape {tuple(self.shape)}",
        )
    if result.dtype is not self.dtype:
        if result.dtype.category > self.dtype.category:
            raise OpError(op, f"result type {result.dtype} cannot be cast to the in-place output type {self.dtype}")
        result = result.to(self.dtype)
    node = result.grad_fn if result._requires_grad else None
    base = view_base(self)
    # a write into a view under autograd rebases the base's history too (see flow.ops.view_inplace)
    via_base = base is not None and STATE.grad_enabled and (base._requires_grad or result._requires_grad)
    if via_base and not is_host_view(self):
        raise AutogradError(
            f"{op}: in-place modification of a view that takes part in autograd is not supported on "
            f"'{self.device}' ({type(self._data).__name__} arrays); use the out-of-place op or .clone() the view"
        )
    if via_base and not base._requires_grad:  # else check_inplace_allowed has checked it
        check_view_writable(self, op)
    if node is not None and isinstance(node.saved_in, tuple):
        saved = list(node.saved_in)
        snap = None
        for i, x in enumerate(saved):
            if x is self:
                if snap is None:
                    # The snapshot holds the old values with a version counter of its own, so later
                    # in-place ops on ``self`` do not invalidate this node.
                    snap = _snapshot(self)
                saved[i] = snap
        if snap is not None:
            n_in = sum(
                len(x) if isinstance(x, (list, tuple)) else 1
                for x in node.saved_in
                if isinstance(x, (Tensor, list, tuple))
            )
            flat = []
            for x in saved:
                if isinstance(x, Tensor):
                    flat.append(x)
                elif isinstance(x, (list, tuple)):
                    flat.extend(t for t in x if isinstance(t, Tensor))
            # Only this call has run since the node was recorded, so current versions are the saved ones.
            node.versions = [(t._version, t._version[0]) for t in flat] + list(node.versions[n_in:])
            node.saved_in = tuple(saved)
    try:
        self._data[...] = result._data
    except (ValueError, TypeError) as e:
        raise OpError(op, f"cannot write into this tensor (device '{self.device}'): {e}") from None
    self._version[0] += 1
    if via_base:
        rebase_view_write(self, result if result._requires_grad else None, op)
    elif node is not None:
        self.grad_fn = node
        self._out_idx = result._out_idx
        self._requires_grad = True
    elif self._requires_grad and STATE.grad_enabled:
        # the new value does not depend on the old one (copy_ from a constant, an integer-valued result):
        # the old history gets a zero gradient instead of the gradient of the new value
        rebase_constant(self, op)
    return self


def after_constant_write(self, op: str) -> None:
    """Autograd after ``self``'s storage was overwritten with a constant (``fill_``), version bumped."""
    if not STATE.grad_enabled:
        return
    base = view_base(self)
    if base is not None and base._requires_grad:
        if is_host_view(self):
            rebase_view_write(self, None, op)
            return
        raise AutogradError(
            f"{op}: in-place modification of a view that takes part in autograd is not supported on "
            f"'{self.device}' ({type(self._data).__name__} arrays); .clone() the view first"
        )
    if self._requires_grad:
        rebase_constant(self, op)


def rebase_constant(self, op: str) -> None:
    """After ``self`` was overwritten with a constant (``fill_``, ``zero_``) under grad mode: it keeps
    requiring grad, through a node whose gradient for the old value is zero (as in PyTorch)."""
    from flow._tensor import Tensor

    old = Tensor._make(self._data, self.dtype, self.device)
    old._requires_grad = True
    old.grad_fn = self.grad_fn
    old._out_idx = self._out_idx
    out = _fill_function().apply(old)
    self.grad_fn = out.grad_fn
    self._out_idx = out._out_idx
    self._requires_grad = True


_FILL = []


def _fill_function():
    if not _FILL:
        from flow.autograd.function import Function

        class Fill(Function):
            @staticmethod
            def forward(ctx, x):
                return x.detach()

            @staticmethod
            def backward(ctx, g):
                return g * 0.0

        _FILL.append(Fill)
    return _FILL[0]
