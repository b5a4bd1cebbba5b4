"""flow-train's checkpoints: one safetensors file written atomically by :func:`flow.save`.

It holds everything needed to continue exactly where training stopped: the model's and
optimizer's state (float32 whatever ``--amp`` was: the master weights), the learning-rate
scheduler, the loss scaler of an ``--amp fp16`` run, flow's random-number state, the position in
training (epoch, step within the epoch, global step), the settings of the run, the model's
config (to rebuild it without the data) and what the data told the model (the tokenizer of a
language model, class names), so that ``flow-generate`` can sample from it on its own.
"""

from __future__ import annotations

import os

import flow
from flow.serialization import CheckpointError
from flow_models.train.config import TrainError

__all__ = ["FORMAT", "CHECKPOINT_NAME", "save_checkpoint", "load_checkpoint"]

FORMAT = "flow-train/1"
CHECKPOINT_NAME = "checkpoint.safetensors"


def save_checkpoint(
    path: str,
    *,
    model,
    optimizer,
    scheduler,
    epoch: int,
    step_in_epoch: int,
    global_step: int,
    config: dict,
    model_name: str,
    model_config: dict,
    data: dict,
    best: dict | None = None,
    grad_scaler: dict | None = None,
) -> None:
    state = {
        "format": FORMAT,
        "model_name": model_name,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": flow.get_rng_state(),
        "epoch": int(epoch),
        "step_in_epoch": int(step_in_epoch),
        "global_step": int(global_step),
        "config": config,
        "model_config": model_config,
        "data": data,
        "best": best or {},
        "grad_scaler": grad_scaler or {},  # empty: no loss scaling (float32, bf16)
    }
    flow.save(state, path, metadata={"flow-train.format": FORMAT})


def load_checkpoint(path: str) -> dict:
    """A checkpoint written by flow-train; a missing, corrupt or foreign file raises TrainError naming it."""
    if not os.path.isfile(path):
        raise TrainError(f"checkpoint '{path}' not found")
    try:
        state = flow.load(path)
    except CheckpointError as e:
        raise TrainError(f"cannot load checkpoint '{path}': {e}") from None
    except Exception as e:  # a file that is not safetensors at all
        raise TrainError(f"cannot load checkpoint '{path}': not a flow checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise TrainError(f"'{path}' is not a flow-train checkpoint (it holds no '{FORMAT}' training state)")
    return state
