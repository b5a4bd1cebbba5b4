"""Sharded checkpoints: torch.distributed.checkpoint's ``save`` / ``load`` for flow.

``save(state_dict, checkpoint_id=path)`` (every rank calls it) writes a directory: each rank writes
``__<rank>_0.safetensors`` with only the chunks of global tensors it owns (a piece several ranks
hold, such as a broadcast tensor, is written once, by the first of them; local tensors count as
replicated and are written by rank 0), and rank 0 writes ``.metadata``, the JSON index of every
key (see :mod:`flow_dist.dcp.format`). ``load(state_dict, checkpoint_id=path)`` fills the given
state dict in place; each rank reads only the chunks that overlap its piece of the target layout,
so a checkpoint loads at another world size, into another placement or SBP.

Saving is atomic across ranks: the files go to a temporary directory next to the target, every
rank fsyncs its shard, the ranks agree that all shards are complete, and only then rank 0 writes
``.metadata`` and swaps the directory into place (the previous checkpoint stays until then).

An eager optimizer holds the state of a global parameter as local pieces: :func:`get_state_dict`
makes them global tensors (keyed by parameter name) so that they re-shard, :func:`set_state_dict`
puts them back. ``flow.distributed.checkpoint`` is the public face of this package.
"""

from __future__ import annotations

from flow_dist.dcp.format import CheckpointError
from flow_dist.dcp.load import load
from flow_dist.dcp.save import save
from flow_dist.dcp.state_dict import get_state_dict, set_state_dict

__all__ = ["save", "load", "get_state_dict", "set_state_dict", "CheckpointError"]
