"""``flow.optim.SparseAdam`` (torch.optim.SparseAdam): Adam that touches only the rows a step's gradient has.

PyTorch feeds it the sparse gradients of ``nn.Embedding(sparse=True)``: a step updates the moments and the
parameter only at the gradient's indices, so the moments of untouched rows neither decay nor move the
parameter. A sparse gradient (``nn.Embedding(sparse=True)``) is used as PyTorch uses it: coalesced, its rows
take part. A dense gradient is also accepted: a *row* (a slice along dim 0; an element for 0-d and 1-d
parameters) then takes part in a step exactly when its gradient has a nonzero entry, which is the pattern of
PyTorch's sparse gradient except for a looked-up row whose gradient happens to be exactly zero.
"""

from __future__ import annotations

import math

import numpy as np

from flow.optim._foreach import flat_update
from flow.optim._sparse_grad import RowState, as_float, sparse_step
from flow.optim.optimizer import Optimizer, _float


def row_mask(xp, grads: list):
    """The flat element mask of the rows (dim-0 slices) of ``grads`` that hold a nonzero entry."""
    parts = []
    for g in grads:
        if g.ndim <= 1:
            parts.append((g != 0).reshape(-1))
        else:
            rows = (g != 0).reshape(g.shape[0], -1).any(axis=1)
            parts.append(xp.repeat(rows, int(g.size) // max(g.shape[0], 1)))
    return xp.concatenate(parts) if parts else xp.zeros(0, dtype=bool)


class SparseAdam(Optimizer):
    """torch.optim.SparseAdam: Adam's update of only the rows that have a gradient (see the module docs).

    For each such row: ``m += (1 - beta1) * (g - m)``, ``v += (1 - beta2) * (g*g - v)``,
    ``p -= lr * sqrt(1 - beta2**t) / (1 - beta1**t) * m / (sqrt(v) + eps)``; other rows are left as they
    are. No weight decay (as in PyTorch). ``step`` counts the steps in which a parameter had a gradient.

    >>> emb = flow.nn.Embedding(1000, 16)
    >>> opt = flow.optim.SparseAdam(emb.parameters(), lr=1e-2)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, maximize: bool = False) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))

    def step(self, closure=None):
        """One step (see :meth:`flow.optim.Optimizer.step`): sparse gradients update their rows, dense ones the
        rows holding a nonzero entry."""
        return sparse_step(self, closure, lambda group: None, _sparse_rows)

    def _state_names(self, group: dict) -> dict:
        return {"exp_avg": 0.0, "exp_avg_sq": 0.0}

    def _apply(self, group: dict, params: list, grads: list, state: dict, step: int, layout, ctx) -> None:
        xp = ctx[0]
        mask = row_mask(xp, grads)  # from the gradients as given: ``maximize`` only flips their sign
        flat_update(
            lambda p, g: self._masked(group, p, g, state, step, mask),
            xp,
            params,
            grads,
            ctx[1],
            ctx[2],
            bool(group.get("maximize", False)),
        )

    @staticmethod
    def _masked(group: dict, p, g, state: dict, step: int, mask) -> None:
        if not mask.any():
            return
        lr, eps = _float(group["lr"]), float(group["eps"])
        b1, b2 = (float(b) for b in group["betas"])
        m, v = state["exp_avg"], state["exp_avg_sq"]
        gv, m_old, v_old = g[mask], m[mask], v[mask]
        # PyTorch's order of operations: the moment updates are computed as increments of the old values
        m_upd = (gv - m_old) * (1 - b1)
        v_upd = (gv**2 - v_old) * (1 - b2)
        m[mask] = m_old + m_upd
        v[mask] = v_old + v_upd
        numer = m_upd + m_old
        denom = np.sqrt(v_upd + v_old) + eps
        step_size = lr * math.sqrt(1 - b2**step) / (1 - b1**step)
        p[mask] = p[mask] + (-step_size) * (numer / denom)


def _sparse_rows(group: dict, rs: RowState) -> tuple:
    """The update of :meth:`SparseAdam._masked` on the rows of a coalesced sparse gradient (PyTorch's order)."""
    r, gv = rs.rows, rs.values
    if gv.size == 0:
        return ()
    lr, eps = as_float(group["lr"]), float(group["eps"])
    b1, b2 = (float(b) for b in group["betas"])
    m, v = rs.state("exp_avg"), rs.state("exp_avg_sq")
    m_old, v_old = m[r], v[r]
    m_upd = (gv - m_old) * (1 - b1)
    v_upd = (gv**2 - v_old) * (1 - b2)
    m[r] = m_old + m_upd
    v[r] = v_old + v_upd
    denom = np.sqrt(v_upd + v_old) + eps
    step_size = lr * math.sqrt(1 - b2**rs.step) / (1 - b1**rs.step)
    rs.p[r] = rs.p[r] + (-step_size) * ((m_upd + m_old) / denom)
    return ("exp_avg", "exp_avg_sq")
