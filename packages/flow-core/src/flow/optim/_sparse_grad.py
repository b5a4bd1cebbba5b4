"""Steps of optimizers whose parameters have sparse COO gradients (``nn.Embedding(sparse=True)``).

:class:`~flow.optim.SGD`, :class:`~flow.optim.Adagrad` and :class:`~flow.optim.SparseAdam` accept them,
as PyTorch's do: :func:`sparse_step` hides the sparse gradients from the flat update ops (which update
every element), runs the ordinary step for the dense ones, then hands each sparse gradient (coalesced:
the updates are not linear in the gradient) to the optimizer's row update, which reads and writes only
the rows the gradient holds. Every check runs before the first update, so an error changes nothing.
Any other optimizer reaching its update op with a sparse gradient gets a clear error from the sparse
array kind (see :mod:`flow.sparse._coo`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from flow.optim.errors import OptimizerError


class RowState:
    """One parameter's view of its optimizer state in the flat buckets: ``p`` (the parameter's array,
    updated in place), ``rows`` / ``values`` (the coalesced gradient), ``step`` (1-based, this step
    counted) and :meth:`state` (a state buffer shaped like the parameter)."""

    __slots__ = ("p", "rows", "values", "step", "_b", "_i", "xp")

    def __init__(self, b, i: int, rows: np.ndarray, values: np.ndarray) -> None:
        self._b, self._i, self.xp = b, i, b.xp
        self.p = b.params[i]._data
        self.rows = self.xp.asarray(rows)
        self.values = self.xp.asarray(values).astype(self.p.dtype, copy=False)
        self.step = int(b.steps[i]) + 1

    def state(self, name: str, fill: float = 0.0):
        b, i = self._b, self._i
        buf = b.state(name, fill)
        o, n = int(b.offsets[i]), int(b.numels[i])
        return buf[o : o + n].reshape(b.local_shapes[i])

    def done(self, names) -> None:
        b, i = self._b, self._i
        b.steps[i] += 1
        for name in names:
            b.present[name][i] = True
        b.params[i]._version[0] += 1


def _locate(opt, gi: int, p):
    for b in opt._buckets(gi):
        for i, q in enumerate(b.params):
            if q is p:
                return b, i
    raise OptimizerError(f"{type(opt).__name__}: a parameter is missing from its group's state")  # pragma: no cover


def sparse_step(
    opt,
    closure: Callable | None,
    check: Callable[[dict], None],
    update: Callable[[dict, RowState], tuple],
    densify: Callable[[dict], bool] = lambda group: False,
):
    """``opt.step(closure)`` with sparse gradients: ``check(group)`` raises for options that do not work
    with them, ``update(group, rows)`` updates one parameter's rows and returns the state names it
    wrote; groups where ``densify(group)`` holds get their sparse gradients as dense ones (SGD with
    momentum: PyTorch's sparse momentum buffer gives the dense update)."""
    from flow.optim._flat import state_layout
    from flow.optim.optimizer import Optimizer
    from flow.sparse import SparseTensor

    loss = None
    if closure is not None:
        from flow.autograd import enable_grad

        with enable_grad():
            loss = closure()
    found = []
    for gi, group in enumerate(opt.param_groups):
        for p in group["params"]:
            g = p.grad
            if isinstance(g, SparseTensor):
                if tuple(g.shape) != tuple(p.shape) or g.dtype != p.dtype or g.sparse_dim() != 1:
                    raise OptimizerError(
                        f"{type(opt).__name__}: a parameter of shape {tuple(p.shape)} ({p.dtype}) has a sparse "
                        f"gradient of shape {tuple(g.shape)} ({g.dtype}, sparse_dim {g.sparse_dim()}); expected "
                        "its shape and dtype with one sparse dim (rows)"
                    )
                if state_layout(p) is not None:  # its state is a piece (ZeRO): rows index the whole
                    raise OptimizerError(
                        f"{type(opt).__name__}: a parameter of shape {tuple(p.shape)} has a sparse gradient, "
                        "but its optimizer state has a layout of its own (flow.optim state_layout, e.g. ZeRO); "
                        "sparse row updates need the whole state: use a dense gradient (sparse=False)"
                    )
                found.append((gi, group, p, g))
    if not found:
        Optimizer.step(opt)
        return loss
    rows = []
    for gi, group, p, g in found:
        if densify(group):
            continue
        check(group)
        rows.append((gi, group, p, g.coalesce()))
    # the flat step sees dense gradients only: sparse ones are hidden (or densified) for its duration
    saved = [(p, g) for _, _, p, g in found]
    try:
        for _, group, p, g in found:
            p.grad = g.to_dense() if densify(group) else None
        Optimizer.step(opt)
    finally:
        for p, g in saved:
            p.grad = g
    for gi, group, p, g in rows:
        b, i = _locate(opt, gi, p)
        d = g._data
        vals = np.asarray(d.values.detach().numpy_host())
        rs = RowState(b, i, d.indices[0], -vals if group.get("maximize", False) else vals)
        rs.done(update(group, rs))
    return loss


def no_weight_decay(name: str) -> Callable[[dict], None]:
    """The check of optimizers whose sparse path has no weight decay (PyTorch's: it would densify)."""

    def check(group: dict) -> None:
        if float(group.get("weight_decay", 0) or 0) != 0:
            raise OptimizerError(
                f"{name}: weight_decay is not supported with sparse gradients, got {group['weight_decay']!r}"
            )

    return check


def as_float(x: Any) -> float:
    from flow.optim.optimizer import _float

    return _float(x)
