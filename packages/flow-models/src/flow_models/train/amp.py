"""``flow-train --amp bf16|fp16``: mixed precision through the flow-amp plugin.

Eager steps run the forward pass and the loss inside ``flow.autocast(device_type, dtype=...)``;
a compiled step (``--graph``) gets ``config.enable_amp(True, dtype=...)``, flow-amp's ``amp`` graph
pass. Either way the parameters and the optimizer's states stay float32 (master weights): only
activations and the matmuls/convolutions that make them run low, so checkpoints are float32
whatever ``--amp`` says, and a run can be resumed with another ``--amp``.

float16 has 5 exponent bits: small gradients underflow to zero and large activations overflow. So
``fp16`` scales the loss with a dynamic ``flow.amp.GradScaler`` (eager: the scaled loss's
``backward``, ``scaler.step(optimizer)``, ``scaler.update()``; graph: ``graph.set_grad_scaler``): a
step whose gradients hold inf/nan is skipped and the scale halved, and the scale doubles after
2,000 clean steps. The scaler's state is saved in the checkpoint, so a resumed run goes on with the
scale it had. bfloat16 has float32's exponent range and needs no scaling.

Evaluation runs under the same autocast as the training steps, so the test metrics of a ``--amp``
run are those of the mixed-precision model; sampling (``--sample``, ``flow-generate``) runs in
float32 on the master weights.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import flow
from flow.errors import FeatureNotInstalledError
from flow_models.train.config import TrainConfig, TrainError

__all__ = ["LOW_DTYPES", "check_amp", "MixedPrecision"]

LOW_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # --amp value -> flow dtype name
GRAPH_PASS = "amp"  # the graph pass flow-amp registers for config.enable_amp


def _flow_amp():
    """The ``flow.amp`` module (flow-amp), or a TrainError naming the package to install.

    Looked up through flow's registry of plugin-provided names rather than imported, so that an
    installed flow-amp whose plugin is not loaded (FLOW_PLUGINS, FLOW_DISABLE_PLUGIN_AUTOLOAD) is
    reported as such."""
    from flow import provided

    try:
        return provided.require("amp", "--amp")
    except FeatureNotInstalledError as e:
        raise TrainError(str(e)) from None


def check_amp(cfg: TrainConfig) -> None:
    """Fail before any data is read when ``cfg.amp`` asks for what is not installed: flow-amp itself,
    or (with ``--graph``) its graph pass."""
    if cfg.amp == "none":
        return
    mod = _flow_amp()
    missing = [name for name in ("autocast", "GradScaler") if not hasattr(mod, name)]
    if missing:
        raise TrainError(f"--amp needs {' and '.join(missing)} from flow-amp, which the installed flow-amp lacks")
    if cfg.graph:
        from flow.registry import REGISTRY

        if GRAPH_PASS not in REGISTRY.passes:
            raise TrainError(
                f"--graph --amp {cfg.amp} needs the '{GRAPH_PASS}' graph pass of flow-amp, which the installed "
                "flow-amp does not register; train eagerly (--eager) or update flow-amp"
            )


class MixedPrecision:
    """What ``--amp`` changes in a run: the autocast region of eager steps and of evaluation, loss
    scaling (fp16) and the compiled step's AMP config. With ``amp="none"`` every method does what
    a float32 run does.

    >>> mp = MixedPrecision("fp16", "cpu")
    >>> with mp.autocast():
    ...     loss = task_loss(model, batch)
    >>> mp.backward(loss)  # the scaled loss's backward
    >>> mp.step(optimizer)  # unscale, skip on inf/nan, update the scale
    """

    def __init__(self, amp: str, device: str = "cpu") -> None:
        if amp != "none" and amp not in LOW_DTYPES:
            raise TrainError(f"--amp must be one of {', '.join(LOW_DTYPES)}, none; got {amp!r}")
        self.mode = amp
        self.device_type = device.split(":")[0]
        self.dtype = None
        self.scaler = None
        self._autocast = None
        if amp == "none":
            return
        mod = _flow_amp()
        self.dtype = getattr(flow, LOW_DTYPES[amp])
        self._autocast = mod.autocast
        if amp == "fp16":
            self.scaler = mod.GradScaler(device)

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    def autocast(self):
        """A context that runs its ops in mixed precision (a no-op context for float32 runs)."""
        if self._autocast is None:
            return nullcontext()
        return self._autocast(self.device_type, dtype=self.dtype)

    # -- the eager step ---------------------------------------------------------------------------
    def backward(self, loss) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale_(self, optimizer) -> None:
        """The true gradients in ``.grad`` before the step reads them (gradient clipping needs them)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer) -> None:
        """The optimizer's step; under fp16 skipped when a gradient overflowed, and the scale updated."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    # -- the compiled step ------------------------------------------------------------------------
    def configure_graph(self, graph) -> None:
        """Turn on the AMP graph pass (and in-graph loss scaling for fp16) in an ``nn.Graph``'s ``__init__``."""
        if not self.enabled:
            return
        graph.config.enable_amp(True, dtype=self.dtype)
        if self.scaler is not None:
            graph.set_grad_scaler(self.scaler)

    # -- what runs record -------------------------------------------------------------------------
    def record(self) -> dict:
        """Fields for a metrics record: the loss scale under fp16 (a host read of one number)."""
        return {"loss_scale": self.scaler.get_scale()} if self.scaler is not None else {}

    def state_dict(self) -> dict[str, Any] | None:
        """The loss scaler's state for a checkpoint (None when there is no scaler)."""
        return self.scaler.state_dict() if self.scaler is not None else None

    def load_state_dict(self, state: dict | None) -> None:
        """Continue with a checkpoint's loss scale; a checkpoint of a bf16 or float32 run has none, and
        an fp16 run resumed from it starts from the initial scale."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
