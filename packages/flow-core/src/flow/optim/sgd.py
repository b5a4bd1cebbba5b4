"""``flow.optim.SGD``: stochastic gradient descent with momentum, Nesterov and weight decay."""

from __future__ import annotations

from flow.optim._flat import use_native
from flow.optim.optimizer import Optimizer, _float, required


class SGD(Optimizer):
    """torch.optim.SGD: ``p -= lr * d`` with ``d`` the (weight-decayed, momentum-averaged) gradient.

    One fused native kernel call (``native.sgd_update``) per parameter group and dtype; a NumPy
    expression over the flat buffers when the extension is missing or for float16/bfloat16
    (updated in float32).
    """

    _has_step = False

    def __init__(self, params, lr=1e-3, momentum: float = 0, dampening: float = 0, weight_decay: float = 0,
                 nesterov: bool = False, *, maximize: bool = False) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize)
        super().__init__(params, defaults)

    def _validate_group(self, group: dict) -> None:
        if group["lr"] is not required and _float(group["lr"]) < 0.0:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if group["momentum"] < 0.0:
            raise ValueError(f"Invalid momentum value: {group['momentum']}")
        if group["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _state_names(self, group: dict) -> dict:
        return {"momentum_buffer": 0.0} if group["momentum"] != 0 else {}

    def _reads_grad_only(self, group, b) -> bool:
        return not b.low and use_native(b.flat)  # the native kernel takes the gradient read-only

    def _update(self, group, p, g, state, step, layout) -> None:
        lr, mom, damp = _float(group["lr"]), float(group["momentum"]), float(group["dampening"])
        wd, nesterov = float(group["weight_decay"]), bool(group["nesterov"])
        buf = state.get("momentum_buffer")
        first = buf is not None and not layout[2]["momentum_buffer"]
        if use_native(p):
            from flow.backends.cpu import native

            native.sgd_update(p, g, buf, lr, mom, damp, nesterov, wd, first)
            return
        sgd_numpy(p, g, buf, lr, mom, damp, nesterov, wd, first)


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
