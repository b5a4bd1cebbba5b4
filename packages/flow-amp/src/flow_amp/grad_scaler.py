"""Loss scaling for mixed precision: ``GradScaler`` (dynamic, PyTorch's semantics) and ``StaticGradScaler``.

float16 gradients underflow where the loss's are small; multiplying the loss by a large scale
before ``backward`` keeps them representable, and dividing the gradients by it before the update
gives the true step. Dynamic scaling keeps the scale as large as the gradients allow: a step whose
gradients hold inf/nan is skipped and the scale backed off, and after ``growth_interval`` clean
steps in a row it grows.

>>> scaler = flow_amp.grad_scaler.GradScaler()
>>> for x, y in batches:
...     opt.zero_grad()
...     loss = loss_fn(model(x), y)
...     scaler.scale(loss).backward()
...     scaler.step(opt)      # unscales, skips the update on inf/nan
...     scaler.update()

The unscale and the inf/nan check of an optimizer's gradients are one ``amp_unscale`` op call per
device (see :mod:`flow_amp.loss_scale_ops`), the scale rule one ``amp_update_scale`` call; a compiled
graph (``nn.Graph.set_grad_scaler``) records the same ops.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from flow import _dtype as D
from flow._dispatch import call
from flow._tensor import Tensor
from flow.autograd import no_grad
from flow.errors import FlowError
from flow_amp import loss_scale_ops as ops

__all__ = ["GradScaler", "StaticGradScaler"]

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


def _device(device):
    import flow

    return device if isinstance(device, flow.device) else flow.device(device)


def _host(value, dtype, device) -> Tensor:
    return Tensor._make(np.asarray(value, dtype=dtype.np), dtype, device)


class GradScaler:
    """Dynamic loss scaling (``torch.amp.GradScaler``'s API and semantics).

    ``init_scale``: the first scale; ``growth_factor`` (> 1) multiplies it after ``growth_interval``
    consecutive steps without inf/nan; ``backoff_factor`` (in (0, 1)) multiplies it on a step with
    inf/nan, which is skipped. ``enabled=False`` makes every method a pass-through.

    >>> scaler = GradScaler(init_scale=1024.0, growth_interval=100)
    >>> scaler.scale(flow.tensor(2.0)).item()
    2048.0
    """

    def __init__(
        self,
        device: Any = "cpu",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        self._device = _device(device)
        self._enabled = bool(enabled)
        if self._enabled:
            _check_positive("init_scale", init_scale)
            _check_growth_factor(growth_factor)
            _check_backoff_factor(backoff_factor)
            _check_growth_interval(growth_interval)
        self._init_scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._init_growth_tracker = 0
        self._scale: Tensor | None = None  # (1,) float32, made on first use (as torch's)
        self._growth_tracker: Tensor | None = None  # (1,) int32: consecutive clean steps
        self._per_optimizer: dict[int, dict] = {}  # id(optimizer) -> {"stage", "found_inf"}
        self._found_inf_state: Tensor | None = None  # graph mode: the last compiled step's found_inf

    # -- the scale -------------------------------------------------------------------------------
    def _lazy_init(self) -> None:
        if self._scale is None:
            self._scale = _host([self._init_scale], D.float32, self._device)
            self._growth_tracker = _host([self._init_growth_tracker], D.int32, self._device)

    def _check_started(self, what: str) -> None:
        if self._scale is None:
            raise FlowError(
                f"GradScaler.{what}: the scale does not exist yet; call scaler.scale(loss) (and backward) "
                "earlier in the iteration"
            )

    def scale(self, outputs):
        """``outputs`` (a tensor, or nested lists/tuples of tensors) multiplied by the scale.

        >>> GradScaler(init_scale=4.0).scale([flow.tensor(1.0), (flow.tensor(2.0),)])
        [tensor(4.), (tensor(8.),)]
        """
        if not self._enabled:
            return outputs
        self._lazy_init()
        return self._apply_scale(outputs)

    def _apply_scale(self, val):
        if isinstance(val, Tensor):
            s = self._scale if val.device == self._scale.device else self._scale.to(val.device)
            return val * s
        if isinstance(val, (list, tuple)):
            return type(val)(self._apply_scale(v) for v in val)
        if isinstance(val, Iterable) and not isinstance(val, (str, bytes)):
            return map(self._apply_scale, val)
        raise ValueError(
            f"GradScaler.scale: outputs must be a Tensor or an iterable of Tensors, got {type(val).__name__}"
        )

    def _inv_scale(self) -> Tensor:
        # the reciprocal in float64, rounded to float32 (as torch): exact for the usual powers of two
        return (1.0 / self._scale.to(D.float64)).to(D.float32)

    # -- per optimizer ---------------------------------------------------------------------------
    def _state(self, optimizer) -> dict:
        st = self._per_optimizer.get(id(optimizer))
        if st is None:
            st = self._per_optimizer[id(optimizer)] = {"stage": _READY, "found_inf": {}, "opt": optimizer}
        return st

    def unscale_(self, optimizer) -> None:
        """Divide the ``.grad`` of every parameter of ``optimizer`` by the scale, in place, and record
        whether any holds inf/nan. Call it at most once per optimizer between updates (e.g. to clip
        the true gradients before ``step``)."""
        if not self._enabled:
            return
        self._check_started("unscale_")
        st = self._state(optimizer)
        if st["stage"] is _UNSCALED:
            raise FlowError("GradScaler.unscale_() has already been called on this optimizer since the last update()")
        if st["stage"] is _STEPPED:
            raise FlowError("GradScaler.unscale_() is being called after step()")
        st["found_inf"] = self._unscale_grads(optimizer, self._inv_scale())
        st["stage"] = _UNSCALED

    def _unscale_grads(self, optimizer, inv_scale: Tensor) -> dict:
        by_device: dict = {}
        for gi, group in enumerate(optimizer.param_groups):
            for j, p in enumerate(group["params"]):
                g = p.grad
                if g is None:
                    continue
                if g.dtype is D.float16:
                    # unscaled float16 gradients lose what scaling kept: master weights stay float32
                    raise ValueError(
                        f"GradScaler: attempting to unscale FP16 gradients (param_groups[{gi}]['params'][{j}]); "
                        "keep the parameters in float32 and cast the forward pass instead"
                    )
                if g.grad_fn is not None or g.requires_grad:
                    g = p.grad = g.detach()
                by_device.setdefault(g.device, []).append(g)
        found = {}
        with no_grad():
            for dev, grads in by_device.items():
                inv = inv_scale if inv_scale.device == dev else inv_scale.to(dev)
                found[dev] = call(ops.UNSCALE, grads, inv, inplace=True)[-1]
        if not found:  # no gradients: a clean step (torch records zeros too)
            found[self._device] = _host([0.0], D.float32, self._device)
        return found

    def _found_inf(self, st: dict) -> Tensor:
        vals = list(st["found_inf"].values())
        total = vals[0] if vals[0].device == self._device else vals[0].to(self._device)
        for v in vals[1:]:
            total = total + (v if v.device == self._device else v.to(self._device))
        return total

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless :meth:`unscale_` did) and run ``optimizer.step(*args, **kwargs)`` unless a
        gradient holds inf/nan; returns what it returned, or None for a skipped step."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise FlowError("GradScaler.step: closure use is not supported while the scaler is enabled")
        self._check_started("step")
        st = self._state(optimizer)
        if st["stage"] is _STEPPED:
            raise FlowError("GradScaler.step() has already been called since the last update()")
        if st["stage"] is _READY:
            self.unscale_(optimizer)
        ret = None
        # one host read per optimizer and step (the skip decision), as in torch
        if not float(self._found_inf(st).item()):
            ret = optimizer.step(*args, **kwargs)
        st["stage"] = _STEPPED
        return ret

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Update the scale from this iteration's inf/nan checks (or set it to ``new_scale``, a float or a
        1-element tensor); call it once per iteration, after every ``step``."""
        if not self._enabled:
            return
        self._check_started("update")
        if new_scale is not None:
            self._set_scale(new_scale)
        else:
            states = list(self._per_optimizer.values())
            found = [self._found_inf(st) for st in states if st["found_inf"]]
            if not found:
                raise FlowError("GradScaler.update: no inf/nan checks were recorded (call step() or unscale_() first)")
            total = found[0]
            for f in found[1:]:
                total = total + f
            self._update_scale(total)
        self._per_optimizer = {}

    def _update_scale(self, found_inf: Tensor) -> None:
        dev = self._device
        with no_grad():
            scale, tracker = call(
                ops.UPDATE_SCALE,
                self._scale,
                self._growth_tracker,
                found_inf,
                _host(self._growth_factor, D.float64, dev),
                _host(self._backoff_factor, D.float64, dev),
                _host(self._growth_interval, D.int64, dev),
            )
        self._scale._data[...] = scale._data
        self._growth_tracker._data[...] = tracker._data

    def _set_scale(self, new_scale) -> None:
        if isinstance(new_scale, Tensor):
            if new_scale.numel() != 1 or new_scale.requires_grad:
                raise ValueError(
                    "GradScaler.update: new_scale must be a float or a 1-element tensor that does not require "
                    f"grad, got shape {tuple(new_scale.shape)} (requires_grad={new_scale.requires_grad})"
                )
            value = float(new_scale.item())
        elif isinstance(new_scale, (int, float)) and not isinstance(new_scale, bool):
            value = float(new_scale)
        else:
            raise ValueError(
                f"GradScaler.update: new_scale must be a float or a tensor, got {type(new_scale).__name__}"
            )
        self._scale._data[...] = value

    # -- getters, setters, state -----------------------------------------------------------------
    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        _check_growth_factor(new_factor)
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        _check_backoff_factor(new_factor)
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        _check_growth_interval(new_interval)
        self._growth_interval = int(new_interval)

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker.item())

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """``{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}`` (torch's
        keys); empty when disabled."""
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._get_growth_tracker(),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Load what :meth:`state_dict` returned (a no-op when disabled)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise FlowError(
                "GradScaler.load_state_dict: the state dict is empty, possibly because it was saved from a "
                "disabled GradScaler"
            )
        missing = [
            k
            for k in ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
            if k not in state_dict
        ]
        if missing:
            raise FlowError(f"GradScaler.load_state_dict: missing keys {missing}")
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._scale is not None:
            self._scale._data[...] = self._init_scale
            self._growth_tracker._data[...] = self._init_growth_tracker

    # -- graph mode (nn.Graph.set_grad_scaler) ---------------------------------------------------
    def _trace_begin(self, tracer):
        """Before ``build`` is traced: the scale, growth tracker and found_inf become graph state (bound to
        this scaler's tensors, so eager reads see each run's values); returns backward's seed transform."""
        self._lazy_init()
        if self._found_inf_state is None:
            self._found_inf_state = _host([0.0], D.float32, self._device)
        tracer.add_state_tensor(self._scale, "grad_scaler.scale", "buffer")
        tracer.add_state_tensor(self._growth_tracker, "grad_scaler.growth_tracker", "buffer")
        tracer.add_state_tensor(self._found_inf_state, "grad_scaler.found_inf", "buffer")
        scale = self._scale

        def scaled(seed: Tensor) -> Tensor:
            # loss * scale in the loss's dtype, as the gradient eager mode's scale(loss).backward() sends
            return (seed * scale.reshape(())).to(seed.dtype)

        return scaled

    def _trace_step(self, tracer, optimizers) -> None:
        """After ``build`` (still tracing): unscale and check each optimizer's gradients, record its update
        guarded by its found_inf (the executor skips the update op, so a skipped step costs nothing), then
        the scale update. Mirrors eager ``step`` + ``update`` op for op."""
        from flow.ops.optim import UPDATE_OPS

        inv = self._inv_scale()
        found_all = []
        for _, opt in optimizers:
            grads = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
            if not grads:
                opt.step()
                continue
            with no_grad():
                outs = call(ops.UNSCALE, [p.grad for p in grads], inv, inplace=True)
            # in place on the gradients' buffers, as eager mode (no copy of every gradient); lowering
            # orders any other reader of the scaled gradients first
            tracer.last_node.inplace = {k: k for k in range(len(grads))}
            for p, g in zip(grads, outs[:-1]):
                p.grad = g
            found = outs[-1]
            n0 = len(tracer.ir.nodes)
            opt.step()
            flag = tracer.value_of(found)
            for node in tracer.ir.nodes[n0:]:
                if node.name in UPDATE_OPS:
                    node.tags["skip_if"] = flag
            found_all.append(found)
        if not found_all:
            return
        total = found_all[0]
        for f in found_all[1:]:
            total = total + f
        self._found_inf_state._data = total._data
        self._trace_update(tracer, total)

    def _trace_update(self, tracer, found_inf: Tensor) -> None:
        from flow.ops.meta import TensorMeta

        dev = self._device

        def host(name, dtype, read):
            return tracer.host_input(
                f"grad_scaler.{name}", TensorMeta((), dtype, dev), lambda: np.asarray(read(), dtype=dtype.np)
            )

        with no_grad():
            scale, tracker = call(
                ops.UPDATE_SCALE,
                self._scale,
                self._growth_tracker,
                found_inf,
                host("growth_factor", D.float64, self.get_growth_factor),
                host("backoff_factor", D.float64, self.get_backoff_factor),
                host("growth_interval", D.int64, self.get_growth_interval),
            )
        self._scale._data = scale._data
        self._growth_tracker._data = tracker._data

    def __repr__(self) -> str:
        if not self._enabled:
            return f"{type(self).__name__}(enabled=False)"
        return (
            f"{type(self).__name__}(scale={self.get_scale()}, growth_factor={self._growth_factor}, "
            f"backoff_factor={self._backoff_factor}, growth_interval={self._growth_interval})"
        )


