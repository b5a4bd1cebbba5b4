"""``flow.distributed.checkpoint``: torch.distributed.checkpoint's ``save`` / ``load``.

A sharded checkpoint is a directory in which each rank writes only its own pieces of the global
tensors, and ``load`` fills a state dict in place, each rank reading only what its piece of the
target layout needs, so it loads at another world size, placement or SBP::

    import flow
    import flow.distributed.checkpoint as dcp

    msd, osd = dcp.get_state_dict(model, opt)          # optimizer states as global tensors
    dcp.save({"model": msd, "optim": osd}, checkpoint_id="ckpt/step_100")   # every rank calls it
    msd, osd = dcp.get_state_dict(model2, opt2)        # another layout, world size, ...
    dcp.load({"model": msd, "optim": osd}, checkpoint_id="ckpt/step_100")   # in place, like torch's
    dcp.set_state_dict(model2, opt2, model_state_dict=msd, optim_state_dict=osd)

``get_state_dict`` / ``set_state_dict`` are torch.distributed.checkpoint.state_dict's: an eager
optimizer holds the state of a global parameter as this rank's local piece, which they turn into a
global tensor laid out like the parameter (keyed by parameter name) and back.

flow-dist does the work (:mod:`flow_dist.dcp`, the format is described there); without it every
call raises :class:`flow.errors.FeatureNotInstalledError` naming the package.
"""

from __future__ import annotations

import os
from typing import Any

from flow import provided
from flow.errors import FeatureNotInstalledError

__all__ = ["save", "load", "get_state_dict", "set_state_dict"]


def _impl(what: str) -> Any:
    mod = provided.get("distributed.checkpoint")
    if mod is None:
        provided.require("comm", f"flow.distributed.checkpoint.{what}")  # raises, naming flow-dist
        raise FeatureNotInstalledError(
            f"flow.distributed.checkpoint.{what} needs a flow-dist that provides sharded checkpoints; upgrade flow-dist"
        )
    return mod


def _only_defaults(what: str, **options: Any) -> None:
    given = [k for k, v in options.items() if v not in (None, False)]
    if given:
        raise NotImplementedError(
            f"flow.distributed.checkpoint.{what}: {', '.join(given)} not supported (the checkpoint is a directory of "
            "safetensors shards over the whole job)"
        )


def save(
    state_dict: dict,
    *,
    checkpoint_id: str | os.PathLike | None = None,
    storage_writer: Any = None,
    planner: Any = None,
    process_group: Any = None,
    no_dist: bool = False,
) -> None:
    """Save ``state_dict`` as the sharded checkpoint directory ``checkpoint_id`` (every rank calls
    it with the same keys). Tensors may be global (each rank writes the pieces it owns) or local
    (taken as replicated: rank 0 writes them); other values (numbers, strings, lists) go into the
    metadata. An existing checkpoint at the path is replaced only once the new one is complete."""
    _only_defaults("save", storage_writer=storage_writer, planner=planner, process_group=process_group, no_dist=no_dist)
    if checkpoint_id is None:
        raise ValueError("flow.distributed.checkpoint.save: give checkpoint_id (the checkpoint directory)")
    _impl("save").save(state_dict, checkpoint_id)


def load(
    state_dict: dict,
    *,
    checkpoint_id: str | os.PathLike | None = None,
    storage_reader: Any = None,
    planner: Any = None,
    process_group: Any = None,
    no_dist: bool = False,
    strict: bool = True,
) -> None:
    """Load the checkpoint ``checkpoint_id`` into ``state_dict`` in place: each tensor receives its
    piece of the saved value in its own layout; other values are replaced. Keys missing from the
    checkpoint, keys it has that ``state_dict`` lacks (unless ``strict=False``), shape or dtype
    mismatches and corrupt chunks raise ``CheckpointError`` naming the keys."""
    _only_defaults("load", storage_reader=storage_reader, planner=planner, process_group=process_group, no_dist=no_dist)
    if checkpoint_id is None:
        raise ValueError("flow.distributed.checkpoint.load: give checkpoint_id (the checkpoint directory)")
    _impl("load").load(state_dict, checkpoint_id, strict=strict)


def get_state_dict(model: Any, optimizers: Any) -> tuple:
    """``(model_state_dict, optimizer_state_dict)`` for a checkpoint: the optimizer's state keyed by
    parameter name, each state tensor of a global parameter a global tensor laid out like it
    (torch.distributed.checkpoint.state_dict.get_state_dict). An optimizer without state yet gets
    it from a step with zero gradients and learning rate 0. Every rank calls it."""
    return _impl("get_state_dict").get_state_dict(model, optimizers)


def set_state_dict(
    model: Any, optimizers: Any, *, model_state_dict: dict | None = None, optim_state_dict: dict | None = None
) -> None:
    """Put state dicts from :func:`get_state_dict` (filled by :func:`load`) back into ``model`` and
    ``optimizers``."""
    _impl("set_state_dict").set_state_dict(
        model, optimizers, model_state_dict=model_state_dict, optim_state_dict=optim_state_dict
    )
