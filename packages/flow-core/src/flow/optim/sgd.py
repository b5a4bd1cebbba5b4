"""``flow.optim.SGD``: stochastic gradient descent with momentum, Nesterov and weight decay."""

from __future__ import annotations

from flow import _dtype as D
from flow.ops import optim as _ops
from flow.optim._hyper import Flag, Real
from flow.optim._sparse_grad import RowState, as_float, no_weight_decay, sparse_step
from flow.optim.errors import OptimizerError
from flow.optim.optimizer import Optimizer, _float


class SGD(Optimizer):
    """torch.optim.SGD: ``p -= lr * d`` with ``d`` the (weight-decayed, momentum-averaged) gradient.

    ``step()`` runs the op ``sgd_update`` (:mod:`flow.ops.optim`) per run of parameters; its CPU
    kernel is one fused native multi-tensor call (``native.sgd_update_multi``) per chunk, each
    parameter updated in its own memory; vectorised NumPy over a gathered copy when the extension
    is missing. float16/bfloat16 parameters are updated in float32 (float32 momentum buffers).

    Sparse gradients (``nn.Embedding(sparse=True)``), as PyTorch: without momentum only their rows
    are updated; with momentum they are used as dense gradients (PyTorch's sparse momentum buffer
    gives the same update); weight decay is refused with them.

    >>> opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    """

    _has_step = False
    _hyper = {"dampening": Real("dampening value", 0.0, 1.0), "nesterov": Flag()}

    def __init__(
        self,
        params,
        lr=1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def step(self, closure=None):
        """One SGD step (see :meth:`flow.optim.Optimizer.step`); sparse gradients as the class docs say."""
        return sparse_step(self, closure, no_weight_decay("SGD"), _sparse_rows, lambda g: g["momentum"] != 0)

    def _check_group(self, group: dict) -> None:
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise OptimizerError(
                f"SGD: Nesterov momentum requires a momentum and zero dampening, got momentum="
                f"{group['momentum']!r} and dampening={group['dampening']!r}"
            )

    def _state_names(self, group: dict) -> dict:
        return {"momentum_buffer": 0.0} if group["momentum"] != 0 else {}

    def _op_attributes(self, group: dict) -> dict:
        if type(self)._update is not SGD._update:  # a subclass with its own update: optimizer_update
            return super()._op_attributes(group)
        return dict(
            momentum=float(group["momentum"]),
            dampening=float(group["dampening"]),
            nesterov=bool(group["nesterov"]),
            weight_decay=float(group["weight_decay"]),
            maximize=bool(group.get("maximize", False)),
            inplace=True,
        )

    def _feed_names(self) -> tuple:
        return ("first_step",) if type(self)._update is SGD._update else super()._feed_names()

    def _update_call(self, group, attrs, b, names, i0, i1, params, grads, states, lr) -> tuple:
        if type(self)._update is not SGD._update:
            return super()._update_call(group, attrs, b, names, i0, i1, params, grads, states, lr)
        first_arr, first = b.feed("first_step", (), D.bool)
        pres = b.present.get("momentum_buffer")
        first_arr[()] = pres is None or not bool(pres[i0])
        return _ops.sgd_update, (params, grads, states, lr, first), attrs

    def _update(self, group, p, g, state, step, layout) -> None:
        buf = state.get("momentum_buffer")
        first = buf is not None and not layout[2]["momentum_buffer"]
        sgd_numpy(
            p,
            g,
            buf,
            _float(group["lr"]),
            float(group["momentum"]),
            float(group["dampening"]),
            bool(group["nesterov"]),
            float(group["weight_decay"]),
            first,
        )


def _sparse_rows(group: dict, rs: RowState) -> tuple:
    """``p[rows] -= lr * g[rows]``: plain SGD with a coalesced sparse gradient touches only its rows."""
    p = rs.p
    p[rs.rows] = p[rs.rows] + (-as_float(group["lr"])) * rs.values
    return ()


def sgd_numpy(p, g, buf, lr, momentum, dampening, nesterov, weight_decay, first_step) -> None:
    """The SGD step of :class:`SGD` in vectorised NumPy (``g`` is scratch and is overwritten)."""
    if weight_decay != 0:
        g += weight_decay * p
    if momentum != 0:
        if first_step:
            buf[...] = g
        else:
            buf *= momentum
            buf += (1 - dampening) * g
        if nesterov:
            g += momentum * buf
        else:
            g = buf
    p -= lr * g