class StaticGradScaler(GradScaler):
    """A fixed loss scale (OneFlow's ``StaticGradScaler``): never updated, but a step whose gradients
    hold inf/nan is still skipped.

    >>> scaler = StaticGradScaler(128.0)
    >>> scaler.scale(flow.tensor(1.0)).item(), scaler.get_scale()
    (128.0, 128.0)
    """

    def __init__(self, scale_factor: float, device: Any = "cpu") -> None:
        _check_positive("scale_factor", scale_factor)
        super().__init__(device, init_scale=scale_factor, growth_interval=1 << 30)

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Ends the iteration (the scale stays; ``new_scale`` is not accepted)."""
        if new_scale is not None:
            raise FlowError("StaticGradScaler.update: the scale is fixed; use GradScaler to change it")
        self._per_optimizer = {}

    def _update_scale(self, found_inf: Tensor) -> None:
        return None

    def _trace_update(self, tracer, found_inf: Tensor) -> None:
        return None


# -- argument checks ------------------------------------------------------------------------------
def _number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"GradScaler: {name} must be a number, got {type(value).__name__}")
    return float(value)


def _check_positive(name: str, value) -> None:
    v = _number(name, value)
    if not (v > 0.0 and np.isfinite(v)):
        raise ValueError(f"GradScaler: {name} must be a finite number > 0, got {value}")


def _check_growth_factor(value) -> None:
    v = _number("growth_factor", value)
    if not (v > 1.0 and np.isfinite(v)):
        raise ValueError(f"GradScaler: growth_factor must be > 1.0, got {value}")


def _check_backoff_factor(value) -> None:
    v = _number("backoff_factor", value)
    if not 0.0 < v < 1.0:
        raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {value}")


def _check_growth_interval(value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"GradScaler: growth_interval must be an int >= 1, got {value!r}")
